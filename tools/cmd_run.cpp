// kvcache run — placeholder until its issue lands.
#include <cstdio>

#include "commands.h"

namespace kvcache::tools {

Runner add_run(CLI::App& app) {
  app.add_subcommand("run", "(not built yet)");
  return [] {
    std::fprintf(stderr, "kvcache run: not available in this build yet\n");
    return 1;
  };
}

}  // namespace kvcache::tools
