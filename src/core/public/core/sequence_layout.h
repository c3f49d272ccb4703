// Sequence layout (kind "sequence"): one sequence, every layer shares one logical length.
// Layer: core. Integer plans only — which slots a step writes and which it reads; the byte
// layer moves the bytes. Full layers: slot = position. Sliding layers: a ring of
// R = min(W + M - 1, capacity) slots, M = max_write or W. See SPEC §3.
// Plan, then commit: plan() is const; place() is the one mutator of a step (it advances the
// length on the step's first layer). Every refusal changes nothing.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"

namespace kvcache {

struct SlotRun {
  int64_t begin = 0;  // first slot
  int64_t end = 0;    // one past the last slot
  int64_t size() const { return end - begin; }
  friend bool operator==(const SlotRun&, const SlotRun&) = default;
};

// Slots of a contiguous range of positions, oldest first: one run, or two when a ring wraps.
struct SlotRuns {
  std::array<SlotRun, 2> runs;
  int32_t n = 0;      // 0..2 runs
  int64_t first = 0;  // position held by the first slot of runs[0]
  int64_t size() const { return (n > 0 ? runs[0].size() : 0) + (n > 1 ? runs[1].size() : 0); }
};

// One layer's plan for one step of T tokens starting at position `start`.
struct SequencePlan {
  int64_t start = 0;             // position of the step's first token (the old length L)
  int32_t n_tokens = 0;          // T
  int32_t window = 0;            // 0 = full
  std::array<SlotRun, 2> write;  // slots for positions [start, start+T), in position order
  int32_t n_write = 0;           // 1 or 2 runs (2 when a ring wraps)
  std::array<SlotRun, 2> read;   // slots for positions [read_begin, start+T), oldest first
  int32_t n_read = 0;            // 0..2 runs
  int64_t read_begin = 0;        // first position read: 0 (full) or max(0, start-W+1)
  // Slot of position p (read_begin <= p < start+T): p for full layers, p mod R for rings.
  int64_t slots = 0;             // R (rings) or capacity (full)
};

// A copyable value (small metadata). Thread-safety: not thread-safe.
class SequenceLayout {
 public:
  // Validates (same checks as the factory). InvalidArgument with the reason.
  static Result<SequenceLayout> create(const CacheGeometry& geometry, const CacheConfig& config);

  const CacheGeometry& geometry() const { return geometry_; }
  const CacheConfig& config() const { return config_; }
  int32_t n_layers() const { return static_cast<int32_t>(geometry_.layers.size()); }
  int64_t length() const { return length_; }          // L
  int64_t capacity() const { return config_.capacity; }
  int64_t step_limit() const { return step_limit_; }  // widest step accepted
  int64_t slots(int32_t layer) const;                 // storage rows the layer needs at most
  // Lowest position the layer still holds: 0 for a full layer; for a ring the oldest position
  // no later step overwrote nor a restore() dropped (length() when it holds none).
  int64_t held_from(int32_t layer) const;
  bool can_extend(int64_t n) const;                   // L + n <= capacity, n <= step_limit
  // Lowest length rewind() accepts besides 0: max(0, L - M) over sliding layers, 0 without them.
  // After a rewind the rings hold fewer positions, so the floor is also kept at or above
  // (lowest position a ring still holds) + W - 1 whenever that ring (W > 1) has dropped a
  // position: otherwise the next step would read back positions the ring overwrote.
  int64_t rewind_floor() const;

  // Slot of position pos in the layer: pos on a full layer, pos mod R on a ring. The one home
  // of that rule; the byte layer reads and writes rows through it. Layer and pos must be valid.
  int64_t slot(int32_t layer, int64_t pos) const;
  // What a query at `pos` reads in the layer (SPEC §3): positions [lo, pos], lo = 0 on a full
  // layer, max(0, pos - W + 1) on a sliding one, as slot runs. InvalidArgument: layer out of
  // range. OutOfRange: pos outside [0, length()) or lo below held_from(layer) (the ring no
  // longer holds it). The cell layout's visible() is its counterpart.
  Result<SlotRuns> visible(int32_t layer, int64_t pos) const;
  // What the next step reads back in the layer, and so what a checkpoint at length() copies and
  // a restore() to it writes back: positions [max(0, L - W + 1), L) of a sliding layer as slot
  // runs; none (n = 0) for a full layer or a layer out of range.
  SlotRuns lookback(int32_t layer) const;

  // Pure: the plan for `layer` of a T-token step starting at `start`. InvalidArgument for a
  // layer out of range, T <= 0, T > step_limit or start + T > capacity.
  Result<SequencePlan> plan(int32_t layer, int64_t start, int32_t n_tokens) const;

  // Admission of a T-token step at the current length. ResourceExhausted when the capacity
  // is short; InvalidArgument when T <= 0 or T > step_limit. A refusal keeps an earlier
  // standing declaration.
  Status declare_step(int32_t n_tokens);
  // The layer's plan for the declared step. The first layer placed advances the length once.
  // FailedPrecondition: no declared step, the layer was already placed in this step, or a verb
  // ran since the declaration. InvalidArgument: layer out of range.
  Result<SequencePlan> place(int32_t layer);
  // The plan of a layer already placed in the current step (for a reader that writes nothing,
  // e.g. a KV-shared layer). FailedPrecondition when the layer was not placed this step.
  Result<SequencePlan> placed(int32_t layer) const;
  bool step_open() const { return step_tokens_ > 0; }
  int32_t step_tokens() const { return step_tokens_; }
  int64_t step_start() const { return step_start_; }

  // OutOfRange when new_len > L (rewind never grows) or 0 < new_len < rewind_floor().
  // rewind(0) always succeeds: nothing is read back, it is clear(). Ends any open step.
  Status rewind(int64_t new_len);
  // Rewind to new_len <= L whatever the floor, for a byte layer that writes back positions
  // [max(0, new_len - W + 1), new_len) of every sliding layer from a checkpoint; the rings are
  // then known to hold only those. OutOfRange when new_len > L or < 0. Ends any open step.
  Status restore(int64_t new_len);
  void clear();  // length 0, every slot free; ends any open step

 private:
  SequenceLayout(CacheGeometry g, CacheConfig c);
  void commit_step();  // the step's first placement: advance L once, track ring contents
  void end_step();     // a verb ran: the open step (if any) is over
  CacheGeometry geometry_;
  CacheConfig config_;
  int64_t step_limit_ = 0;
  int64_t length_ = 0;
  // Open step: declared token count (0 = none), start position, layers placed so far.
  int32_t step_tokens_ = 0;
  int64_t step_start_ = 0;
  bool step_committed_ = false;
  std::vector<bool> placed_;
  // Per layer: lowest position its ring still holds (0 for full layers and unwrapped rings).
  std::vector<int64_t> ring_low_;
};

}  // namespace kvcache
