// CellCache: the cpu byte layer behind CellLayout (many sequences over pools of cells).
// Every layer's K/V pool holds row = cell index of the layout's pool for the layer's window
// (a sliding window's pool is compact: its own numbering, sized by CellLayout's pool); pools
// grow lazily by doubling up to that size and no cell's bytes ever move to another row.
// A query visits exactly the cells CellLayout::visible() lists for it.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cell_layout.h"
#include "core/str_cat.h"
#include "cpu/cache_common.h"
#include "cpu/cache_rows.h"
#include "cpu/caches.h"

namespace kvcache::cpu {

namespace {

class CellCache final : public Cache {
 public:
  CellCache(CellLayout layout, const CpuCacheOptions& options)
      : layout_(std::move(layout)), options_(options) {}

  Status init() {
    const CacheConfig& c = layout_.config();
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const int64_t rows = layout_.pool(layout_.pool_of(i)).cells;
      pools_.emplace_back(layout_.geometry().layers[i], c.key_type(), c.value_type(), rows);
      KVCACHE_RETURN_IF_ERROR(pools_.back().reserve(std::min(c.initial_capacity, rows)));
    }
    return ok_status();
  }

  std::string_view kind() const override { return kCellKind; }
  const CacheGeometry& geometry() const override { return layout_.geometry(); }
  const CacheConfig& config() const override { return layout_.config(); }

  Result<int32_t> seq_new() override { return layout_.seq_new(); }
  Result<int32_t> seq_clone(int32_t src, std::optional<int64_t> upto) override {
    return layout_.seq_clone(src, upto);
  }
  Status seq_rm(int32_t seq) override { return layout_.seq_rm(seq); }
  Result<int32_t> open_seq() override { return layout_.seq_new(); }
  Result<UndoPoint> save_point(int32_t seq) override {  // a fork pinning the sliding cells
    if (!layout_.live(seq)) return not_found(str_cat("save_point: sequence ", seq, " is not live"));
    UndoPoint point{layout_.pos(seq), nullptr, -1};
    if (!looks_back(geometry())) return point;
    KVCACHE_ASSIGN_OR_RETURN(point.fork, layout_.seq_clone(seq, std::nullopt));
    return point;
  }
  Status rewind(int32_t seq, int64_t pos) override { return layout_.rewind(seq, pos); }
  Status rewind_many(std::span<const int32_t> seqs, std::span<const int64_t> positions) override {
    return layout_.rewind_many(seqs, positions);
  }
  int64_t pos(int32_t seq) const override { return layout_.pos(seq); }
  int64_t seq_len(int32_t seq) const override { return layout_.seq_len(seq); }
  int32_t max_seqs() const override { return layout_.max_seqs(); }
  int64_t capacity() const override { return layout_.capacity(); }
  int64_t free_cells() const override { return layout_.free_cells(); }
  int64_t used_end() const override { return layout_.used_end(); }
  void clear() override { layout_.clear(); }
  Status declare_step(std::span<const int32_t> seq_ids) override {
    return layout_.declare_step(seq_ids);
  }

  Status update_and_attend(const AttendArgs& a) override {
    return run(a, AttendOp::kUpdateAndAttend);
  }
  Status attend(const AttendArgs& a) override { return run(a, AttendOp::kAttendOnly); }

 private:
  // One kernel call: checks, then (update only) places and writes, then attends.
  Status run(const AttendArgs& a, AttendOp op) {
    KVCACHE_RETURN_IF_ERROR(check_attend_args(layout_.geometry(), a, op));
    KVCACHE_RETURN_IF_ERROR(check_step(a, op));
    auto at = [&a, op] { return attend_context(a.layer, op); };  // built only on failure
    LayerPool& pool = pools_[a.layer];
    std::span<const int32_t> cells;
    if (op == AttendOp::kAttendOnly) {
      if (!layout_.placed(a.layer))
        return failed_precondition(at() + "the layer was not written earlier in this step "
                                          "(update_and_attend first)");
      cells = layout_.step_cells(a.layer);
      const int32_t g = layout_.pool_of(a.layer);
      for (int32_t i = 0; i < a.n_tokens; ++i)
        if (layout_.cell_pos(g, cells[i]) != a.positions[i])
          return invalid_argument(str_cat(at(), "positions[", i, "] = ", a.positions[i],
                                          ", expected the placed ", layout_.cell_pos(g, cells[i])));
    } else {
      if (layout_.placed(a.layer))
        return failed_precondition(at() + "already placed in this step");
      KVCACHE_RETURN_IF_ERROR(pool.reserve(rows_needed(a.layer, a.n_tokens)));
      Result<std::span<const int32_t>> placed = layout_.place(a.layer, a.positions);
      if (!placed.ok()) return placed.status();
      cells = *placed;
      detail::write_tokens(pool, layout_.geometry().layers[a.layer], a,
                           [&](int32_t i) { return cells[i]; }, config().rotated());
    }
    keys_.resize(a.n_tokens);
    for (int32_t i = 0; i < a.n_tokens; ++i) {
      Result<std::span<const int32_t>> vis = layout_.visible(a.layer, i);
      if (!vis.ok()) return internal_error(at() + "placed step has no visibility: " +
                                             vis.status().message());
      keys_[i] = KeySet{};
      keys_[i].cells = *vis;
    }
    detail::run_kernel(options_, detail::make_problem(a, pool, keys_), config().rotated());
    return ok_status();
  }

 public:
  int64_t allocated_bytes() const override { return detail::pools_bytes(pools_); }

