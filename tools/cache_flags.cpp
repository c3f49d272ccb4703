// See cache_flags.h. One case per flag: its one declaration.
#include "cache_flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <utility>

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

// "4GiB" -> ("4", "", "GiB"): the whole digits, the fraction digits and the unit.
struct SizeParts {
  std::string_view whole, fraction, unit;
};
std::optional<SizeParts> split_size(std::string_view t) {
  const auto digits = [&](size_t from) {
    size_t i = from;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i;
  };
  SizeParts p;
  size_t i = digits(0);
  p.whole = t.substr(0, i);
  if (p.whole.empty()) return std::nullopt;
  if (i < t.size() && t[i] == '.') {
    const size_t j = digits(i + 1);
    p.fraction = t.substr(i + 1, j - i - 1);
    if (p.fraction.empty()) return std::nullopt;
    i = j;
  }
  p.unit = t.substr(i);
  return p;
}

// Bytes per unit, case-insensitive; 0 when unknown.
uint64_t unit_bytes(std::string_view unit) {
  std::string u(unit);
  for (char& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1}, {"b", 1},
      {"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000ull * 1000 * 1000},
      {"tb", 1000ull * 1000 * 1000 * 1000},
      {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40}};
  for (const auto& [name, bytes] : kUnits)
    if (u == name) return bytes;
  return 0;
}

}  // namespace

Result<int64_t> parse_byte_size(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return invalid_argument(str_cat("\"", text, "\" ", why));
  };
  const std::optional<SizeParts> p = split_size(text);
  if (!p) return bad("is not a size: expected a number and an optional unit, e.g. 4GiB, 1.5GB");
  const uint64_t unit = unit_bytes(p->unit);
  if (unit == 0)
    return bad(str_cat("has an unknown unit \"", p->unit,
                       "\" (expected B, KB, MB, GB, TB: powers of 1000, or KiB, MiB, GiB, TiB: "
                       "powers of 1024)"));
  if (unit == 1 && !p->fraction.empty()) return bad("is not a whole number of bytes");
  if (p->fraction.size() > 18) return bad("has more than 18 digits after the point");
  __extension__ typedef unsigned __int128 u128;  // exact: 2^63 x 2^40 fits
  constexpr u128 kMax = static_cast<u128>(std::numeric_limits<int64_t>::max());
  u128 whole = 0;
  for (char c : p->whole) {
    whole = whole * 10 + static_cast<u128>(c - '0');
    if (whole > kMax) return bad("is more than 2^63 - 1 bytes");
  }
  u128 fraction = 0, scale = 1;
  for (char c : p->fraction) {
    fraction = fraction * 10 + static_cast<u128>(c - '0');
    scale *= 10;
  }
  // whole < 2^63 and unit <= 2^40: the products stay below 2^104.
  const u128 bytes = whole * unit + fraction * unit / scale;
  if (bytes > kMax) return bad("is more than 2^63 - 1 bytes");
  if (bytes == 0) return bad("is 0 bytes, expected > 0");
  return static_cast<int64_t>(bytes);
}

void refuse_beside_kv_memory(CLI::App* cmd) {
  CLI::Option* budget = cmd->get_option_no_throw("--kv-memory");
  if (budget == nullptr) return;
  for (const char* name : {"--capacity", "--max-sessions", "--pool-tokens", "--sessions"})
    if (CLI::Option* other = cmd->get_option_no_throw(name)) budget->excludes(other);
}

int plan_exit_code(const Status& s) {
  const bool usage = (s.code() == StatusCode::kResourceExhausted &&
                      s.message().find("kv_memory = ") != std::string::npos) ||
                     (s.code() == StatusCode::kInvalidArgument &&
                      s.message().find("draft_max = ") != std::string::npos);
  return usage ? 2 : 1;
}

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
                        "Prefill chunk (may exceed a sliding window); 0 = the model's, else 512")
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
      case CacheFlag::kKvMemory:
        cmd->add_option_function<std::string>(
               "--kv-memory", [&f](const std::string& text) { f.kv_memory = *parse_byte_size(text); },
               "K/V memory budget sizing the capacity for the K/V types (4GiB, 512MiB, 1.5GB, "
               "bytes; KiB/MiB/GiB = 1024^n, KB/MB/GB = 1000^n): the largest that fits")
            ->check(CLI::Validator(
                [](std::string& text) {
                  Result<int64_t> b = parse_byte_size(text);
                  return b.ok() ? std::string() : b.status().message();
                },
                "SIZE"));
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
  o.kv_memory = f.kv_memory;
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
