// The cache flags run, inspect, batch and serve share, each declared once here: name, type,
// range, default and help (CLI11 checks them whole: IsMember, Range, ',' delimiters). Layer:
// tools. A subcommand picks the flags it takes; the values land in one CacheFlags. It does not
// plan the cache (engine/cache_setup.h and the executor do) nor print anything.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/geometry.h"
#include "core/status.h"
#include "engine/cache_setup.h"
#include "engine/model.h"

namespace kvcache::tools {

inline constexpr int64_t kMaxCellsFlag = std::numeric_limits<int32_t>::max();  // core's cap

struct CacheFlags {
  std::string layout = "sequence";  // --cache: sequence | cell (inspect defaults to cell)
  int64_t capacity = 0;             // --capacity, cells; 0 = the subcommand's default
  int64_t initial_capacity = 0;     // --initial-capacity, cells allocated up front
  std::string kv_dtype = "f32";     // --kv-dtype: f32 | f16 | bf16 | q8_0 | q4_0 (K and V)
  std::string k_dtype;              // --k-dtype: the key type; "" = --kv-dtype
  std::string v_dtype;              // --v-dtype: the value type; "" = --kv-dtype
  std::string kv_rotate = "auto";   // --kv-rotate: auto (on for q8_0/q4_0) | on | off
  int64_t max_step_tokens = 0;      // --max-step-tokens; 0 = the model's
  std::vector<int32_t> windows;     // --windows, cycled over cache layers; 0 = Full; {} = none
  int32_t threads = 0;              // --threads; 0 = default
  int32_t max_sessions = 8;         // --max-sessions decoding at once
  int64_t max_session_tokens = 0;   // --max-session-tokens; 0 = min(max_context, 4096)
  bool map_weights = false;         // --map-weights: map the model file instead of huge pages
  std::optional<int64_t> kv_memory;  // --kv-memory, bytes (parse_byte_size); sizes the capacity

  DType dtype() const { return parse_dtype(kv_dtype).value_or(DType::kF32); }
  std::optional<DType> key_dtype() const { return parse_dtype(k_dtype); }    // unset: nullopt
  std::optional<DType> value_dtype() const { return parse_dtype(v_dtype); }
  std::optional<bool> rotate() const {
    return kv_rotate == "auto" ? std::nullopt : std::optional<bool>(kv_rotate == "on");
  }
};

enum class CacheFlag {
  kLayout,
  kCapacity,
  kInitialCapacity,
  kKvDtype,  // --kv-dtype, --k-dtype, --v-dtype, --kv-rotate
  kMaxStepTokens,
  kWindows,
  kThreads,
  kMaxSessions,
  kMaxSessionTokens,
  kMapWeights,
  kKvMemory,  // --kv-memory SIZE; call refuse_beside_kv_memory once every flag is declared
};

// Declares the chosen flags on `cmd`, bound to `f` (defaults: f's current values).
void add_cache_flags(CLI::App* cmd, CacheFlags& f, std::initializer_list<CacheFlag> which);

// The engine's cache options from the flags (run): 0 means "the default" for capacity and step.
engine::CacheOptions cache_options(const CacheFlags& f);

// --kv-memory excludes the flags that set a capacity directly (--capacity, --max-sessions,
// --pool-tokens, --sessions), those of them `cmd` has: CLI11 refuses the pair naming both
// (exit 2). Call after every flag of `cmd` is declared.
void refuse_beside_kv_memory(CLI::App* cmd);

// The exit code for a cache plan's refusal: 2 (usage) when the --kv-memory budget holds no
// cache (ResourceExhausted naming kv_memory) or --draft-max does not fit the step
// (InvalidArgument naming draft_max), else 1.
int plan_exit_code(const Status& s);

// A byte size, parsed whole: a decimal number (digits, optionally '.' and up to 18 more) and an
// optional unit, case-insensitive: B or none (bytes), KB MB GB TB (powers of 1000), KiB MiB
// GiB TiB (powers of 1024). "4GiB" = 4294967296, "1.5GB" = 1500000000, "512MiB", "4096".
// Fractions of a byte round down; in bytes (B or none) the number must be whole.
// InvalidArgument quoting the text for anything else: a sign, spaces, an unknown unit, 0
// (expected > 0), more than 2^63 - 1 bytes. (--kv-memory's validator puts the flag first.)
Result<int64_t> parse_byte_size(std::string_view text);

// The engine's load options from the flags (--map-weights).
engine::LoadOptions load_options(const CacheFlags& f);

// Applies --threads (0 leaves the default pool).
void apply_threads(const CacheFlags& f);

// The CLI's one comma-list parser, for lists CLI11's delimiter would quietly shorten
// ("1,,2" and "" are errors here): "1,2,3" -> {1, 2, 3}, every entry a whole decimal integer.
// InvalidArgument naming `flag` and the entry otherwise.
Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag);

}  // namespace kvcache::tools
