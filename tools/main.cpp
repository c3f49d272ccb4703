// kvcache: the command-line front over the libraries. Subcommands: inspect, export, run,
// op-test. Each lives in its own file (commands.h).
#include <cstdio>
#include <utility>
#include <vector>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvcache: a KV-cache runtime for LLM inference on CPU"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, kvcache::tools::Runner>> commands;
  auto add = [&](kvcache::tools::Runner (*fn)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    kvcache::tools::Runner runner = fn(app);
    commands.emplace_back(app.get_subcommands({}).at(before), std::move(runner));
  };
  add(kvcache::tools::add_run);
  add(kvcache::tools::add_inspect);
  add(kvcache::tools::add_export);
  add(kvcache::tools::add_op_test);
  add(kvcache::tools::add_batch);
  add(kvcache::tools::add_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& [sub, runner] : commands)
    if (sub->parsed()) return runner();
  return 2;
}
