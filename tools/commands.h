// The kvcache CLI's subcommands. Layer: tools (the only layer that reads argv/environment).
// Each subcommand lives in its own cmd_*.cpp: add_X registers its options on the app and
// returns a runner that is called when that subcommand was chosen; the runner returns the
// process exit code (0 ok, 1 error after printing the message to stderr, 2 usage).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace kvcache::tools {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_op_test(CLI::App& app);
Runner add_batch(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_perplexity(CLI::App& app);

// Prints "kvcache COMMAND: MESSAGE" on stderr and returns 1, the error exit code.
int fail(std::string_view command, std::string_view message);
int fail(std::string_view command, const Status& status);

// n per second over `seconds`; 0 for an empty interval.
inline double per_s(int64_t n, double seconds) {
  return seconds > 0.0 ? static_cast<double>(n) / seconds : 0.0;
}

}  // namespace kvcache::tools
