#include "core/geometry.h"

#include <algorithm>
#include <limits>

#include "core/cache.h"
#include "core/str_cat.h"

namespace kvcache {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  return std::nullopt;
}

bool known_dtype(DType dtype) {
  const int n = static_cast<int>(dtype);
  return n >= 0 && n <= static_cast<int>(DType::kQ4_0);
}

std::optional<int64_t> row_bytes(DType dtype, int64_t width) {
  const int64_t per = block_elements(dtype);
  if (width < 0 || width % per != 0) return std::nullopt;
  return checked_mul(width / per, block_bytes(dtype));
}

std::string Invalid::message() const {
  const std::string s = layer >= 0 ? str_cat("layers[", layer, "].", field) : field;
  return str_cat(s, " = ", value, ", expected ", expected);
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> bytes_per_cell(const LayerGeometry& l, DType k, DType v) {
  auto kb = row_bytes(k, l.head_dim);
  auto vb = row_bytes(v, l.value_dim);
  auto width = kb && vb ? checked_add(*kb, *vb) : std::nullopt;
  if (!width) return std::nullopt;
  return checked_mul(l.kv_heads, *width);
}

std::optional<int64_t> bytes_per_cell(const CacheGeometry& g, DType k, DType v) {
  int64_t total = 0;
  for (const auto& l : g.layers) {
    auto b = bytes_per_cell(l, k, v);
    if (!b) return std::nullopt;
    auto t = checked_add(total, *b);
    if (!t) return std::nullopt;
    total = *t;
  }
  return total;
}

std::optional<Invalid> why_invalid(const CacheGeometry& g) {
  if (g.layers.empty()) return Invalid{"layers", -1, 0, "at least one layer"};
  if (g.layers.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Invalid{"layers", -1, static_cast<int64_t>(g.layers.size()), "<= 2^31-1 layers"};
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const auto& l = g.layers[i];
    const auto li = static_cast<int32_t>(i);
    if (l.kv_heads <= 0) return Invalid{"kv_heads", li, l.kv_heads, "> 0"};
    if (l.head_dim <= 0) return Invalid{"head_dim", li, l.head_dim, "> 0"};
    if (l.value_dim <= 0) return Invalid{"value_dim", li, l.value_dim, "> 0"};
    if (l.window < 0) return Invalid{"window", li, l.window, ">= 0 (0 = full)"};
    if (!bytes_per_cell(l, DType::kF32))
      return Invalid{"kv_heads", li, l.kv_heads, "kv_heads * (head_dim + value_dim) * 4 to fit in 64 bits"};
  }
  if (!bytes_per_cell(g, DType::kF32))
    return Invalid{"layers", -1, static_cast<int64_t>(g.layers.size()),
                   "total bytes per cell to fit in 64 bits"};
  return std::nullopt;
}

std::optional<Invalid> why_invalid(const CacheConfig& c) {
  if (c.capacity <= 0) return Invalid{"capacity", -1, c.capacity, "> 0"};
  if (c.capacity > std::numeric_limits<int32_t>::max())
    return Invalid{"capacity", -1, c.capacity, "<= 2147483647 cells"};
  if (c.initial_capacity < 0)
    return Invalid{"initial_capacity", -1, c.initial_capacity, ">= 0"};
  if (c.max_write && *c.max_write <= 0)
    return Invalid{"max_write", -1, *c.max_write, "> 0 when set"};
  if (c.max_seqs && *c.max_seqs < 1) return Invalid{"max_seqs", -1, *c.max_seqs, ">= 1 when set"};
  const std::string names = str_cat("one of ", kDTypeNames);
  if (!known_dtype(c.kv_dtype))
    return Invalid{"kv_dtype", -1, static_cast<int64_t>(c.kv_dtype), names};
  if (c.k_dtype && !known_dtype(*c.k_dtype))
    return Invalid{"k_dtype", -1, static_cast<int64_t>(*c.k_dtype), names};
  if (c.v_dtype && !known_dtype(*c.v_dtype))
    return Invalid{"v_dtype", -1, static_cast<int64_t>(*c.v_dtype), names};
  return std::nullopt;
}

namespace {
// A block type needs each row to be whole blocks: the key width for K, the value width for V.
std::optional<Invalid> why_unblockable(const CacheGeometry& g, const CacheConfig& c) {
  const DType k = c.key_type(), v = c.value_type();
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const LayerGeometry& l = g.layers[i];
    const auto li = static_cast<int32_t>(i);
    if (l.head_dim % block_elements(k) != 0)
      return Invalid{"head_dim", li, l.head_dim,
                     str_cat("a multiple of ", block_elements(k), " for k_dtype ", to_string(k))};
    if (l.value_dim % block_elements(v) != 0)
      return Invalid{"value_dim", li, l.value_dim,
                     str_cat("a multiple of ", block_elements(v), " for v_dtype ", to_string(v))};
  }
  return std::nullopt;
}
}  // namespace

