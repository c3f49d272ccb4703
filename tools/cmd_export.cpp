// kvcache export — placeholder until its issue lands.
#include <cstdio>

#include "commands.h"

namespace kvcache::tools {

Runner add_export(CLI::App& app) {
  app.add_subcommand("export", "(not built yet)");
  return [] {
    std::fprintf(stderr, "kvcache export: not available in this build yet\n");
    return 1;
  };
}

}  // namespace kvcache::tools
