// kvcache inspect — placeholder until its issue lands.
#include <cstdio>

#include "commands.h"

namespace kvcache::tools {

Runner add_inspect(CLI::App& app) {
  app.add_subcommand("inspect", "(not built yet)");
  return [] {
    std::fprintf(stderr, "kvcache inspect: not available in this build yet\n");
    return 1;
  };
}

}  // namespace kvcache::tools
