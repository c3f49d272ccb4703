// The decoder forward through the cache: a batch of tokens (from one or many sequences) goes
// through every block, attention via the cache's kernel face (CacheKernel). Layer: engine.
// The engine borrows the model and shares the cache; it owns only scratch buffers. Callers
// drive sequences through cache(), the application face; only the blocks see the kernel face.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/cache.h"
#include "core/status.h"
#include "kernels/kernels.h"
#include "engine/model.h"
#include "engine/moe.h"

namespace kvcache::engine {

// One forward's tokens. Equal lengths, non-empty. The sequence layout uses seq 0 and
// positions pos(0), pos(0)+1, ...; the cell layout any live ids with each sequence's next
// positions (advancing within the batch).
struct Batch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> seq_ids;
  std::span<const int64_t> positions;
};

enum class LogitsMode {
  kLast,  // one row per distinct sequence: its last token in the batch (in order of last use)
  kAll,   // one row per token
};

struct Logits {
  int32_t vocab = 0;
  std::vector<int32_t> token_index;  // per row: the batch index it belongs to
  std::vector<float> data;           // [rows, vocab]
  std::span<const float> row(size_t r) const {
    return std::span<const float>(data).subspan(r * static_cast<size_t>(vocab), vocab);
  }
  size_t rows() const { return token_index.size(); }
};

// Thread-safety: one caller at a time (the cache is not thread-safe); kernels use threads.
class Engine {
 public:
  // InvalidArgument when the cache's geometry does not fit the model (cache layer count,
  // kv_heads, head/value dims, sinks; windows may differ).
  static Result<std::unique_ptr<Engine>> create(const Model& model, std::shared_ptr<Cache> cache);

  // Declares the step on the cache and runs every block. A refused declaration or an invalid
  // batch (token out of range, lengths differ) changes nothing.
  Status forward(const Batch& batch, LogitsMode mode, Logits& out);
  // The same, with a logits row for each batch index in `rows` (strictly ascending, each in
  // [0, tokens); InvalidArgument naming the entry otherwise, nothing changed): the batching
  // executor asks for every row of a verification step and the last row of the other
  // sequences.
  Status forward(const Batch& batch, std::span<const int32_t> rows, Logits& out);

  const Model& model() const { return model_; }
  CacheControl& cache() { return *cache_; }
  const CacheControl& cache() const { return *cache_; }
  const std::shared_ptr<Cache>& shared_cache() const { return cache_; }  // the owner's handle
  // What the mixture-of-experts MLPs read since construction or the last reset (all zero for
  // a dense model).
  const MoeStats& moe_stats() const { return moe_.stats; }
  void reset_moe_stats() { moe_.stats = MoeStats{}; }

 private:
  Engine(const Model& model, std::shared_ptr<Cache> cache);
  Status run_layer(int32_t i, int64_t t, std::span<const int64_t> positions);
  // x_ += (post-norm of) y[T, d]: a block's residual add; gemma normalizes y first.
  void add_residual(std::span<float> y, const std::vector<float>& post_norm, int64_t t);

  const Model& model_;
  std::shared_ptr<Cache> cache_;  // owner; forward() admits steps through it
  CacheKernel& kernel_;           // *cache_: what run_layer() calls
  kernels::RopeParams rope_, rope_swa_;  // full layers, sliding layers (gemma3: a different base)
  // Scratch, sized for the largest batch seen: x/h [T, d], q [T, Hq*Dk], k/v, att, ff.
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_;
  MoeScratch moe_;  // mixture-of-experts blocks: routing, gathered rows, counters
};

// Checks that `g` (a cache's geometry) fits the model's cache layers (kv_heads, dims, sinks);
// windows may differ.
Status check_cache_fits(const Model& model, const CacheGeometry& g);

}  // namespace kvcache::engine
