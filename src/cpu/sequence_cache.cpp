// SequenceCache: the cpu byte layer behind SequenceLayout (one sequence, id 0). Full layers
// store position p in row p and grow lazily; sliding layers are rings sized up front.
// Checkpoints copy the last W - 1 positions of every ring so undo can go past the ring.
// Every slot, window start and ring run comes from SequenceLayout (slot, visible, lookback).
#include <string>
#include <vector>

#include "core/sequence_layout.h"
#include "core/str_cat.h"
#include "cpu/cache_common.h"
#include "cpu/cache_rows.h"
#include "cpu/caches.h"

namespace kvcache::cpu {

namespace {

// The K/V bytes of positions [pos - W + 1, pos) of every sliding layer, in position order.
struct RingCheckpoint final : CacheCheckpoint {
  const void* owner = nullptr;  // the cache that made it
  int64_t at = 0;
  std::vector<std::vector<std::byte>> rows;  // per cache layer; empty for full layers
  int32_t seq() const override { return 0; }
  int64_t pos() const override { return at; }
  int64_t bytes() const override {
    int64_t n = 0;
    for (const auto& r : rows) n += static_cast<int64_t>(r.size());
    return n;
  }
};

class SequenceCache final : public Cache {
 public:
  SequenceCache(SequenceLayout layout, const CpuCacheOptions& options)
      : layout_(std::move(layout)), options_(options) {}

  Status init() {
    const CacheConfig& c = layout_.config();
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const LayerGeometry& l = layout_.geometry().layers[i];
      pools_.emplace_back(l, c.key_type(), c.value_type(), layout_.slots(i));
      const int64_t first = l.sliding() ? layout_.slots(i)
                                        : std::min(c.initial_capacity, c.capacity);
      KVCACHE_RETURN_IF_ERROR(pools_.back().reserve(first));
    }
    return ok_status();
  }

  std::string_view kind() const override { return kSequenceKind; }
  const CacheGeometry& geometry() const override { return layout_.geometry(); }
  const CacheConfig& config() const override { return layout_.config(); }

  Result<int32_t> seq_new() override {
    return unimplemented("seq_new: the sequence layout has exactly one sequence (id 0)");
  }
  Result<int32_t> seq_clone(int32_t, std::optional<int64_t>) override {
    return unimplemented("seq_clone: the sequence layout has exactly one sequence (id 0)");
  }
  Status seq_rm(int32_t) override {
    return unimplemented("seq_rm: the sequence layout keeps sequence 0; use clear or rewind");
  }
  Result<int32_t> open_seq() override {
    if (layout_.length() > 0)
      return resource_exhausted(
          str_cat("open_seq: the sequence layout's one sequence (id 0) holds ", layout_.length(),
                  " positions; clear or rewind it first"));
    return 0;
  }
  Result<UndoPoint> save_point(int32_t seq) override {  // a checkpoint of the rings
    if (seq != 0) return not_found(unknown("save_point", seq));
    UndoPoint point{layout_.length(), nullptr, -1};
    if (!looks_back(geometry())) return point;
    KVCACHE_ASSIGN_OR_RETURN(point.checkpoint, checkpoint(seq));
    return point;
  }
  Status rewind(int32_t seq, int64_t pos) override {
    if (seq != 0) return not_found(unknown("rewind", seq));
    return layout_.rewind(pos);
  }
  int64_t pos(int32_t seq) const override { return seq == 0 ? layout_.length() : 0; }
  int64_t seq_len(int32_t seq) const override { return seq == 0 ? layout_.length() : 0; }
  int32_t max_seqs() const override { return 1; }
  int64_t capacity() const override { return layout_.capacity(); }
  int64_t free_cells() const override { return layout_.capacity() - layout_.length(); }
  int64_t used_end() const override { return layout_.length(); }
  void clear() override { layout_.clear(); }

