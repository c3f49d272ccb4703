// kvcache batch [MODEL] --prompts-file F.jsonl: many requests through the batching executor
// (sessions over one cell pool, continuous batching, prefix sharing, n > 1 by fork). Without
// --json each completion's text is printed as it finishes and a summary goes to stderr; with
// --json one object on stdout (SPEC §12). The JSON Lines input is parsed and checked whole
// before any work starts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache_flags.h"
#include "commands.h"
#include "draft_flags.h"
#include "core/str_cat.h"
#include "cpu/thread_pool.h"
#include "engine/runtime.h"
#include "flag_names.h"
#include "program/cache_summary.h"
#include "serve/executor.h"
#include "server/api.h"

namespace kvcache::tools {
namespace {

using nlohmann::json;

constexpr std::uintmax_t kMaxPromptsFileBytes = std::uintmax_t{256} << 20;

struct BatchFlags {
  std::string model;
  std::string prompts_file;
  CacheFlags cache;  // sessions, session tokens, K/V dtype, initial capacity, threads
  int64_t pool_tokens = 0;
  int32_t max_new_tokens = 64;
  int64_t step_tokens = 0;
  int32_t block_tokens = serve::kDefaultBlockTokens;
  int32_t prefix_checkpoints = serve::ExecutorOptions{}.prefix_checkpoints;
  std::string kv_store;
  int32_t kv_store_wait_ms = 1000;
  double temperature = 0.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int32_t n = 1;
  bool no_prefix_cache = false;
  bool ignore_eos = false;
  bool json = false;
  DraftFlags draft;
};

struct Input {
  std::vector<int32_t> prompt;
  serve::GenerateParams params;
};

void add_flags(CLI::App* cmd, BatchFlags& f) {
  cmd->add_option("model", f.model, "GGUF model file (default: the embedded tiny model)");
  cmd->add_option("--prompts-file", f.prompts_file,
                  "JSON Lines: {\"prompt\" | \"prompt_ids\", \"max_new_tokens\"?, "
                  "\"temperature\"?, \"top_k\"?, \"top_p\"?, \"seed\"?, \"n\"?, \"stop\"?, "
                  "\"response_format\"?, \"draft\"?}")
      ->required();
  add_cache_flags(cmd, f.cache,
                  {CacheFlag::kMaxSessions, CacheFlag::kMaxSessionTokens, CacheFlag::kKvDtype,
                   CacheFlag::kInitialCapacity, CacheFlag::kThreads, CacheFlag::kMapWeights,
                   CacheFlag::kKvMemory});
  cmd->add_option("--pool-tokens", f.pool_tokens,
                  "Cells in the pool; 0 = max-sessions * max-session-tokens (smaller may "
                  "preempt)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31))->capture_default_str();
  cmd->add_option("--max-new-tokens", f.max_new_tokens, "Default tokens to generate")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_option("--step-tokens", f.step_tokens,
                  "Prefill chunk per session and step budget; 0 = the model's")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--kv-block-tokens", f.block_tokens, "Prefix-index block in tokens")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--kv-store", f.kv_store,
                  "Share prefix blocks with other replicas through redis://HOST:PORT[/DB]");
  cmd->add_option("--kv-store-wait-ms", f.kv_store_wait_ms,
                  "Longest wait of a request for the store's answer before it prefills")
      ->check(CLI::Range(0, 60000))->capture_default_str();
  cmd->add_option("--temperature", f.temperature, "Default sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "Default top-k; 0 = all")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "Default nucleus mass in (0, 1]")
      ->check(CLI::Range(1e-9, 1.0))->capture_default_str();
  cmd->add_option("--seed", f.seed, "Default seed (completion i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--n", f.n, "Default completions per prompt")
      ->check(CLI::Range(1, 128))->capture_default_str();
  cmd->add_flag("--no-prefix-cache", f.no_prefix_cache, "Prefill every prompt in full");
  cmd->add_option("--prefix-checkpoints", f.prefix_checkpoints,
                  "Sliding-window models: prompt checkpoints kept at block boundaries, so a "
                  "prompt sharing only a prefix reuses it (each W - 1 cells per sliding pool)")
      ->check(CLI::Range(0, 128))->capture_default_str();
  cmd->add_flag("--ignore-eos", f.ignore_eos, "Do not stop at end-of-generation tokens");
  cmd->add_flag("--json", f.json, "Print one JSON object on stdout");
  add_draft_flags(cmd, f.draft);
  refuse_beside_kv_memory(cmd);
}

// Reads the whole prompts file after checking it is a regular file of bounded size.
Result<std::string> read_prompts_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return not_found("--prompts-file " + path + ": no such file");
  if (!std::filesystem::is_regular_file(st))
    return invalid_argument("--prompts-file " + path + ": not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxPromptsFileBytes)
    return invalid_argument("--prompts-file " + path + ": larger than 256 MiB");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) return data_loss("--prompts-file " + path + ": read failed");
  return ss.str();
}

template <class T>
Status read_number(const json& obj, const char* key, T lo, T hi, T& out, const std::string& at) {
  if (!obj.contains(key)) return ok_status();
  const json& v = obj.at(key);
  if (!v.is_number()) return invalid_argument(at + ": \"" + key + "\" is not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi) ||
      (std::is_integral_v<T> && d != std::floor(d)))
    return invalid_argument(str_cat(at, ": \"", key, "\" = ", v.dump(), ", expected ",
                                    (std::is_integral_v<T> ? "an integer" : "a number"), " in [",
                                    lo, ", ", hi, "]"));
  out = std::is_integral_v<T> ? static_cast<T>(v.get<int64_t>()) : static_cast<T>(d);
  return ok_status();
}

Status read_prompt(const json& obj, const engine::LoadedModel& m,
                   std::vector<int32_t>& out, const std::string& at) {
  const bool text = obj.contains("prompt"), ids = obj.contains("prompt_ids");
  if (text == ids) return invalid_argument(at + ": expected exactly one of \"prompt\", \"prompt_ids\"");
  if (text) {
    if (!obj.at("prompt").is_string()) return invalid_argument(at + ": \"prompt\" is not a string");
    Result<std::vector<int32_t>> enc = m.tokenizer->encode(obj.at("prompt").get<std::string>());
    if (!enc.ok()) return Status(enc.status().code(), at + ": " + enc.status().message());
    out = std::move(*enc);
  } else {
    const json& a = obj.at("prompt_ids");
    if (!a.is_array()) return invalid_argument(at + ": \"prompt_ids\" is not an array");
    const int64_t vocab = m.model->hparams().vocab;
    for (const json& v : a) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
        return invalid_argument(str_cat(at, ": prompt_ids entry ", v.dump(),
                                        ", expected an id in [0, ", vocab, ")"));
      out.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  if (out.empty()) return invalid_argument(at + ": the prompt is empty");
  return ok_status();
}

Status read_request(const json& obj, std::string_view line, const BatchFlags& f,
                    const engine::LoadedModel& m, Input& in, const std::string& at) {
  if (!obj.is_object()) return invalid_argument(at + ": expected a JSON object");
  static const char* kKeys[] = {"prompt", "prompt_ids", "max_new_tokens", "temperature", "top_k",
                                "top_p", "seed", "n", "stop", "response_format", "draft"};
  for (const auto& [key, value] : obj.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      return invalid_argument(at + ": unknown field \"" + key + "\"");
  KVCACHE_RETURN_IF_ERROR(read_prompt(obj, m, in.prompt, at));
  serve::GenerateParams& p = in.params;
  p.max_new_tokens = f.max_new_tokens;
  p.sampling.temperature = static_cast<float>(f.temperature);
  p.sampling.top_k = f.top_k;
  p.sampling.top_p = static_cast<float>(f.top_p);
  p.sampling.seed = f.seed;
  p.n = f.n;
  p.ignore_eos = f.ignore_eos;
  KVCACHE_RETURN_IF_ERROR(read_number<int32_t>(obj, "max_new_tokens", 0, 1 << 20, p.max_new_tokens, at));
  KVCACHE_RETURN_IF_ERROR(read_number<float>(obj, "temperature", 0.0f, 100.0f, p.sampling.temperature, at));
  KVCACHE_RETURN_IF_ERROR(read_number<int32_t>(obj, "top_k", 0, 1 << 24, p.sampling.top_k, at));
  KVCACHE_RETURN_IF_ERROR(read_number<float>(obj, "top_p", 1e-9f, 1.0f, p.sampling.top_p, at));
  KVCACHE_RETURN_IF_ERROR(read_number<int32_t>(obj, "n", 1, 128, p.n, at));
  if (obj.contains("seed")) {
    if (!obj.at("seed").is_number_unsigned() && !(obj.at("seed").is_number_integer() &&
                                                  obj.at("seed").get<int64_t>() >= 0))
      return invalid_argument(at + ": \"seed\" is not a non-negative integer");
    p.sampling.seed = obj.at("seed").get<uint64_t>();
  }
  if (obj.contains("stop")) {
    const json& s = obj.at("stop");
    if (!s.is_array()) return invalid_argument(at + ": \"stop\" is not a list of strings");
    for (const json& v : s) {
      if (!v.is_string() || v.get<std::string>().empty())
        return invalid_argument(at + ": \"stop\" holds " + v.dump() + ", expected non-empty strings");
      p.stop.push_back(v.get<std::string>());
    }
  }
  if (obj.contains("draft")) {  // false: this request decodes plainly under --draft
    if (!obj.at("draft").is_boolean()) return invalid_argument(at + ": \"draft\" is not a boolean");
    p.draft = obj.at("draft").get<bool>();
  }
  if (obj.contains("response_format")) {  // as on /v1/completions (docs/server.md)
    const auto ordered = nlohmann::ordered_json::parse(line, nullptr, false);
    if (auto e = server::parse_response_format(ordered.at("response_format"), p))
      return invalid_argument(at + ": " + e->message);
  }
  return ok_status();
}

Result<std::vector<Input>> read_inputs(const BatchFlags& f, const engine::LoadedModel& m) {
  Result<std::string> text = read_prompts_file(f.prompts_file);
  if (!text.ok()) return text.status();
  std::vector<Input> inputs;
  std::istringstream lines(*text);
  std::string line;
  for (int64_t no = 1; std::getline(lines, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = str_cat(f.prompts_file, ":", no);
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return invalid_argument(at + ": not valid JSON");
    Input in;
    KVCACHE_RETURN_IF_ERROR(read_request(obj, line, f, m, in, at));
    inputs.push_back(std::move(in));
  }
  if (inputs.empty()) return invalid_argument("--prompts-file " + f.prompts_file + ": no requests");
  return inputs;
}

// Drafting figures: tokens_per_step = tokens the cache kept per decode step (1 = plain).
json draft_json(int64_t steps, int64_t drafted, int64_t accepted) {
  return json{{"steps", steps},
              {"drafted", drafted},
              {"accepted", accepted},
              {"acceptance", drafted > 0 ? double(accepted) / double(drafted) : 0.0},
              {"tokens_per_step", steps > 0 ? double(steps + accepted) / double(steps) : 0.0}};
}

json result_json(const serve::RequestResult& r, size_t index) {
  json j;
  j["index"] = index;
  j["prompt_tokens"] = r.prompt_tokens;
  j["cached_prompt_tokens"] = r.cached_prompt_tokens;
  json cs = json::array();
  for (const serve::Completion& c : r.completions) {
    json cj;
    cj["text"] = c.text;
    cj["tokens"] = c.tokens;
    cj["finish_reason"] = std::string(serve::to_string(c.finish));
    if (c.draft.steps > 0) cj["draft"] = draft_json(c.draft.steps, c.draft.drafted, c.draft.accepted);
    cs.push_back(std::move(cj));
  }
  j["completions"] = std::move(cs);
  return j;
}

json store_json(const serve::ExecutorStats& s) {
  json j;
  j["hit_tokens"] = s.store_hit_tokens;
  j["hit_blocks"] = s.store.hit_blocks;
  j["lookups"] = s.store.lookups;
  j["misses"] = s.store.misses;
  j["timeouts"] = s.store_timeouts;
  j["bytes_in"] = s.store.bytes_in;
  j["bytes_out"] = s.store.bytes_out;
  j["puts"] = s.store.puts;
  j["puts_existing"] = s.store.puts_existing;
  j["puts_dropped"] = s.store.puts_dropped;
  j["checksum_failures"] = s.store.checksum_failures;
  j["rejected_blocks"] = s.store.rejected_blocks;
  j["errors"] = s.store.errors;
  return j;
}

int run_batch(const BatchFlags& f) {
  apply_threads(f.cache);
  Result<engine::LoadedModel> m =
      engine::load_model(engine::ModelSource::file(f.model), load_options(f.cache));
  if (!m.ok()) return fail("batch", m.status().message());
  Result<std::vector<Input>> inputs = read_inputs(f, *m);
  if (!inputs.ok()) return fail("batch", inputs.status().message());
  serve::ExecutorOptions o;
  o.max_sessions = f.cache.max_sessions;
  o.max_session_tokens = f.cache.max_session_tokens;
  if (f.pool_tokens > 0) o.pool_cells = f.pool_tokens;
  o.kv_memory = f.cache.kv_memory;
  o.kv_dtype = f.cache.dtype();
  o.k_dtype = f.cache.key_dtype();
  o.v_dtype = f.cache.value_dtype();
  o.kv_rotate = f.cache.rotate();
  o.initial_capacity = f.cache.initial_capacity;
  o.step_tokens = f.step_tokens;
  o.prefix_cache = !f.no_prefix_cache;
  o.block_tokens = f.block_tokens;
  o.prefix_checkpoints = f.prefix_checkpoints;
  o.kv_store = f.kv_store;
  o.store_wait_ms = f.kv_store_wait_ms;
  o.eog_ids = m->eog_ids;
  ExecutorDraft draft;
  if (std::optional<DraftError> de = make_executor_drafter(
          f.draft, *m, cache_options(f.cache), load_options(f.cache), o, draft)) {
    fail("batch", de->message);
    return de->usage ? 2 : 1;
  }
  Result<std::unique_ptr<serve::Executor>> ex = serve::Executor::create(*m->model, &*m->tokenizer, o);
  if (!ex.ok()) {
    fail("batch", flag_message(ex.status(), {kExecutorFieldFlags}));
    return plan_exit_code(ex.status());
  }
  serve::Executor& e = **ex;
  Result<std::string> drafting = executor_draft_summary(draft, o, e);
  if (!drafting.ok()) return fail("batch", "--draft: " + drafting.status().message());
  ModelGeometry g = m->model->geometry();
  g.cache = e.setup().geometry;
  SummaryOptions so;
  so.config = e.setup().config;
  so.sessions = e.max_sessions();
  so.session_tokens = e.max_session_tokens();
  so.kv_memory = e.setup().kv_memory;
  std::fprintf(stderr, "%s%s", cache_summary_text(g, so).c_str(), drafting->c_str());
  std::vector<int64_t> ids;  // request id per input
  for (size_t i = 0; i < inputs->size(); ++i) {
    Result<int64_t> id = e.submit((*inputs)[i].prompt, (*inputs)[i].params);
    if (!id.ok()) return fail("batch", str_cat(f.prompts_file, ": request ", i + 1, ": ",
                                      id.status().message()));
    ids.push_back(*id);
  }
  std::vector<std::optional<serve::RequestResult>> results(inputs->size());
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0;
  while (!e.idle()) {
    Status st = e.step();
    if (!st.ok()) return fail("batch", st.message());
    for (serve::RequestResult& r : e.take_finished()) {
      const size_t index = static_cast<size_t>(
          std::find(ids.begin(), ids.end(), r.id) - ids.begin());
      if (!f.json)
        for (const serve::Completion& c : r.completions)
          std::printf("[%zu] %s\n", index, c.text.c_str());
      results[index] = std::move(r);
      ++done;
    }
    if (tty && !f.json)
      std::fprintf(stderr, "\rkvcache batch: %zu/%zu requests done, %d running, %d waiting ", done,
                   results.size(), e.stats().running, e.stats().waiting);
  }
  if (tty && !f.json) std::fprintf(stderr, "\n");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Blocks still queued for the store are written before exit (so the counters are final).
  if (!e.flush_store(std::chrono::seconds(30)))
    std::fprintf(stderr, "kvcache batch: warning: blocks still queued for the store were dropped\n");
  const serve::ExecutorStats s = e.stats();
  const double dec = per_s(s.decode_tokens, s.decode_seconds);
  const double pre = per_s(s.prefill_tokens, s.prefill_seconds);
  if (f.json) {
    json j;
    j["results"] = json::array();
    for (size_t i = 0; i < results.size(); ++i) j["results"].push_back(result_json(*results[i], i));
    j["decode_tokens_per_s"] = dec;
    j["prefill_tokens_per_s"] = pre;
    j["prefix_hit_tokens"] = s.prefix_hit_tokens;
    j["prefix_miss_tokens"] = s.prefix_miss_tokens;
    j["evictions"] = s.evictions;
    j["checkpoints_taken"] = s.checkpoints_taken;
    j["checkpoints"] = s.checkpoints;
    j["preemptions"] = s.preemptions;
    j["max_sessions"] = e.max_sessions();
    j["peak_running"] = s.peak_running;
    j["steps"] = s.steps;
    j["decode_tokens"] = s.decode_tokens;
    j["prefill_tokens"] = s.prefill_tokens;
    j["seconds"] = wall;
    j["threads"] = cpu::global_pool().size();
    j["cache"] = cache_summary_json(g, so);
    if (!f.kv_store.empty()) j["store"] = store_json(s);
    if (!draft.name.empty()) {
      j["draft"] = draft_json(s.draft_steps, s.draft_tokens, s.draft_accepted);
      j["draft"]["mode"] = draft.name;
      j["draft"]["draft_max"] = e.spec().draft_max;
    }
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  }
  std::fprintf(stderr,
               "kvcache batch: %zu requests in %.2f s, %lld steps; prefill %lld tokens (%.1f "
               "tok/s), decode %lld tokens (%.1f tok/s); prefix hits %lld tokens, misses %lld; "
               "preemptions %lld, evictions %lld\n",
               results.size(), wall, static_cast<long long>(s.steps),
               static_cast<long long>(s.prefill_tokens), pre,
               static_cast<long long>(s.decode_tokens), dec,
               static_cast<long long>(s.prefix_hit_tokens),
               static_cast<long long>(s.prefix_miss_tokens),
               static_cast<long long>(s.preemptions), static_cast<long long>(s.evictions));
  if (!f.kv_store.empty())
    std::fprintf(stderr,
                 "kvcache batch: store %lld hit tokens (%lld blocks), %lld misses, %lld blocks "
                 "written, %lld bytes in, %lld out, %lld checksum failures, %lld rejected, %lld "
                 "errors, %lld timeouts\n",
                 static_cast<long long>(s.store_hit_tokens),
                 static_cast<long long>(s.store.hit_blocks), static_cast<long long>(s.store.misses),
                 static_cast<long long>(s.store.puts), static_cast<long long>(s.store.bytes_in),
                 static_cast<long long>(s.store.bytes_out),
                 static_cast<long long>(s.store.checksum_failures),
                 static_cast<long long>(s.store.rejected_blocks),
                 static_cast<long long>(s.store.errors), static_cast<long long>(s.store_timeouts));
  return 0;
}

}  // namespace

Runner add_batch(CLI::App& app) {
  auto flags = std::make_shared<BatchFlags>();
  CLI::App* cmd = app.add_subcommand("batch", "Run many prompts through the batching executor");
  add_flags(cmd, *flags);
  return [flags] { return run_batch(*flags); };
}

}  // namespace kvcache::tools
