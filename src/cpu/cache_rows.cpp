#include "cpu/cache_rows.h"

#include <algorithm>
#include <string>

#include "core/str_cat.h"

namespace kvcache::cpu::detail {
namespace {

std::string layer_name(const CacheGeometry& g, int32_t layer) {
  const LayerGeometry& l = g.layers[static_cast<size_t>(layer)];
  return str_cat("layer ", layer, (l.sliding() ? str_cat(" (sliding ", l.window, ")") : " (full)"));
}

// n x heads x row_bytes(dtype, dim), nullopt on overflow.
std::optional<int64_t> rows_bytes(int64_t n, int32_t heads, int32_t dim, DType dtype) {
  auto a = checked_mul(n, heads);
  auto row = row_bytes(dtype, dim);
  return a && row ? checked_mul(*a, *row) : std::nullopt;
}

}  // namespace

Status check_read_range(int32_t seq, int64_t from, int64_t to, int64_t end) {
  if (from < 0 || from > to)
    return invalid_argument(str_cat("read_rows: positions [", from, ", ", to,
                                    "), expected 0 <= from <= to"));
  if (to > end)
    return out_of_range(str_cat("read_rows: positions [", from, ", ", to, ") of sequence ",
                                seq, ", which has positions [0, ", end, ") only"));
  return ok_status();
}

Status check_append(int32_t seq, int64_t from, int64_t to, int64_t end) {
  if (from != end)
    return invalid_argument(str_cat("write_rows: append at position ", from, " to sequence ",
                                    seq, ", expected its next position ", end));
  if (to < from)
    return invalid_argument(str_cat("write_rows: positions [", from, ", ", to,
                                    "), expected to >= from"));
  return ok_status();
}

std::vector<int64_t> needed_from(const CacheGeometry& g, int64_t from, int64_t to) {
  std::vector<int64_t> need;
  need.reserve(g.layers.size());
  for (const LayerGeometry& l : g.layers)
    need.push_back(std::max(from, first_visible(l, to)));
  return need;
}

Result<std::vector<const LayerRows*>> match_rows(const CacheGeometry& g, DType k_dtype,
                                                 DType v_dtype,
                                                 std::span<const LayerRows> rows,
                                                 std::span<const int64_t> need, int64_t to) {
  const auto n_layers = static_cast<int32_t>(g.layers.size());
  std::vector<const LayerRows*> by_layer(g.layers.size(), nullptr);
  for (const LayerRows& r : rows) {
    if (r.layer < 0 || r.layer >= n_layers)
      return invalid_argument(str_cat("write_rows: rows for layer ", r.layer, ", expected 0..",
                                      n_layers - 1));
    if (by_layer[r.layer] != nullptr)
      return invalid_argument(str_cat("write_rows: two sets of rows for layer ", r.layer));
    by_layer[r.layer] = &r;
  }
  for (int32_t i = 0; i < n_layers; ++i) {
    const LayerRows* r = by_layer[i];
    // The layer's name is built only when a check fails (write_rows runs on every step).
    const auto at = [&] { return str_cat("write_rows: ", layer_name(g, i)); };
    const int64_t lo = need[i];
    if (r == nullptr) {
      if (lo >= to) continue;  // needs nothing (a window of 1, or an empty append)
      return invalid_argument(str_cat(at(), ": no rows given, needs positions [", lo, ", ",
                                      to, ")"));
    }
    if (r->first < 0 || r->n < 0)
      return invalid_argument(str_cat(at(), ": rows first = ", r->first, ", n = ", r->n,
                                      ", expected both >= 0"));
    if (lo < to && (r->first > lo || r->first + r->n < to))
      return invalid_argument(str_cat(at(), ": rows for positions [", r->first, ", ",
                                      r->first + r->n, "), needs [", lo, ", ", to,
                                      ")"));
    const LayerGeometry& l = g.layers[i];
    const auto kb = rows_bytes(r->n, l.kv_heads, l.head_dim, k_dtype);
    const auto vb = rows_bytes(r->n, l.kv_heads, l.value_dim, v_dtype);
    if (!kb || static_cast<int64_t>(r->k.size()) != *kb)
      return invalid_argument(str_cat(at(), ": k has ", static_cast<int64_t>(r->k.size()),
                                      " bytes, expected ", r->n, " rows x ", l.kv_heads,
                                      " heads x ", row_bytes(k_dtype, l.head_dim).value_or(0),
                                      " bytes (", l.head_dim, " values of ", to_string(k_dtype),
                                      ")"));
    if (!vb || static_cast<int64_t>(r->v.size()) != *vb)
      return invalid_argument(str_cat(at(), ": v has ", static_cast<int64_t>(r->v.size()),
                                      " bytes, expected ", r->n, " rows x ", l.kv_heads,
                                      " heads x ", row_bytes(v_dtype, l.value_dim).value_or(0),
                                      " bytes (", l.value_dim, " values of ", to_string(v_dtype),
                                      ")"));
  }
  return by_layer;
}

LayerRows make_rows(const CacheGeometry& g, DType k_dtype, DType v_dtype, int32_t layer,
                    int64_t first, int64_t n) {
  const LayerGeometry& l = g.layers[static_cast<size_t>(layer)];
  LayerRows r;
  r.layer = layer;
  r.first = first;
  r.n = n;
  r.k.resize(static_cast<size_t>(n * l.kv_heads * row_bytes(k_dtype, l.head_dim).value_or(0)));
  r.v.resize(static_cast<size_t>(n * l.kv_heads * row_bytes(v_dtype, l.value_dim).value_or(0)));
  return r;
}

}  // namespace kvcache::cpu::detail
