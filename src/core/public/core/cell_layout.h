// Cell layout (kind "cell"): many sequences over pools of cells. Layer: core.
// Layers that share a window share a pool with its own cell numbering (core/geometry.h
// cell_pools()). A cell holds one token (its position and its owner count); a fork adds owners
// instead of copying. The full pool keeps every position of a sequence; a Sliding(W) pool keeps
// only the positions a future query can see — the last W - 1 — plus the open step's tokens,
// and the rest is freed (owner count drop) when the step ends. Per pool a sequence is a
// position-indexed list of cells, so a query's visibility is one slice of it, found in O(1);
// a step costs O(its tokens) plus what the kernel then reads — never O(capacity) and never
// O(other sequences' cells). Free cells are refilled lowest-first. See SPEC §4 and §15.
// Plan, then commit: admission and placement check every pool before mutating; every refusal
// changes nothing (an earlier standing declaration stays).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"

namespace kvcache {

inline constexpr int32_t kDefaultMaxSeqs = kDefaultCellSeqs;

// Costs: a verb costs O(the cells it touches) (seq_clone/seq_rm/rewind: the sequence's
// affected positions); declare_step O(tokens * pools); place O(tokens * pools * log64 cells)
// on the first layer, O(tokens) after; visible O(1); ending a step O(its tokens * pools).
// Cell metadata grows with the highest cell used, not with capacity. Free cells and ids are
// found with a BitTree (core/bit_tree.h).
// Thread-safety: not thread-safe. Spans returned stay valid until the next mutating call.
// Move-only; a moved-from layout may only be destroyed or assigned to.
class CellLayout {
 public:
  // InvalidArgument with the validation reason. The id bound is config.max_seqs (unset:
  // kDefaultCellSeqs); the second form overrides it with `max_seqs` (also validated).
  static Result<CellLayout> create(const CacheGeometry& geometry, const CacheConfig& config);
  static Result<CellLayout> create(const CacheGeometry& geometry, const CacheConfig& config,
                                   int32_t max_seqs);

  const CacheGeometry& geometry() const;
  const CacheConfig& config() const;  // max_seqs always set
  int32_t n_layers() const;

  // ---- sequence verbs (each accepted verb but seq_clone and rewind_many ends any open step;
  // a refused one changes nothing, so a standing step survives it) ----
  // Lowest free id. ResourceExhausted when max_seqs ids are live.
  Result<int32_t> seq_new();
  // A new sequence owning src's cells at positions < upto (all when unset) in the full pool
  // and its last W - 1 of them in each Sliding(W) pool: exactly what a fresh prefill of those
  // positions would hold. Nothing copied. NotFound: src not live. InvalidArgument: upto < 0.
  // ResourceExhausted: no id. OutOfRange naming the pool: a sliding pool no longer holds the
  // window the clone needs (src moved on and freed it).
  // A clone leaves an open step open (the clone is not part of it): until the step ends, src
  // still holds the window its step started from, so clones may be taken at any position the
  // step wrote, once its K/V are written (checkpoints inside a prefill chunk).
  Result<int32_t> seq_clone(int32_t src, std::optional<int64_t> upto);
  // Drops every claim and releases the id. NotFound when not live.
  Status seq_rm(int32_t seq);
  // Drops the sequence's positions >= pos; the id stays. NotFound: not live.
  // OutOfRange: pos < 0 or pos > pos(seq) (rewind never grows), or a sliding pool no longer
  // holds the W - 1 positions before pos (the message names the pool). pos = 0 always works.
  // Right after a step (before any other verb or declaration) the pools still hold the window
  // that step started from, so the step's own tokens can be taken back exactly — the cache is
  // then as if they had never been written (speculative decoding's rejected drafts).
  Status rewind(int32_t seq, int64_t pos);
  // rewind() of several sequences at once, each to its own position, all judged on what the
  // pools hold before any is truncated; unlike rewind() a placed step stays open (like
  // seq_clone), so the tokens one step wrote for many sequences (several sessions'
  // verification rows) can all be taken back exactly and clones inside the step's other
  // chunks still be taken; its end then trims against the new positions. InvalidArgument:
  // sizes differ or a sequence is named twice. NotFound / OutOfRange as rewind() for the first
  // refused entry; a refusal changes nothing.
  Status rewind_many(std::span<const int32_t> seqs, std::span<const int64_t> positions);
  void clear();  // frees every cell and id

