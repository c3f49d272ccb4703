// A conversation on one sequence of the cache: chunked prefill, the decode loop, and turns
// that can be undone (the cache returns to the turn's start). Layer: engine.
// Past sliding windows: at each turn's start the session saves what a return needs — in the
// sequence layout a checkpoint of the rings' last W - 1 positions (a copy of those bytes), in
// the cell layout a fork of the sequence (it pins W - 1 cells per sliding pool, no bytes are
// copied) — so undo and a refused turn return exactly to the turn's start. Only the last
// undo_turns() turns keep that state (older turns' is released, so a long conversation does
// not grow it without bound); an older turn is still undone when the cache holds its start.
// The last sampled token of a turn is held back and fed at the start of the next turn, so a
// turn costs exactly one forward per generated token — or, with a drafter
// (engine/speculative.h), one forward per verification step of 1 + accepted tokens, the
// rejected drafts rewound right after the step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

namespace kvcache::engine {

struct TurnStats {
  std::vector<int32_t> generated;   // sampled ids, in order
  int64_t prefill_tokens = 0;       // tokens fed in chunks (held-back token + prompt)
  int64_t decode_tokens = 0;        // single-token forwards
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  bool stopped_full = false;        // generation ended early: the cache had no room
  int64_t checkpoint_bytes = 0;     // K/V bytes saved at the turn's start for undo
  int32_t eog_token = -1;           // the end-of-generation id that ended the turn; -1 = none
                                    // (not in `generated`; fed at the next turn's start)
  SpecStats spec;                   // drafting, when a drafter is set
};

// Turns that keep their saved start by default (Session::set_undo_turns).
inline constexpr int32_t kDefaultUndoTurns = 8;

// What the undo history holds now (Session::undo_cost).
struct UndoCost {
  int32_t turns_kept = 0;        // turns whose saved start is held
  int64_t checkpoint_bytes = 0;  // sequence layout: K/V bytes of the held checkpoints
  int32_t forks = 0;             // cell layout: forks held (each a sequence id pinning up to
                                 // W - 1 cells per sliding pool; no bytes copied)
};

// The one chunked-prefill loop (sessions, the run tool's logits dump, the tests): feeds `tokens` to
// `seq` at its next positions, at most step_tokens per forward, with logits `mode` into `out`;
// on_chunk (optional) sees `out` after each chunk. Stops at the first refused chunk (earlier
// chunks stay in the cache). InvalidArgument when step_tokens < 1.
Status prefill_chunks(Engine& engine, int32_t seq, std::span<const int32_t> tokens,
                      int64_t step_tokens, LogitsMode mode, Logits& out,
                      const std::function<void(const Logits&)>& on_chunk = nullptr);

// Not thread-safe. Borrows the engine; `seq` must be live in its cache (sequence layout: 0).
class Session {
 public:
  Session(Engine& engine, int64_t step_tokens, int32_t seq = 0);
  ~Session();  // releases the turns' forks (cell layout)
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Feeds tokens in chunks of at most step_tokens; `last` (optional) gets the last token's
  // logits. Stops at the first refused chunk (earlier chunks stay in the cache).
  Status prefill(std::span<const int32_t> tokens, Logits* last);

  // One turn: prefill (held-back token + prompt), then up to max_new_tokens sampled tokens.
  // on_token (optional) sees each id as it is sampled. is_eog (optional) ends the turn at a
  // sampled id it accepts; that id is not reported. The turn is recorded for undo.
  // A refused prefill (e.g. the prompt does not fit) leaves the conversation as it was.
  Result<TurnStats> turn(std::span<const int32_t> prompt, int32_t max_new_tokens,
                         Sampler& sampler,
                         const std::function<void(int32_t)>& on_token = nullptr,
                         const std::function<bool(int32_t)>& is_eog = nullptr);

  // Returns the cache to the start of the n-th last turn. FailedPrecondition when fewer turns
  // exist; OutOfRange when the cache no longer holds that position and nothing is saved for
  // it (a sliding ring moved past it, and the turn is older than the last undo_turns() or its
  // save found no free sequence id). A refusal changes nothing. In the cell layout the
  // sequence id may change (the turn's fork takes over): read seq() again.
  Status undo(int32_t n = 1);
  // How many of the newest turns keep their saved start (>= 0; InvalidArgument otherwise).
  // Lowering it releases the older turns' state now. 0 keeps none once a turn's prefill is in
  // (a refused turn still returns exactly to its start).
  Status set_undo_turns(int32_t n);
  int32_t undo_turns() const { return undo_turns_; }
  UndoCost undo_cost() const;
  // Empties the sequence and forgets all turns.
  Status reset();
  // Speculative decoding in the following turns: `drafter` proposes, one forward verifies
  // (nullptr = off). Borrowed: it must outlive its use. InvalidArgument (draft_max) when
  // draft_max + 1 exceeds step_tokens() (the cache's max_write); nothing changes then.
  Status set_drafter(Drafter* drafter, const SpecOptions& options = {});
  Drafter* drafter() const { return drafter_; }
  const SpecOptions& spec_options() const { return spec_; }

  // The conversation's ids: those of the cache's positions [0, pos()), then the pending ones
  // (held back, fed first by the next turn). What a snapshot stores (engine/snapshot.h).
  std::vector<int32_t> conversation() const;
  // Adopts a sequence whose K/V were written from a snapshot: the cache's positions
  // [0, pos()) hold tokens[0, pos()), and the rest of tokens become pending. Forgets every
  // turn (undo cannot go behind a restore). InvalidArgument when tokens has fewer ids than
  // the sequence has positions; nothing changes then.
  Status resume(std::span<const int32_t> tokens);

  int64_t pos() const;
  size_t turns() const { return turns_.size(); }
  int32_t seq() const { return seq_; }
  int64_t step_tokens() const { return step_; }

 private:
  struct Turn {
    UndoPoint point;                // point.pos = the turn's start; what a return needs
    std::vector<int32_t> pending;   // held-back tokens at the turn's start
    bool released = false;  // its saved state was dropped (older than the last undo_turns_)
  };
  Status save(Turn& t);             // the cache's undo point of a turn's start
  // The decode loop after the prefill: `first` is sampled from logits_; each step forwards the
  // held token plus drafts and keeps what the acceptance rule keeps.
  Status decode(int32_t max_new_tokens, Sampler& sampler, TurnStats& st,
                const std::function<void(int32_t)>& on_token,
                const std::function<bool(int32_t)>& is_eog);
  // Emits `tok`: true when the turn ends with it (it is then pending).
  bool emit(int32_t tok, int32_t max_new_tokens, TurnStats& st,
            const std::function<void(int32_t)>& on_token,
            const std::function<bool(int32_t)>& is_eog);
  Status return_to(Turn& t);        // back to the turn's start (seq_ may change: a fork)
  void drop(Turn& t);               // releases the turn's undo point
  void trim_undo();                 // releases all but the newest undo_turns_ turns' state
  Engine& engine_;
  int64_t step_;
  int32_t seq_;
  std::vector<int32_t> pending_;
  std::vector<int32_t> history_;  // the id of each cache position, [0, pos())
  std::vector<Turn> turns_;
  int32_t undo_turns_ = kDefaultUndoTurns;
  Logits logits_;
  std::vector<int32_t> ids_;
  std::vector<int64_t> positions_;
  Drafter* drafter_ = nullptr;
  SpecOptions spec_;
  AdaptiveK draft_k_;  // the adaptive draft width
  Draft draft_;
  std::vector<int32_t> feed_;  // a step's tokens: the held one + drafts
};

}  // namespace kvcache::engine
