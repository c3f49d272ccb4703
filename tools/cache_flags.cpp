// See cache_flags.h. One case per flag: its one declaration.
#include "cache_flags.h"

#include <algorithm>
#include <charconv>

#include "core/str_cat.h"
#include "cpu/thread_pool.h"

namespace kvcache::tools {

namespace {

// --windows: every entry in [0, 2^30].
Result<std::vector<int32_t>> window_list(const std::string& text) {
  KVCACHE_ASSIGN_OR_RETURN(std::vector<int64_t> list, parse_int_list(text, "--windows"));
  std::vector<int32_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] < 0 || list[i] > (int64_t{1} << 30))
      return invalid_argument(str_cat("--windows: entry ", i, " = ", list[i],
                                      ", expected 0 (Full) or a window in [1, 2^30]"));
    out.push_back(static_cast<int32_t>(list[i]));
  }
  return out;
}

}  // namespace

void add_cache_flags(CLI::App* cmd, CacheFlags& f, std::initializer_list<CacheFlag> which) {
  for (CacheFlag flag : which) {
    switch (flag) {
      case CacheFlag::kLayout:
        cmd->add_option("--cache", f.layout, "Cache layout")
            ->check(CLI::IsMember({"sequence", "cell"}))->capture_default_str();
        break;
      case CacheFlag::kCapacity:
        cmd->add_option("--capacity", f.capacity,
                        "Cache capacity in cells; 0 = min(max_context, 4096)")
            ->check(CLI::Range(int64_t{0}, kMaxCellsFlag))->capture_default_str();
        break;
      case CacheFlag::kInitialCapacity:
        cmd->add_option("--initial-capacity", f.initial_capacity, "Cells allocated up front")
            ->check(CLI::Range(int64_t{0}, kMaxCellsFlag))->capture_default_str();
        break;
      case CacheFlag::kKvDtype: {
        const std::vector<std::string> types = {"f32", "f16", "bf16", "q8_0", "q4_0"};
        cmd->add_option("--kv-dtype", f.kv_dtype,
                        "K/V storage type (q8_0 / q4_0: GGUF blocks of 32; widths must be "
                        "multiples of 32)")
            ->check(CLI::IsMember(types))->capture_default_str();
        cmd->add_option("--k-dtype", f.k_dtype, "Key storage type; default: --kv-dtype")
            ->check(CLI::IsMember(types));
        cmd->add_option("--v-dtype", f.v_dtype, "Value storage type; default: --kv-dtype")
            ->check(CLI::IsMember(types));
        cmd->add_option("--kv-rotate", f.kv_rotate,
                        "Hadamard rotation of K, V and q per head; auto = on for q8_0 / q4_0")
            ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
        break;
      }
      case CacheFlag::kMaxStepTokens:
        cmd->add_option("--max-step-tokens", f.max_step_tokens,
                        "Prefill chunk; 0 = the model's (lowered to the narrowest window)")
            ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))->capture_default_str();
        break;
      case CacheFlag::kWindows:
        // Parsed whole by parse_int_list: CLI11's delimiter would drop the empty entry of "4,,0".
        cmd->add_option_function<std::string>(
               "--windows", [&f](const std::string& text) { f.windows = *window_list(text); },
               "Window per cache layer, comma list cycled over layers; 0 = Full")
            ->check(CLI::Validator(
                [](std::string& text) {
                  Result<std::vector<int32_t>> w = window_list(text);
                  return w.ok() ? std::string() : w.status().message();
                },
                "LIST"));
        break;
      case CacheFlag::kThreads:
        cmd->add_option("--threads", f.threads, "Threads; 0 = default")
            ->check(CLI::Range(0, 1024))->capture_default_str();
        break;
      case CacheFlag::kMaxSessions:
        cmd->add_option("--max-sessions", f.max_sessions, "Sessions decoding at once")
            ->check(CLI::Range(1, 128))->capture_default_str();
        break;
      case CacheFlag::kMaxSessionTokens:
        cmd->add_option("--max-session-tokens", f.max_session_tokens,
                        "Prompt + generated tokens per session; 0 = min(max_context, 4096)")
            ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))->capture_default_str();
        break;
      case CacheFlag::kMapWeights:
        cmd->add_flag("--map-weights", f.map_weights,
                      "Map the model file in place instead of reading it into huge pages "
                      "(shares the page cache with other processes; slower decode)");
        break;
    }
  }
}

engine::LoadOptions load_options(const CacheFlags& f) {
  engine::LoadOptions o;
  o.huge_pages = !f.map_weights;
  return o;
}

engine::CacheOptions cache_options(const CacheFlags& f) {
  engine::CacheOptions o;
  o.kind = f.layout;
  if (f.capacity > 0) o.capacity = f.capacity;
  o.initial_capacity = f.initial_capacity;
  o.kv_dtype = f.dtype();
  o.k_dtype = f.key_dtype();
  o.v_dtype = f.value_dtype();
  o.kv_rotate = f.rotate();
  if (f.max_step_tokens > 0) o.max_step_tokens = f.max_step_tokens;
  o.windows = f.windows;
  return o;
}

void apply_threads(const CacheFlags& f) {
  if (f.threads > 0) cpu::set_global_threads(f.threads);
}

Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag) {
  std::vector<int64_t> out;
  for (size_t i = 0; i <= text.size();) {
    const size_t j = std::min(text.find(',', i), text.size());
    const std::string_view item = text.substr(i, j - i);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      return invalid_argument(
          str_cat(flag, ": \"", item, "\" is not an integer (expected a comma list)"));
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

}  // namespace kvcache::tools