  // ---- queries ----
  bool live(int32_t seq) const;
  int64_t pos(int32_t seq) const;      // next position; 0 when empty or not live
  int64_t seq_len(int32_t seq) const;  // positions the sequence has (= pos); 0 when not live
  int32_t max_seqs() const;
  int64_t capacity() const;            // full pool size in cells (config.capacity)
  // Tokens a new step could still add: the minimum over pools of free cells, counting the
  // cells the end of the open step will free.
  int64_t free_cells() const;
  // Pool 0 (the full pool when any layer is full), as before pools existed:
  int64_t used_end() const;                 // one past the highest occupied cell; 0 when empty
  int64_t cell_pos(int32_t cell) const;     // -1 when free
  int32_t cell_owners(int32_t cell) const;  // 0 when free
  std::span<const int32_t> seq_cells(int32_t seq) const;  // == held(seq, 0)

  // ---- pools ----
  int32_t n_pools() const;
  int32_t pool_of(int32_t layer) const;           // -1 when the layer is out of range
  const CellPool& pool(int32_t pool) const;       // window, layers, cells (its maximum)
  int64_t pool_free(int32_t pool) const;          // free cells now
  int64_t pool_room(int32_t pool) const;          // free + what the open step's end frees
  int64_t pool_used_end(int32_t pool) const;      // one past its highest occupied cell
  int64_t cell_pos(int32_t pool, int32_t cell) const;     // -1 when free
  int32_t cell_owners(int32_t pool, int32_t cell) const;  // 0 when free
  // The cells the sequence holds in the pool, oldest position first; index 0 has position
  // held_first_pos(). Full pool: every position. Empty when not live.
  std::span<const int32_t> held(int32_t seq, int32_t pool) const;
  int64_t held_first_pos(int32_t seq, int32_t pool) const;
  // Lowest position of the sequence a later query can still see in the pool: held_first_pos()
  // on the full pool; on a Sliding(W) pool also >= pos(seq) - W + 1 (it may still hold an
  // ended step's older cells, which no query reads). 0 when not live.
  int64_t kept_from(int32_t seq, int32_t pool) const;

  // ---- a step ----
  // One id per token of the next forward. InvalidArgument: empty. NotFound: an id not live.
  // ResourceExhausted naming the pool: a pool has fewer free cells than tokens (counting what
  // the end of the open step frees). A refusal keeps an earlier declaration.
  Status declare_step(std::span<const int32_t> seq_ids);
  bool step_open() const;
  std::span<const int32_t> step_seq_ids() const;

  // The first layer placed claims one cell per token in every pool; token i's position must
  // equal its sequence's next position (advancing within the step). Later layers must pass
  // the same positions and reuse the placement. Returns the cell of each token in the layer's
  // pool. FailedPrecondition: no declaration, the step was invalidated by a verb, or this
  // layer was already placed. InvalidArgument: layer out of range, positions.size() !=
  // declared tokens, a position that does not continue its sequence (the declaration still
  // stands), or positions differing from the placed ones.
  Result<std::span<const int32_t>> place(int32_t layer, std::span<const int64_t> positions);
  bool placed(int32_t layer) const;  // placed in the current step
  std::span<const int32_t> step_cells() const;  // pool 0's; empty before the first placement
  std::span<const int32_t> step_cells(int32_t layer) const;  // the layer's pool's

  // Cells (of the layer's pool) token i of the current step sees on `layer`, oldest position
  // first: the slice of its sequence's list at positions [max(0, p - W + 1), p] (W = the
  // layer's window; all of [0, p] on a full layer). Valid once the step is placed; layers
  // with the same window get the same slice. FailedPrecondition when the layer is not placed
  // in this step.
  Result<std::span<const int32_t>> visible(int32_t layer, int32_t token) const;
  // Position of the first cell in visible(layer, token); -1 when visible() would refuse.
  int64_t visible_first_pos(int32_t layer, int32_t token) const;

 private:
  struct State;
  explicit CellLayout(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;

 public:
  CellLayout(CellLayout&&) noexcept;
  CellLayout& operator=(CellLayout&&) noexcept;
  ~CellLayout();
};

}  // namespace kvcache