  Result<std::vector<LayerRows>> read_rows(int32_t seq, int64_t from,
                                           int64_t to) const override {
    if (!layout_.live(seq)) return not_found(str_cat("read_rows: sequence ", seq, " is not live"));
    const int64_t end = layout_.pos(seq);
    KVCACHE_RETURN_IF_ERROR(detail::check_read_range(seq, from, to, end));
    std::vector<LayerRows> out;
    out.reserve(pools_.size());
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const int32_t g = layout_.pool_of(i);
      std::span<const int32_t> held = layout_.held(seq, g);
      const int64_t low = layout_.held_first_pos(seq, g);
      // A sliding pool may still hold an ended step's older cells: report only what is kept.
      const int64_t first = std::min(to, std::max(from, layout_.kept_from(seq, g)));
      out.push_back(detail::make_rows(geometry(), config().key_type(),
                                      config().value_type(), i, first, to - first));
      for (int64_t p = first; p < to; ++p)
        detail::row_out(pools_[i], held[static_cast<size_t>(p - low)], out.back(), p);
    }
    return out;
  }

  // Chunks through declare_step/place like a prefill. The room checks bound what any chunk
  // claims: the full pool gives one cell per position; a Sliding(W) pool needs at most
  // W - 1 + chunk cells of this sequence at once (older ones free as each chunk ends).
  Status write_rows(int32_t seq, int64_t from, int64_t to,
                    std::span<const LayerRows> rows) override {
    if (!layout_.live(seq)) return not_found(str_cat("write_rows: sequence ", seq, " is not live"));
    KVCACHE_RETURN_IF_ERROR(detail::check_append(seq, from, to, layout_.pos(seq)));
    const std::vector<int64_t> need = detail::needed_from(geometry(), from, to);
    Result<std::vector<const LayerRows*>> by_layer =
        detail::match_rows(geometry(), config().key_type(), config().value_type(), rows,
                           need, to);
    if (!by_layer.ok()) return by_layer.status();
    const int64_t total = to - from;
    if (total == 0) return ok_status();
    KVCACHE_RETURN_IF_ERROR(check_room(total));
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const int32_t g = layout_.pool_of(i), w = geometry().layers[i].window;
      const int64_t claims = w > 0 ? std::min(total, w - 1 + kChunk) : total;
      KVCACHE_RETURN_IF_ERROR(pools_[i].reserve(
          std::min(layout_.pool(g).cells, layout_.pool_used_end(g) + claims)));
    }
    std::vector<int32_t> ids;
    std::vector<int64_t> positions;
    for (int64_t at = from; at < to;) {
      const int64_t n = std::min({to - at, layout_.free_cells(), kChunk});
      if (n <= 0) return internal_error("write_rows: no room left mid-append");
      ids.assign(static_cast<size_t>(n), seq);
      positions.resize(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) positions[t] = at + t;
      KVCACHE_RETURN_IF_ERROR(layout_.declare_step(ids));
      for (int32_t i = 0; i < layout_.n_layers(); ++i) {
        Result<std::span<const int32_t>> cells = layout_.place(i, positions);
        if (!cells.ok()) return internal_error("write_rows: " + cells.status().message());
        for (int64_t p = std::max(at, need[i]); p < at + n; ++p)
          detail::row_in(pools_[i], (*cells)[static_cast<size_t>(p - at)], *(*by_layer)[i], p);
      }
      at += n;
    }
    return ok_status();
  }

 private:
  static constexpr int64_t kChunk = 4096;  // positions per internal step of write_rows

  // ResourceExhausted naming the pool when an append of `total` positions cannot fit.
  Status check_room(int64_t total) const {
    if (total > layout_.capacity())  // also bounds the chunks of an all-sliding geometry
      return resource_exhausted(
          str_cat("write_rows: ", total, " positions exceed capacity ", layout_.capacity()));
    for (int32_t g = 0; g < layout_.n_pools(); ++g) {
      const CellPool& p = layout_.pool(g);
      const int64_t room = layout_.pool_room(g);
      if (total <= room || (p.window > 0 && room >= p.window)) continue;
      return resource_exhausted(
          str_cat("write_rows: ", total, " positions, but the ",
                  p.window > 0 ? str_cat("sliding(", p.window, ")") : std::string("full"),
                  " pool has only ", room, " of ", p.cells, " cells free",
                  (p.window > 0 ? " (an append needs W)" : "")));
    }
    return ok_status();
  }

  Status check_step(const AttendArgs& a, AttendOp op) const {
    return detail::check_declared(a, op, layout_.step_open(),
                                  static_cast<int64_t>(layout_.step_seq_ids().size()));
  }

  // Rows a placement of n tokens can touch in the layer's pool: the step's cells when another
  // layer placed them, else (free cells are refilled lowest-first) below used_end + n.
  int64_t rows_needed(int32_t layer, int32_t n) const {
    std::span<const int32_t> cells = layout_.step_cells(layer);
    if (!cells.empty()) return int64_t{*std::max_element(cells.begin(), cells.end())} + 1;
    const int32_t g = layout_.pool_of(layer);
    return std::min(layout_.pool(g).cells, layout_.pool_used_end(g) + n);
  }

  CellLayout layout_;
  CpuCacheOptions options_;
  std::vector<LayerPool> pools_;
  std::vector<KeySet> keys_;
};

}  // namespace

Result<std::shared_ptr<Cache>> make_cell_cache(const CacheGeometry& g, const CacheConfig& c,
                                               const CpuCacheOptions& options) {
  return detail::make_cache<CellCache, CellLayout>(g, c, options);
}

}  // namespace kvcache::cpu
