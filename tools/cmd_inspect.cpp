// kvcache inspect FILE | --example: the cache geometry a model file publishes and what it costs
// at a chosen capacity (SPEC §8 cache summary). Thin over program/cache_summary.h.
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "commands.h"
#include "core/geometry.h"
#include "program/cache_summary.h"
#include "program/gguf.h"
#include "program/model_geometry.h"

namespace kvcache::tools {
namespace {

struct InspectArgs {
  std::string file;
  bool example = false;
  std::string capacity, sessions, session_tokens, max_write;
  std::string kv_dtype = "f32";
  std::string cache = "cell";
  std::string windows;
  bool json = false;
};

// A whole decimal integer in [lo, hi]; the error names the flag.
Result<int64_t> parse_flag_int(const std::string& flag, const std::string& text, int64_t lo,
                               int64_t hi) {
  const std::string bad = flag + " = '" + text + "', expected an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument(bad);
  const int64_t v = std::stoll(text);
  if (v < lo || v > hi) return invalid_argument(bad);
  return v;
}

int fail(const Status& s) {
  std::fprintf(stderr, "kvcache inspect: %s\n", s.message().c_str());
  return 1;
}

int run_inspect(const InspectArgs& a) {
  constexpr int64_t kMaxCells = std::numeric_limits<int32_t>::max();
  if (a.example == !a.file.empty())
    return fail(invalid_argument("give either a model FILE or --example"));
  ModelGeometry g;
  std::string arch;
  if (a.example) {
    g = example_model_geometry();
    arch = "example (Gemma-3-like)";
  } else {
    auto file = gguf::GgufFile::open(a.file);
    if (!file.ok()) return fail(file.status());
    auto geometry = read_model_geometry(*file);
    if (!geometry.ok()) return fail(geometry.status());
    g = std::move(geometry).value();
    if (auto name = file->get_string("general.architecture"); name.ok()) arch = *name;
  }
  if (!a.windows.empty()) {
    auto pattern = parse_window_list(a.windows, "--windows");
    if (!pattern.ok()) return fail(pattern.status());
    g = with_windows(g, *pattern);
  }
  SummaryOptions o;
  if (a.cache != "cell" && a.cache != "sequence")
    return fail(invalid_argument("--cache = '" + a.cache + "', expected sequence or cell"));
  o.kind = a.cache;
  auto dtype = parse_dtype(a.kv_dtype);
  if (!dtype) return fail(invalid_argument("--kv-dtype = '" + a.kv_dtype + "', expected f32, f16 or bf16"));
  o.config.kv_dtype = *dtype;
  if (!a.capacity.empty() && !a.session_tokens.empty())
    return fail(invalid_argument("--capacity and --session-tokens exclude each other"));
  if (!a.sessions.empty()) {
    auto s = parse_flag_int("--sessions", a.sessions, 1, kMaxCells);
    if (!s.ok()) return fail(s.status());
    o.sessions = *s;
    // The cell layout serves this many sequences at once: it sizes the sliding pools.
    if (a.cache == "cell") o.config.max_seqs = static_cast<int32_t>(*s);
  }
  if (!a.session_tokens.empty()) {
    auto t = parse_flag_int("--session-tokens", a.session_tokens, 1, kMaxCells);
    if (!t.ok()) return fail(t.status());
    o.session_tokens = *t;
    if (*t > kMaxCells / o.sessions)
      return fail(invalid_argument("--sessions * --session-tokens = " + std::to_string(o.sessions) +
                                   " * " + std::to_string(*t) + ", expected <= 2147483647 cells"));
    o.config.capacity = o.sessions * *t;
  } else if (!a.capacity.empty()) {
    auto c = parse_flag_int("--capacity", a.capacity, 1, kMaxCells);
    if (!c.ok()) return fail(c.status());
    o.config.capacity = *c;
  } else {
    o.config.capacity = g.max_context > 0 ? std::min<int64_t>(g.max_context, kMaxCells) : 4096;
  }
  if (!a.max_write.empty()) {
    auto m = parse_flag_int("--max-write", a.max_write, 1, kMaxCells);
    if (!m.ok()) return fail(m.status());
    o.config.max_write = static_cast<int32_t>(*m);
  } else if (g.max_step_tokens > 0) {
    o.config.max_write = static_cast<int32_t>(g.max_step_tokens);
  }
  nlohmann::json j = cache_summary_json(g, o);
  if (j.contains("error")) return fail(invalid_argument(j["error"].get<std::string>()));
  if (a.json) {
    j["file"] = a.example ? "" : a.file;
    j["architecture"] = arch;
    // A path or a GGUF string need not be UTF-8: invalid bytes print as U+FFFD.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << (a.example ? std::string("example geometry") : "file " + a.file)
              << (arch.empty() ? "" : ", architecture " + arch) << "\n"
              << cache_summary_text(g, o);
  }
  return 0;
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Show a model's cache geometry and its memory cost");
  sub->add_option("file", args->file, "GGUF model file");
  sub->add_flag("--example", args->example, "Use a built-in Gemma-3-like geometry (no file)");
  sub->add_option("--capacity", args->capacity, "Cells in the pool (default: max_context or 4096)");
  sub->add_option("--cache", args->cache,
                  "Layout bytes_at_capacity is for: cell (default; per-window pools) or sequence");
  sub->add_option("--sessions", args->sessions,
                  "Sessions sharing the pool (default 1); the cell layout's sequence bound");
  sub->add_option("--session-tokens", args->session_tokens,
                  "Tokens per session; capacity = sessions * session-tokens");
  sub->add_option("--kv-dtype", args->kv_dtype, "K/V storage type: f32, f16, bf16 (default f32, as CacheConfig)");
  sub->add_option("--max-write", args->max_write,
                  "Most tokens per step (default: the file's max_step_tokens, else the window)");
  sub->add_option("--windows", args->windows,
                  "Comma list of windows cycled over cache layers (0 = full)");
  sub->add_flag("--json", args->json, "Print one JSON object");
  return [args] { return run_inspect(*args); };
}

}  // namespace kvcache::tools
