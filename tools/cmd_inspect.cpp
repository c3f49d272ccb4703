// kvcache inspect FILE | --example: the cache geometry a model file publishes and what it costs
// at a chosen capacity (SPEC §8 cache summary). Thin over program/cache_summary.h.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
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
#include "serve/executor.h"

namespace kvcache::tools {
namespace {

struct InspectArgs {
  std::string file;
  bool example = false;
  CacheFlags cache;  // --cache (default cell), --capacity, --kv-dtype, --windows, --kv-memory
  int64_t sessions = 0;        // 0 = not given (one session)
  int64_t session_tokens = 0;  // 0 = not given
  int64_t max_write = 0;       // 0 = not given
  bool json = false;
};

int usage(const std::string& message) {
  std::fprintf(stderr, "kvcache inspect: %s\n", message.c_str());
  return 2;
}

// engine::SessionPool's fields as inspect names them.
constexpr FieldFlag kInspectFieldFlags[] = {
    {"kv_memory", "--kv-memory"},
    {"max_sessions", "--sessions"},
    {"max_session_tokens", "--session-tokens"},
    {"pool_cells", "--capacity"},
};

// Tensors and their data bytes per stored type (MXFP4 experts, Q4_K matrices, F32 norms ...),
// in type-number order; a type of unknown block size counts with 0 bytes (never refused).
struct TypeCount {
  int64_t tensors = 0;
  uint64_t bytes = 0;
};
std::map<gguf::TensorType, TypeCount> weight_types(const gguf::GgufFile& f) {
  std::map<gguf::TensorType, TypeCount> types;
  for (const gguf::TensorInfo& t : f.tensors()) {
    TypeCount& c = types[t.type];
    ++c.tensors;
    c.bytes += t.bytes.size();
  }
  return types;
}

std::string weight_types_text(const std::map<gguf::TensorType, TypeCount>& types) {
  std::string s;
  uint64_t bytes = 0;
  for (const auto& [type, c] : types) {
    s += str_cat(s.empty() ? "weights: " : ", ", c.tensors, " ", gguf::to_string(type));
    bytes += c.bytes;
  }
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.2f", static_cast<double>(bytes) / 1e6);
  return s.empty() ? "weights: none\n" : str_cat(s, " (", mb, " MB of tensor data)\n");
}

// A mixture of experts' expert_count / expert_used_count / expert width, as the file states
// them (count 0: dense, or not stated). inspect describes; the loader validates.
struct Experts {
  int64_t count = 0, used = 0, width = 0;
};

Experts read_experts(const gguf::GgufFile& f) {
  Experts e;
  Result<gguf::KeyReader> keys = gguf::KeyReader::open(f);
  if (!keys.ok()) return e;
  auto get = [&](gguf::Key key, int64_t fallback) {
    Result<int64_t> v = keys->get_int_or(key, fallback);
    return v.ok() ? *v : fallback;
  };
  e.count = get(gguf::Key::kExpertCount, 0);
  e.used = get(gguf::Key::kExpertUsedCount, 0);
  e.width = get(gguf::Key::kExpertFeedForwardLength, get(gguf::Key::kFeedForwardLength, 0));
  return e;
}

int run_inspect(const InspectArgs& a) {
  if (a.example == !a.file.empty())
    return fail("inspect", invalid_argument("give either a model FILE or --example"));
  ModelGeometry g;
  std::string arch;
  std::map<gguf::TensorType, TypeCount> types;
  Experts experts;
  if (a.example) {
    g = example_model_geometry();
    arch = "example (Gemma-3-like)";
  } else {
    auto file = gguf::GgufFile::open(a.file);
    if (!file.ok()) return fail("inspect", file.status());
    auto geometry = read_model_geometry(*file);
    if (!geometry.ok()) return fail("inspect", geometry.status());
    g = std::move(geometry).value();
    types = weight_types(*file);
    if (auto name = file->get_string(gguf::key_pattern(gguf::Key::kGeneralArchitecture));
        name.ok())
      arch = *name;
    experts = read_experts(*file);
  }
  // The cache the options ask for, planned as run, batch and serve plan theirs.
  engine::CacheOptions co = cache_options(a.cache);
  if (a.max_write > 0) co.max_step_tokens = a.max_write;
  const bool sessions = a.sessions > 0 || a.session_tokens > 0;
  SummaryOptions o;
  Result<engine::CacheSetup> setup = invalid_argument("not planned");
  if (sessions) {
    // The pool batch and serve build for --max-sessions / --max-session-tokens (default prefix
    // checkpoints): one sizing rule, engine::plan_session_pool.
    if (co.kind != kCellKind)
      return usage("--sessions / --session-tokens size the cell pool of batch and serve; not "
                   "with --cache " + co.kind);
    engine::SessionPool sp;
    sp.max_sessions = static_cast<int32_t>(std::max<int64_t>(a.sessions, 1));
    sp.max_session_tokens = a.session_tokens;
    if (a.cache.capacity > 0) sp.pool_cells = a.cache.capacity;
    sp.retained_seqs = serve::ExecutorOptions{}.prefix_checkpoints;
    sp.kv_memory = a.cache.kv_memory;
    Result<engine::SessionPlan> plan = engine::plan_session_pool(g, g.max_context, co, sp);
    if (plan.ok()) {
      o.sessions = plan->max_sessions;
      o.session_tokens = plan->max_session_tokens;
      setup = std::move(plan->setup);
    } else {
      setup = plan.status();
    }
  } else {
    // inspect's default capacity is the model's whole context (run's is capped at 4096).
    if (!co.capacity && !co.kv_memory)
      co.capacity = g.max_context > 0 ? std::min(g.max_context, kMaxCellsFlag) : 4096;
    setup = engine::plan_cache(g, g.max_context, co);
  }
  if (!setup.ok()) {
    fail("inspect", invalid_argument(flag_message(setup.status(), {kInspectFieldFlags, kCacheFieldFlags})));
    return plan_exit_code(setup.status());
  }
  g.cache = setup->geometry;
  o.kind = setup->kind;
  o.config = setup->config;
  o.kv_memory = setup->kv_memory;
  nlohmann::json j = cache_summary_json(g, o);
  if (j.contains("error")) return fail("inspect", invalid_argument(j["error"].get<std::string>()));
  if (a.json) {
    j["file"] = a.example ? "" : a.file;
    j["architecture"] = arch;
    if (!a.example) {
      j["weights"] = nlohmann::json::array();
      for (const auto& [type, c] : types)
        j["weights"].push_back(
            {{"type", gguf::to_string(type)}, {"tensors", c.tensors}, {"bytes", c.bytes}});
    }
    if (experts.count > 0)
      j["experts"] = {{"count", experts.count}, {"used", experts.used},
                      {"feed_forward_length", experts.width}};
    // A path or a GGUF string need not be UTF-8: invalid bytes print as U+FFFD.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << (a.example ? std::string("example geometry") : "file " + a.file)
              << (arch.empty() ? "" : ", architecture " + arch) << "\n"
              << (a.example ? std::string() : weight_types_text(types));
    if (experts.count > 0)
      std::cout << "experts: " << experts.count << " per layer, " << experts.used
                << " used per token, width " << experts.width << "\n";
    std::cout << cache_summary_text(g, o);
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
                   CacheFlag::kWindows, CacheFlag::kKvMemory});
  // inspect sizes a pool: 0 cells is no default here (the default is max_context, or 4096).
  CLI::Option* capacity =
      sub->get_option("--capacity")->check(CLI::Range(int64_t{1}, kMaxCellsFlag));
  sub->add_option("--sessions", args->sessions,
                  "Sessions sharing the cell pool, sized as batch/serve --max-sessions (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{engine::kMaxPoolSessions}));
  sub->add_option("--session-tokens", args->session_tokens,
                  "Tokens per session (batch/serve --max-session-tokens); capacity = sessions * "
                  "session-tokens")
      ->check(CLI::Range(int64_t{1}, kMaxCellsFlag))->excludes(capacity);
  sub->add_option("--max-write", args->max_write,
                  "Most tokens per step (default: the file's max_step_tokens, else 512; may "
                  "exceed a sliding window, whose ring then holds W + step - 1 rows)")
      ->check(CLI::Range(int64_t{1}, kMaxCellsFlag));
  sub->add_flag("--json", args->json, "Print one JSON object");
  refuse_beside_kv_memory(sub);
  return [args] { return run_inspect(*args); };
}

}  // namespace kvcache::tools
