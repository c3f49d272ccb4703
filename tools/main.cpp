// kvcache: the command-line front over the libraries. Subcommands: inspect, export, run,
// op-test, quantize, tokenize, batch, serve, perplexity. Each lives in its own file
// (commands.h). Every failure ends in a message on stderr and exit 1 (2 for usage); the catch
// below is the last line of defence, not the plan. KVCACHE_ISA caps the kernels' instruction set (cpu/isa.h) for the
// whole process: read here, once, before anything runs; a value it does not know is exit 2.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "cpu/isa.h"

namespace kvcache::tools {

int fail(std::string_view command, std::string_view message) {
  std::fprintf(stderr, "kvcache %.*s: %.*s\n", static_cast<int>(command.size()), command.data(),
               static_cast<int>(message.size()), message.data());
  return 1;
}

int fail(std::string_view command, const Status& status) { return fail(command, status.message()); }

}  // namespace kvcache::tools

int main(int argc, char** argv) {
  if (const char* isa = std::getenv("KVCACHE_ISA"); isa != nullptr) {
    const kvcache::Result<kvcache::cpu::Isa> ceiling = kvcache::cpu::parse_isa_ceiling(isa);
    if (!ceiling.ok()) {
      std::fprintf(stderr, "kvcache: %s\n", ceiling.status().message().c_str());
      return 2;
    }
    kvcache::cpu::set_isa_ceiling(*ceiling);
  }
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
  add(kvcache::tools::add_quantize);
  add(kvcache::tools::add_tokenize);
  add(kvcache::tools::add_serve);
  add(kvcache::tools::add_perplexity);
  // A first word that is no option and no subcommand: name it (CLI11 says only that a
  // subcommand is required).
  const auto named = [&](const char* word) {
    for (const auto& [sub, runner] : commands)
      if (sub->check_name(word)) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !named(argv[1])) {
    std::string known;
    for (const auto& [sub, runner] : commands)
      known += (known.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "kvcache: unknown subcommand '%s', expected one of %s\n", argv[1],
                 known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& [sub, runner] : commands) {
    if (!sub->parsed()) continue;
    try {
      return runner();
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "kvcache %s: out of memory (an allocation failed)\n",
                   sub->get_name().c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvcache %s: internal error: %s\n", sub->get_name().c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "kvcache %s: internal error: unknown exception\n",
                   sub->get_name().c_str());
    }
    return 1;
  }
  return 2;
}
