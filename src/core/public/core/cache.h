// The cache interface every backend implements, as two faces: CacheControl, what the
// application drives (sequence verbs, admission, undo points, rows, counters), and CacheKernel,
// what one layer of a forward calls (update_and_attend, attend). Cache is both, for factories
// and owners; callers hold the face they drive. Layer: core. Core declares them and never
// touches the float data; a byte layer (cpu) implements them. See SPEC §3–§6.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"

namespace kvcache {

// Layout kinds, as registered with the factory. Use these, not literals.
inline constexpr std::string_view kSequenceKind = "sequence";
inline constexpr std::string_view kCellKind = "cell";
inline constexpr std::string_view kCpuBackend = "cpu";

// One layer's call of a step. Shapes are row-major float32:
//   q [T, q_heads, head_dim], k [T, kv_heads, head_dim], v [T, kv_heads, value_dim],
//   out [T, q_heads, value_dim]. k and v are given to update_and_attend and left empty for
//   attend (a KV-shared layer reading a cache layer an earlier call of this step wrote).
struct AttendArgs {
  int32_t layer = 0;                    // cache layer index
  int32_t n_tokens = 0;                 // T; must equal the declared step
  int32_t q_heads = 0;                  // a positive multiple of the layer's kv_heads
  std::span<const int64_t> positions;   // T positions (must match the layout's placement)
  std::span<const float> q, k, v;
  float scale = 0.0f;                   // logit scale (e.g. 1/sqrt(head_dim))
  float softcap = 0.0f;                 // 0 = none; else logits = c * tanh(logits / c)
  std::span<float> out;
  // One logit per query head (q_heads floats) when the layer's geometry has sinks, else
  // empty. Head h's weights become exp(s_j - m) / (exp(sinks[h] - m) + sum_j exp(s_j - m)):
  // the sink takes a share of the softmax and brings no value. The model owns these values;
  // the cache only applies them (per call, like scale and softcap).
  std::span<const float> sinks = {};
};

// What a rewind to one position needs that a sliding-window ring may overwrite later: the K/V
// of the W - 1 positions before it in every sliding layer (a copy of those bytes). Opaque;
// only the cache that made it reads it. Move-only value owned by the caller.
class CacheCheckpoint {
 public:
  virtual ~CacheCheckpoint() = default;
  virtual int32_t seq() const = 0;
  virtual int64_t pos() const = 0;    // the position restore() returns to
  virtual int64_t bytes() const = 0;  // K/V bytes held
};

// What a return of one sequence to an earlier position needs past sliding windows, saved by
// CacheControl::save_point(): a checkpoint (a copy of the rings' last W - 1 rows; sequence
// layout) or a fork (a sequence pinning those cells, no bytes copied; cell layout), or nothing
// when no layer looks back (W > 1), since a rewind then suffices. Move-only, owned by the
// caller; hand it back to return_to() or release() of the cache that made it (a fork holds a
// sequence id until then).
struct UndoPoint {
  int64_t pos = 0;                              // the position a return goes back to
  std::unique_ptr<CacheCheckpoint> checkpoint;  // nullptr = none
  int32_t fork = -1;                            // sequence holding the point; -1 = none
  bool saved() const { return checkpoint != nullptr || fork >= 0; }
  int64_t bytes() const { return checkpoint != nullptr ? checkpoint->bytes() : 0; }
};

// K/V rows of one cache layer for positions [first, first + n), in the cache's key and value
// types exactly as stored (q8_0 / q4_0 blocks as they are), position-major: k holds n x
// kv_heads rows of head_dim values, v n x kv_heads rows of value_dim (so k.size() == n *
// kv_heads * row_bytes(key type, head_dim)). A big buffer: move it.
struct LayerRows {
  int32_t layer = 0;   // cache layer index
  int64_t first = 0;   // position of the first row
  int64_t n = 0;       // rows; 0 when the layer holds none of the asked range
  std::vector<uint8_t> k, v;
};

// The application's face. Thread-safety: not thread-safe; one caller drives a cache (kernels
// may use threads inside). Every call that returns a non-ok Status or refused result changes
// nothing.
class CacheControl {
 public:
  virtual ~CacheControl() = default;

  virtual std::string_view kind() const = 0;  // kSequenceKind or kCellKind
  virtual const CacheGeometry& geometry() const = 0;
  virtual const CacheConfig& config() const = 0;

  // ---- application face ----
  // Sequence ids. The sequence layout has exactly one sequence, id 0, always live; seq_new
  // and seq_clone there return Unimplemented.
  virtual Result<int32_t> seq_new() = 0;
  virtual Result<int32_t> seq_clone(int32_t src, std::optional<int64_t> upto) = 0;
  virtual Status seq_rm(int32_t seq) = 0;
  // Drop the sequence's positions >= pos. OutOfRange when the cache no longer holds pos
  // (sequence layout: below the ring floor); growth is refused.
  virtual Status rewind(int32_t seq, int64_t pos) = 0;
  // Rewinds several sequences, each to its own position, right after the step that wrote them
  // all (cell layout: judged on what its pools hold before any is truncated, and the step stays
  // open for clones of its other sequences; see CellLayout::rewind_many). InvalidArgument when the sizes differ or a
  // sequence is named twice; otherwise rewind()'s codes for the first refused entry, and a
  // refusal changes nothing. The default (layouts of one sequence) takes one entry and refuses
  // more as Unimplemented.
  virtual Status rewind_many(std::span<const int32_t> seqs, std::span<const int64_t> positions);
  virtual int64_t pos(int32_t seq) const = 0;      // next position; 0 when empty or unknown
  virtual int64_t seq_len(int32_t seq) const = 0;  // cells owned
  virtual int32_t max_seqs() const = 0;
  virtual int64_t capacity() const = 0;            // cells
  virtual int64_t free_cells() const = 0;          // cells a new step could still claim
  virtual int64_t used_end() const = 0;            // one past the highest occupied cell
  virtual void clear() = 0;

