// kvcache op-test — placeholder until its issue lands.
#include <cstdio>

#include "commands.h"

namespace kvcache::tools {

Runner add_op_test(CLI::App& app) {
  app.add_subcommand("op-test", "(not built yet)");
  return [] {
    std::fprintf(stderr, "kvcache op-test: not available in this build yet\n");
    return 1;
  };
}

}  // namespace kvcache::tools