std::optional<Invalid> why_invalid(const CacheGeometry& g, const CacheConfig& c) {
  if (auto r = why_invalid(g)) return r;
  if (auto r = why_invalid(c)) return r;
  if (auto r = why_unblockable(g, c)) return r;
  // The whole pool at capacity must be addressable.
  auto per_cell = bytes_per_cell(g, c);
  if (!per_cell || !checked_mul(*per_cell, c.capacity))
    return Invalid{"capacity", -1, c.capacity, "capacity * bytes per cell to fit in 64 bits"};
  return std::nullopt;
}

Status validate(const CacheGeometry& g, const CacheConfig& c, std::string_view what) {
  if (auto r = why_invalid(g, c)) return invalid_argument(std::string(what) + ": " + r->message());
  return ok_status();
}

bool looks_back(const CacheGeometry& geometry) {
  for (const LayerGeometry& l : geometry.layers)
    if (l.window > 1) return true;
  return false;
}

int64_t step_rows(int32_t window, const CacheConfig& c) {
  if (c.max_write) return *c.max_write;
  return window > 0 ? window : c.capacity;
}

int64_t step_limit(const CacheGeometry& g, const CacheConfig& c) {
  int64_t limit = step_rows(0, c);
  for (const auto& l : g.layers)
    if (l.sliding()) limit = std::min<int64_t>(limit, step_rows(l.window, c));
  return std::min(limit, c.capacity);
}

int32_t cell_max_seqs(const CacheConfig& c) { return c.max_seqs.value_or(kDefaultCellSeqs); }

std::vector<CellPool> cell_pools(const CacheGeometry& g, const CacheConfig& c) {
  std::vector<CellPool> pools;
  auto pool_of = [&](int32_t window) -> CellPool& {
    for (CellPool& p : pools)
      if (p.window == window) return p;
    pools.push_back(CellPool{window, {}, c.capacity});
    if (window > 0) {
      const int64_t m = step_rows(window, c);
      auto held = checked_mul(cell_max_seqs(c), int64_t{window} - 1);
      auto n = held ? checked_add(*held, m) : std::nullopt;
      pools.back().cells = n ? std::min(*n, c.capacity) : c.capacity;
    }
    return pools.back();
  };
  for (size_t i = 0; i < g.layers.size(); ++i)
    pool_of(g.layers[i].window).layers.push_back(static_cast<int32_t>(i));
  std::sort(pools.begin(), pools.end(),
            [](const CellPool& a, const CellPool& b) { return a.window < b.window; });
  return pools;
}

std::optional<int64_t> cell_bytes_at_capacity(const CacheGeometry& g, const CacheConfig& c) {
  int64_t total = 0;
  for (const CellPool& p : cell_pools(g, c))
    for (int32_t l : p.layers) {
      auto per_cell = bytes_per_cell(g.layers[static_cast<size_t>(l)], c);
      auto bytes = per_cell ? checked_mul(*per_cell, p.cells) : std::nullopt;
      auto t = bytes ? checked_add(total, *bytes) : std::nullopt;
      if (!t) return std::nullopt;
      total = *t;
    }
  return total;
}

int64_t sequence_slots(const LayerGeometry& l, const CacheConfig& c) {
  if (!l.sliding()) return c.capacity;
  const int64_t m = step_rows(l.window, c);
  return std::min<int64_t>(static_cast<int64_t>(l.window) + m - 1, c.capacity);
}

std::optional<int64_t> sequence_bytes_at_capacity(const CacheGeometry& g, const CacheConfig& c) {
  int64_t total = 0;
  for (const LayerGeometry& l : g.layers) {
    auto per_cell = bytes_per_cell(l, c);
    auto bytes = per_cell ? checked_mul(*per_cell, sequence_slots(l, c)) : std::nullopt;
    auto t = bytes ? checked_add(total, *bytes) : std::nullopt;
    if (!t) return std::nullopt;
    total = *t;
  }
  return total;
}

std::optional<int64_t> kv_bytes_at_capacity(std::string_view kind, const CacheGeometry& g,
                                            const CacheConfig& c) {
  if (kind == kCellKind) return cell_bytes_at_capacity(g, c);
  if (kind == kSequenceKind) return sequence_bytes_at_capacity(g, c);
  return std::nullopt;
}

}  // namespace kvcache