  // Undo past a ring. checkpoint(): saves what a later restore to pos(seq) needs.
  // restore(): rewinds seq to the checkpoint's position even when the rings have moved past
  // it, writing the saved rows back. OutOfRange when seq is now below that position (restore
  // never grows); InvalidArgument for another cache's or sequence's checkpoint. A layout
  // without rings returns Unimplemented for both (use rewind).
  virtual Result<std::unique_ptr<CacheCheckpoint>> checkpoint(int32_t seq) const {
    (void)seq;
    return unimplemented("checkpoint: this cache has no rings to save (use rewind)");
  }
  virtual Status restore(int32_t seq, const CacheCheckpoint& checkpoint) {
    (void)seq, (void)checkpoint;
    return unimplemented("restore: this cache has no rings to restore (use rewind)");
  }

  // Layout-independent verbs, so no caller needs to ask kind().
  // open_seq(): an empty sequence to start on — seq_new() on the cell layout, the one sequence 0
  // on the sequence layout. ResourceExhausted: every id is taken (cell layout), or sequence 0
  // holds positions (sequence layout: clear or rewind it first).
  virtual Result<int32_t> open_seq() = 0;
  // save_point(): what a later return of seq to pos(seq) needs (UndoPoint; nothing saved when no
  // layer looks back). NotFound: seq not live. ResourceExhausted: no room for it (cell layout:
  // no free sequence id for the fork) — a caller may go on without, undoing by rewind.
  virtual Result<UndoPoint> save_point(int32_t seq) = 0;
  // return_to(): seq back to the point's position — a rewind when the position is 0 or nothing
  // is saved, else restore() from its checkpoint, else its fork takes over (seq is removed, the
  // point's fork consumed). Returns the id now holding the sequence (the fork's id, or seq).
  // Refusals (rewind's and restore's codes) change nothing and leave the point as it was.
  Result<int32_t> return_to(int32_t seq, UndoPoint& point);
  // release(): frees what the point holds (its fork's id and cells, its checkpoint's bytes);
  // the point is then empty. Ignores a fork no longer live.
  void release(UndoPoint& point);

  // Export / import of a sequence's K/V (snapshots, shared prefix blocks); run between steps.
  // read_rows(): copies out what the cache still holds of seq's positions [from, to): one
  // LayerRows per cache layer, in layer order, rows in logical position order. A full layer
  // returns every position; a sliding layer may hold only a suffix (first > from; n = 0 when
  // it holds none). NotFound: seq not live. InvalidArgument: from < 0 or from > to.
  // OutOfRange: to > pos(seq). Cost: O((to - from) x layers) row copies.
  virtual Result<std::vector<LayerRows>> read_rows(int32_t seq, int64_t from, int64_t to) const {
    (void)seq, (void)from, (void)to;
    return unimplemented("read_rows: this cache cannot export rows");
  }
  // write_rows(): appends positions [from, to) to seq, which must be at pos(seq) == from (0 on
  // an empty or new sequence): claims cells as steps of those positions would (in chunks when
  // the layout limits a step) and writes the given rows, exactly one LayerRows per cache layer
  // (any order). A full layer needs rows for every position of [from, to); a sliding layer of
  // window W needs at least [max(from, to - (W - 1)), to), what it still holds afterwards;
  // rows outside what the layer keeps are ignored. Ends any open step. Refusals change
  // nothing: NotFound (seq not live), InvalidArgument naming the layer and what is missing or
  // mis-sized (also from != pos(seq), to < from), ResourceExhausted when a pool lacks room.
  // A sequence-layout ring given only the last W - 1 rows is afterwards known to hold only
  // those (rewind floor = to).
  virtual Status write_rows(int32_t seq, int64_t from, int64_t to,
                            std::span<const LayerRows> rows) {
    (void)seq, (void)from, (void)to, (void)rows;
    return unimplemented("write_rows: this cache cannot import rows");
  }

  // Admission: one id per token of the next forward (the sequence layout: all 0). Refused
  // when empty, an id is not live, a step is wider than the layout allows, or the pool lacks
  // room; a refusal leaves any earlier declaration standing.
  virtual Status declare_step(std::span<const int32_t> seq_ids) = 0;

  // Bytes of K/V storage allocated now (grows lazily up to the maximum).
  virtual int64_t allocated_bytes() const = 0;
};

// The kernel's face: one layer's call of the step the application declared. Placement happens
// inside (the step's first written layer places its tokens; the others reuse that placement).
// Thread-safety: as CacheControl (the same object). A shape or protocol error writes no byte
// and claims no cell.
class CacheKernel {
 public:
  virtual ~CacheKernel() = default;

  // Writes the step's K/V (args.k and args.v, both required) where the layout placed them and
  // attends each query over what it may see. InvalidArgument naming the field for a bad shape
  // (an empty k or v included); FailedPrecondition without a declared step or when the layer
  // was already written in this step.
  virtual Status update_and_attend(const AttendArgs& args) = 0;

  // Attend only: a KV-shared layer reads cache layer args.layer, which update_and_attend wrote
  // earlier in this step; writes nothing. args.k and args.v must be empty (InvalidArgument
  // naming the one given); FailedPrecondition when the layer was not written in this step.
  virtual Status attend(const AttendArgs& args) = 0;
};

// Both faces: what a factory builds and an owner holds (shared_ptr<Cache>).
class Cache : public CacheControl, public CacheKernel {};

}  // namespace kvcache