  Status declare_step(std::span<const int32_t> seq_ids) override {
    if (seq_ids.empty()) return invalid_argument("declare_step: no tokens, expected at least one");
    for (size_t i = 0; i < seq_ids.size(); ++i)
      if (seq_ids[i] != 0)
        return not_found(str_cat("declare_step: seq_ids[", i, "] = ", seq_ids[i],
                                 ", the sequence layout has only id 0"));
    return layout_.declare_step(static_cast<int32_t>(seq_ids.size()));
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
    const bool attend_only = op == AttendOp::kAttendOnly;
    Result<SequencePlan> plan = attend_only ? layout_.placed(a.layer) : prepare(a.layer);
    if (!plan.ok()) return plan.status();
    if (!attend_only) plan = layout_.place(a.layer);
    if (!plan.ok()) return plan.status();
    LayerPool& pool = pools_[a.layer];
    const LayerGeometry& l = layout_.geometry().layers[a.layer];
    if (!attend_only)
      detail::write_tokens(pool, l, a,
                           [&](int32_t i) { return layout_.slot(a.layer, plan->start + i); },
                           config().rotated());
    keys_.resize(a.n_tokens);
    for (int32_t i = 0; i < a.n_tokens; ++i) {
      Result<SlotRuns> vis = layout_.visible(a.layer, plan->start + i);
      if (!vis.ok())
        return internal_error(attend_context(a.layer, op) +
                              "placed step has no visibility: " + vis.status().message());
      keys_[i] = detail::keys_of(*vis);
    }
    detail::run_kernel(options_, detail::make_problem(a, pool, keys_), config().rotated());
    return ok_status();
  }

 public:
  int64_t allocated_bytes() const override { return detail::pools_bytes(pools_); }

  Result<std::unique_ptr<CacheCheckpoint>> checkpoint(int32_t seq) const override {
    if (seq != 0) return not_found(unknown("checkpoint", seq));
    auto cp = std::make_unique<RingCheckpoint>();
    cp->owner = this;
    cp->at = layout_.length();
    cp->rows.resize(pools_.size());
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const SlotRuns keep = layout_.lookback(i);  // none on a full layer
      const LayerPool& pool = pools_[i];
      const int64_t cb = pool.cell_bytes();
      cp->rows[i].resize(static_cast<size_t>(keep.size() * cb));
      std::byte* at = cp->rows[i].data();
      for (int32_t r = 0; r < keep.n; ++r)
        for (int64_t slot = keep.runs[r].begin; slot < keep.runs[r].end; ++slot, at += cb)
          pool.copy_out(slot, at);
    }
    return std::unique_ptr<CacheCheckpoint>(std::move(cp));
  }

