// kvcache inspect FILE | --example: the cache geometry a model file publishes and what it costs
// at a chosen capacity (SPEC §8 cache summary). Thin over program/cache_summary.h.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "cache_flags.h"
#include "commands.h"
#include "core/geometry.h"
#include "core/str_cat.h"
#include "flag_names.h"
#include "program/cache_summary.h"
#include "program/gguf.h"
#include "program/gguf_keys.h"
#include "program/model_geometry.h"

namespace kvcache::tools {
namespace {

struct InspectArgs {
  std::string file;
  bool example = false;
  CacheFlags cache;         // --cache (default cell), --capacity, --kv-dtype, --windows
  int64_t sessions = 0;        // 0 = not given (one session)
  int64_t session_tokens = 0;  // 0 = not given
  int64_t max_write = 0;       // 0 = not given
  bool json = false;
};

int fail(const Status& s) {
  std::fprintf(stderr, "kvcache inspect: %s\n", s.message().c_str());
  return 1;
}

int run_inspect(const InspectArgs& a) {
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
    if (auto name = file->get_string(gguf::key_pattern(gguf::Key::kGeneralArchitecture));
        name.ok())
      arch = *name;
  }
  if (!a.cache.windows.empty()) {
    Result<ModelGeometry> w = with_windows(g, a.cache.windows);
    if (!w.ok()) return fail(invalid_argument(flag_message(w.status(), {kCacheFieldFlags})));
    g = std::move(*w);
  }
  SummaryOptions o;
  o.kind = a.cache.layout;
  o.config.kv_dtype = a.cache.dtype();
  o.config.k_dtype = a.cache.key_dtype();
  o.config.v_dtype = a.cache.value_dtype();
  o.config.kv_rotate = a.cache.rotate();
  if (a.sessions > 0) {
    o.sessions = a.sessions;
    // The cell layout serves this many sequences at once: it sizes the sliding pools.
    if (o.kind == kCellKind) o.config.max_seqs = static_cast<int32_t>(a.sessions);
  }
  if (a.session_tokens > 0) {
    o.session_tokens = a.session_tokens;
    if (a.session_tokens > kMaxCellsFlag / o.sessions)
      return fail(invalid_argument(str_cat("--sessions * --session-tokens = ", o.sessions, " * ",
                                           a.session_tokens, ", expected <= ", kMaxCellsFlag,
                                           " cells")));
    o.config.capacity = o.sessions * a.session_tokens;
  } else if (a.cache.capacity > 0) {
    o.config.capacity = a.cache.capacity;
  } else {
    o.config.capacity = g.max_context > 0 ? std::min(g.max_context, kMaxCellsFlag) : 4096;
  }
  if (a.max_write > 0) {
    o.config.max_write = static_cast<int32_t>(a.max_write);
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
  args->cache.layout = std::string(kCellKind);  // bytes_at_capacity of per-window pools
  add_cache_flags(sub, args->cache,
                  {CacheFlag::kLayout, CacheFlag::kCapacity, CacheFlag::kKvDtype,
                   CacheFlag::kWindows});
  // inspect sizes a pool: 0 cells is no default here (the default is max_context, or 4096).
  CLI::Option* capacity =
      sub->get_option("--capacity")->check(CLI::Range(int64_t{1}, kMaxCellsFlag));
  sub->add_option("--sessions", args->sessions,
                  "Sessions sharing the pool (default 1); the cell layout's sequence bound")
      ->check(CLI::Range(int64_t{1}, kMaxCellsFlag));
  sub->add_option("--session-tokens", args->session_tokens,
                  "Tokens per session; capacity = sessions * session-tokens")
      ->check(CLI::Range(int64_t{1}, kMaxCellsFlag))->excludes(capacity);
  sub->add_option("--max-write", args->max_write,
                  "Most tokens per step (default: the file's max_step_tokens, else the window)")
      ->check(CLI::Range(int64_t{1}, kMaxCellsFlag));
  sub->add_flag("--json", args->json, "Print one JSON object");
  return [args] { return run_inspect(*args); };
}

}  // namespace kvcache::tools
