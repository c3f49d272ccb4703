// SequenceCache: the cpu byte layer behind SequenceLayout (one sequence, id 0). Full layers
// store position p in row p and grow lazily; sliding layers are rings sized up front.
#include <string>
#include <vector>

#include "core/sequence_layout.h"
#include "cpu/cache_common.h"
#include "cpu/caches.h"

namespace kvcache::cpu {

namespace {

class SequenceCache final : public Cache {
 public:
  SequenceCache(SequenceLayout layout, const CpuCacheOptions& options)
      : layout_(std::move(layout)), options_(options) {}

  Status init() {
    const CacheConfig& c = layout_.config();
    for (int32_t i = 0; i < layout_.n_layers(); ++i) {
      const LayerGeometry& l = layout_.geometry().layers[i];
      pools_.emplace_back(l, c.kv_dtype, layout_.slots(i));
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
        return not_found("declare_step: seq_ids[" + std::to_string(i) + "] = " +
                         std::to_string(seq_ids[i]) + ", the sequence layout has only id 0");
    return layout_.declare_step(static_cast<int32_t>(seq_ids.size()));
  }

  Status update_and_attend(const AttendArgs& a) override {
    KVCACHE_RETURN_IF_ERROR(check_attend_args(layout_.geometry(), a));
    KVCACHE_RETURN_IF_ERROR(check_step(a));
    const bool attend_only = a.k.empty();
    Result<SequencePlan> plan = attend_only ? layout_.placed(a.layer) : prepare(a.layer);
    if (!plan.ok()) return plan.status();
    if (!attend_only) plan = layout_.place(a.layer);
    if (!plan.ok()) return plan.status();
    LayerPool& pool = pools_[a.layer];
    const LayerGeometry& l = layout_.geometry().layers[a.layer];
    const int64_t slots = plan->slots;
    if (!attend_only)
      detail::write_tokens(pool, l, a, [&](int32_t i) { return (plan->start + i) % slots; });
    keys_.resize(a.n_tokens);
    for (int32_t i = 0; i < a.n_tokens; ++i) {
      const int64_t p = plan->start + i;
      const int64_t lo = l.sliding() ? std::max<int64_t>(0, p - l.window + 1) : 0;
      keys_[i] = detail::ring_keys(lo, p, slots);
    }
    detail::run_kernel(options_, detail::make_problem(a, pool, keys_));
    return ok_status();
  }

  int64_t allocated_bytes() const override { return detail::pools_bytes(pools_); }

 private:
  static std::string unknown(const char* op, int32_t seq) {
    return std::string(op) + ": sequence " + std::to_string(seq) +
           " does not exist, the sequence layout has only id 0";
  }

  // Protocol checks that read state but change nothing.
  Status check_step(const AttendArgs& a) const {
    KVCACHE_RETURN_IF_ERROR(detail::check_declared(a, layout_.step_open(), layout_.step_tokens()));
    for (int32_t i = 0; i < a.n_tokens; ++i)
      if (a.positions[i] != layout_.step_start() + i)
        return invalid_argument("update_and_attend: layer " + std::to_string(a.layer) +
                                ": positions[" + std::to_string(i) + "] = " +
                                std::to_string(a.positions[i]) + ", expected " +
                                std::to_string(layout_.step_start() + i));
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