  Status restore(int32_t seq, const CacheCheckpoint& checkpoint) override {
    if (seq != 0) return not_found(unknown("restore", seq));
    const auto* cp = dynamic_cast<const RingCheckpoint*>(&checkpoint);
    if (cp == nullptr || cp->owner != this)
      return invalid_argument("restore: the checkpoint was made by another cache");
    KVCACHE_RETURN_IF_ERROR(layout_.restore(cp->at));
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const SlotRuns keep = layout_.lookback(i);  // the runs checkpoint() copied, in order
      LayerPool& pool = pools_[i];
      const int64_t cb = pool.cell_bytes();
      const std::byte* at = cp->rows[i].data();
      for (int32_t r = 0; r < keep.n; ++r)
        for (int64_t slot = keep.runs[r].begin; slot < keep.runs[r].end; ++slot, at += cb)
          pool.copy_in(slot, at);
    }
    return ok_status();
  }

  Result<std::vector<LayerRows>> read_rows(int32_t seq, int64_t from,
                                           int64_t to) const override {
    if (seq != 0) return not_found(unknown("read_rows", seq));
    KVCACHE_RETURN_IF_ERROR(detail::check_read_range(seq, from, to, layout_.length()));
    std::vector<LayerRows> out;
    out.reserve(pools_.size());
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const int64_t first = std::min(to, std::max(from, layout_.held_from(i)));
      out.push_back(detail::make_rows(geometry(), config().key_type(),
                                      config().value_type(), i, first, to - first));
      for (int64_t p = first; p < to; ++p)
        detail::row_out(pools_[i], layout_.slot(i, p), out.back(), p);
    }
    return out;
  }

  // Chunks of at most step_limit() through declare_step/place, so the layout tracks the rings
  // as a prefill would; every check runs before the first chunk, so no chunk can fail.
  Status write_rows(int32_t seq, int64_t from, int64_t to,
                    std::span<const LayerRows> rows) override {
    if (seq != 0) return not_found(unknown("write_rows", seq));
    KVCACHE_RETURN_IF_ERROR(detail::check_append(seq, from, to, layout_.length()));
    if (to > layout_.capacity())
      return resource_exhausted(str_cat("write_rows: positions [", from, ", ", to,
                                        ") exceed capacity ", layout_.capacity()));
    const std::vector<int64_t> need = detail::needed_from(geometry(), from, to);
    Result<std::vector<const LayerRows*>> by_layer =
        detail::match_rows(geometry(), config().key_type(), config().value_type(), rows,
                           need, to);
    if (!by_layer.ok()) return by_layer.status();
    for (int32_t i = 0; i < layout_.n_layers(); ++i)
      if (!geometry().layers[i].sliding()) KVCACHE_RETURN_IF_ERROR(pools_[i].reserve(to));
    if (from == to) return ok_status();
    // Per layer, the first position written: a ring keeps [to - slots, to) of the append, and
    // when it is given less it is marked as holding only its last W - 1 (restore below).
    std::vector<int64_t> write_from(pools_.size());
    bool ring_short = false;
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const LayerRows* r = (*by_layer)[i];
      const int64_t keep = std::max(from, to - layout_.slots(i));
      write_from[i] = r == nullptr ? to : std::max(keep, r->first);
      if (geometry().layers[i].sliding() && write_from[i] > keep) ring_short = true;
    }
    for (int64_t at = from; at < to;) {
      const auto n = static_cast<int32_t>(std::min(to - at, layout_.step_limit()));
      KVCACHE_RETURN_IF_ERROR(layout_.declare_step(n));
      for (int32_t i = 0; i < layout_.n_layers(); ++i) {
        Result<SequencePlan> plan = layout_.place(i);
        if (!plan.ok()) return internal_error("write_rows: " + plan.status().message());
        for (int64_t p = std::max(at, write_from[i]); p < at + n; ++p)
          detail::row_in(pools_[i], layout_.slot(i, p), *(*by_layer)[i], p);
      }
      at += n;
    }
    return ring_short ? layout_.restore(to) : layout_.rewind(to);  // ends the last step
  }

 private:
  static std::string unknown(const char* op, int32_t seq) {
    return str_cat(op, ": sequence ", seq, " does not exist, the sequence layout has only id 0");
  }

  // Protocol checks that read state but change nothing.
  Status check_step(const AttendArgs& a, AttendOp op) const {
    KVCACHE_RETURN_IF_ERROR(
        detail::check_declared(a, op, layout_.step_open(), layout_.step_tokens()));
    for (int32_t i = 0; i < a.n_tokens; ++i)
      if (a.positions[i] != layout_.step_start() + i)
        return invalid_argument(str_cat(attend_context(a.layer, op), "positions[", i, "] = ",
                                        a.positions[i], ", expected ", layout_.step_start() + i));
    return ok_status();
  }

  // The pure plan of the layer, with its pool grown to hold it (growth keeps every byte, so
  // a later refusal leaves nothing observable changed).
  Result<SequencePlan> prepare(int32_t layer) {
    Result<SequencePlan> plan = layout_.plan(layer, layout_.step_start(), layout_.step_tokens());
    if (!plan.ok()) return plan;
    const LayerGeometry& l = layout_.geometry().layers[layer];
    const int64_t needed = l.sliding() ? plan->slots : plan->start + plan->n_tokens;
    KVCACHE_RETURN_IF_ERROR(pools_[layer].reserve(needed));
    return plan;
  }

  SequenceLayout layout_;
  CpuCacheOptions options_;
  std::vector<LayerPool> pools_;
  std::vector<KeySet> keys_;  // per token of the current call
};

}  // namespace

Result<std::shared_ptr<Cache>> make_sequence_cache(const CacheGeometry& g, const CacheConfig& c,
                                                   const CpuCacheOptions& options) {
  return detail::make_cache<SequenceCache, SequenceLayout>(g, c, options);
}

}  // namespace kvcache::cpu
