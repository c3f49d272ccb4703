// Speculative decoding for one session: drafters that propose tokens cheaply — n-gram lookup
// in the session's own tokens, or a second model with its own cache — and the acceptance rule
// that keeps what the target agrees with. Layer: engine. Session::turn runs the loop (one
// forward of the target over the held token + K drafts, then a rewind of the rejected tail);
// the batching executor (serve/executor_draft.cpp) applies the same rule and AdaptiveK per
// session. See docs/speculative.md. Not here: tree drafts. The self:TYPE drafter is a
// ModelDrafter over Model::requantized().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "text/tokenizer.h"

namespace kvcache::engine {

inline constexpr int32_t kDefaultNgram = 3;     // ngram: longest n-gram tried (n = 3, 2, 1)
inline constexpr int32_t kMaxNgram = 64;
inline constexpr int32_t kDefaultDraftMax = 8;  // K; see docs/speculative.md for the figures

// Proposed tokens. q[i] (when q is not empty) is the drafter's distribution by id that
// tokens[i] was drawn from; empty q = each token is certain (q one-hot: n-gram, greedy).
struct Draft {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> q;
  void clear() {
    tokens.clear();
    q.clear();
  }
};

// Not thread-safe.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to k (>= 1) tokens continuing `context` (the conversation's every id; the last one is
  // not yet in the target's cache). Fewer or none when it has nothing to offer.
  virtual Status propose(std::span<const int32_t> context, int32_t k, Draft& out) = 0;
  virtual std::string name() const = 0;  // "ngram:3", "model:FILE", "self:q4_0"
  // Reads `context` (ids all in the target's cache: a turn's prompt just prefilled) before
  // the first proposal, so that reading it is prompt work, timed with the prefill, not the
  // first draft's cost. Optional: propose() catches up on whatever it has not read.
  virtual Status prepare(std::span<const int32_t> /*context*/) { return ok_status(); }
};

// Finds the most recent earlier occurrence of the context's last n ids (n = max_n down to 1,
// the longest that occurs wins) and proposes the ids that followed it; when they run into the
// context's end (a recent repeat), matches again on the context plus the drafts so far, up to
// k. Cost: O(context x n) id comparisons per match; a further match only when a
// continuation reached the end, so at most k matches per call.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int32_t max_n = kDefaultNgram);  // clamped to [1, kMaxNgram]
  Status propose(std::span<const int32_t> context, int32_t k, Draft& out) override;
  std::string name() const override;

 private:
  struct Span {
    int64_t from = 0, count = 0;
  };
  Span continuation(std::span<const int32_t> seq, int64_t want) const;
  int32_t max_n_;
  std::vector<int32_t> seq_;  // the context and the drafts so far
};

// A second model (same vocabulary) with its own sequence-layout cache; keeps that cache a
// prefix of the conversation (a rewind takes back its rejected drafts; if the cache cannot
// rewind there it starts over from 0). Draws drafts with its own sampler: greedy = argmax
// (q one-hot), else from its distribution under `sampling`'s transforms (q recorded).
// Borrows the model, which must outlive it.
class ModelDrafter final : public Drafter {
 public:
  // The cache: `options` with kind = sequence (the drafter runs one sequence).
  static Result<std::unique_ptr<ModelDrafter>> create(const Model& model, CacheOptions options,
                                                      const SamplerConfig& sampling,
                                                      std::string label);
  Status propose(std::span<const int32_t> context, int32_t k, Draft& out) override;
  Status prepare(std::span<const int32_t> context) override;
  std::string name() const override { return label_; }  // as created: "model:FILE", "self:q4_0"
  const CacheSetup& setup() const { return draft_.setup; }
  int64_t cached() const { return static_cast<int64_t>(fed_.size()); }  // positions held

 private:
  ModelDrafter(CachedEngine draft, const SamplerConfig& sampling, std::string label);
  // Brings the draft cache to hold `context` (rewinding what differs, feeding the rest) with
  // the logits after its last id in logits_.
  Status catch_up(std::span<const int32_t> context);
  // Whether the cache holds `context` ids and the k - 1 drafts fed after them.
  bool has_room(size_t context, int32_t k) const;
  CachedEngine draft_;
  Sampler sampler_;
  std::string label_;
  std::vector<int32_t> fed_;  // the ids of the draft cache's positions [0, pos)
  Logits logits_;
};

// InvalidArgument when the draft's vocabulary differs from the target's: naming the sizes, or
// the first differing id and both spellings.
Status check_same_vocabulary(const text::Tokenizer& target, const text::Tokenizer& draft);

// Run-time choices of speculative decoding.
struct SpecOptions {
  int32_t draft_max = kDefaultDraftMax;  // K: most drafts per step, >= 1; a step is K + 1
                                         // tokens, so K + 1 <= the cache's max_write
  bool adaptive = true;  // K follows the acceptance (AdaptiveK); false = always draft_max
  // With adaptive K, K follows the measured costs of the steps (AdaptiveK's second rule; the
  // executor keeps the acceptance rule for sampled requests); false = the acceptance rule.
  bool measured_cost = true;
};

// Seconds of a forward (or of a batching executor's step) by its rows, each width smoothed
// over its measurements (0.8 old + 0.2 new). A width not measured yet is priced from the
// widest narrower one measured — at its seconds (kFlat: a wider step is assumed free, so it
// gets tried) or at its seconds per row times the rows (kPerRow: assumed to cost as much per
// row) — or, with none, from a wider one's seconds per row; 0 when nothing is measured. One
// home for that rule (AdaptiveK: a single session's forwards, kFlat; the executor's shared
// steps, kPerRow, where a wrongly free-looking width slows every session's step).
class CostByRows {
 public:
  enum class Unmeasured { kFlat, kPerRow };
  void add(int32_t rows, double seconds);
  double at(int32_t rows, Unmeasured narrower = Unmeasured::kFlat) const;

 private:
  std::vector<double> seconds_;  // index rows; 0 = not measured
};

// The draft width of one session (docs/speculative.md, "Adaptive K"). Two rules, one home
// (Session::decode and the batching executor use it):
// - acceptance only (SpecOptions::measured_cost false): after a step that verified d >= 1
//   drafts and kept a, rate = 3/4 rate + 1/4 a/d (starting at 1); K grows by 1 (up to
//   draft_max) when every draft was kept, else halves (rounding down, so 1 falls to 0) when
//   none was kept or rate < 1/2;
// - measured cost (costs reported through observe_costs() or observe_step_costs() before
//   observe()): K maximizes the expected tokens per second of the step the session's rows
//   run in, (S + E(K)) / (K c + v(K)), with E(K) = 1 + p + ... + p^K for the per-draft
//   acceptance p (kept drafts over drafts examined, the first rejected one included), c the
//   drafter's seconds per draft, v(K) the step's seconds with K drafts of this session and
//   S the tokens the step's other sessions yield. A single session (Session::decode) has
//   S = 0 and v(K) = its forward of K + 1 rows; in the executor, S = the step's other decode
//   sessions and v(K) = the step's seconds at its rows without this session's drafts plus K
//   (CostByRows over the executor's steps): drafting that slows a shared step by more than it
//   yields is not chosen. Unmeasured widths are priced by CostByRows' rule, so they get
//   tried; a wider K must win by more than 1 %.
// K starts at draft_max (acceptance rule) or kFirstMeasured (measured-cost rule).
// At K = 0 the session decodes plainly; after kProbeAfter plain steps it tries K = 1 again
// (with measured costs, a probe that leads back to K = 0 and whose drafter took longer than a
// plain step doubles the wait, up to kMaxProbeWait, and any such probe waits at least its
// loss / kProbeLoss plain steps — the loss being one draft at the drafter's cost per draft
// plus the 2-row step, in plain steps, less the 1 + p tokens it yields — so probing costs
// about kProbeLoss of the time at most, however dear a 2-row step is; its drafter time, a
// draft model catching up on the plain steps, is not a draft cost — nor is the first drafting
// step's, a draft model prefilling the prompt); a drafter that could not pay even if every
// draft were kept is not probed again).
// Tensor-free.
class AdaptiveK {
 public:
  static constexpr int32_t kProbeAfter = 16;  // plain steps at K = 0 before a 1-draft probe
  static constexpr int32_t kMaxProbeWait = 256;
  static constexpr double kProbeLoss = 0.02;  // a failed probe's loss over the wait before it
  // The first width under the measured-cost rule (the acceptance rule starts at draft_max):
  // nothing is known yet, and a wide first step costs a draft model K draft forwards.
  static constexpr int32_t kFirstMeasured = 2;
  explicit AdaptiveK(const SpecOptions& options = {});
  int32_t k() const { return k_; }  // drafts to ask for next; 0 = a plain step
  double rate() const { return rate_; }
  // After a decode step that verified `drafted` drafts (0: a plain step, or the drafter
  // offered nothing) and kept `accepted` of them.
  void observe(int32_t drafted, int32_t accepted);
  // Before observe(), for the same step: the drafter took `draft_seconds` to propose
  // `drafted` drafts, and the forward of `rows` rows took `forward_seconds`.
  void observe_costs(int32_t drafted, double draft_seconds, int32_t rows,
                     double forward_seconds);
  // The executor's form, before observe(): the drafter took `draft_seconds` for `drafted`
  // drafts; the step's other sessions yield `others` tokens; `steps` prices a step by its
  // rows, and this step had `base_rows` rows besides this session's drafts.
  void observe_step_costs(int32_t drafted, double draft_seconds, double others,
                          const CostByRows& steps, int32_t base_rows);
  // The measured-cost rule's expected tokens per second at width k (0 without costs).
  double tokens_per_second(int32_t k) const;

 private:
  double step_cost(int32_t k) const;  // v(k): the step's seconds with k drafts
  void note_draft_seconds(int32_t drafted, double draft_seconds);
  int32_t best_k() const;
  bool hopeless() const;  // no K pays at acceptance 1 (measured costs)
  int32_t wait_for_probe_loss() const;  // plain steps that make the last probe's loss small

  SpecOptions options_;
  int32_t k_ = 0;
  double rate_ = 1.0;
  int32_t plain_ = 0;  // plain steps since K fell to 0
  int32_t probe_wait_ = kProbeAfter;
  bool probing_ = false;  // this step is a probe (measured costs only)
  bool drafted_before_ = false;  // a step with drafts was timed (the first one is a catch-up)
  double probe_draft_seconds_ = 0.0;  // the last probe's drafter time
  // Measured costs: a single session's forwards by rows; or the executor's step costs v(k)
  // (index k) and the other sessions' tokens S; seconds per draft; and the decayed counts of
  // kept drafts and drafts examined.
  CostByRows forward_;
  std::vector<double> step_;
  double others_ = 0.0;
  double draft_cost_ = 0.0;
  bool timed_ = false;
  double kept_ = 0.0, examined_ = 0.0;
};

// InvalidArgument naming draft_max when it is < 1 or K + 1 exceeds `step_tokens` (the
// cache's max_write: a ring can take back at most max_write - 1 positions).
Status check_spec_options(const SpecOptions& options, int64_t step_tokens);

// What drafting did over a turn. The seconds are kept by `kvcache run`'s decode loop (a
// single session); the executor's steps are shared, so it leaves them 0.
struct SpecStats {
  int64_t steps = 0;     // decode forwards while drafting (with or without drafts)
  int64_t drafted = 0;   // drafts verified
  int64_t accepted = 0;  // drafts kept
  int64_t verify_steps = 0;     // steps that verified at least one draft
  double draft_seconds = 0.0;   // the drafter's time (a draft model's catch-up included)
  double verify_seconds = 0.0;  // the forwards of the verify steps
  double plain_seconds = 0.0;   // the forwards of the other steps (one row each)
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
};

// A turn's drafting in the terms of the speculative-decoding literature, in units of one plain
// step (the turn's own steps without drafts): alpha = the share of drafts kept, k = drafts per
// verify step, c = the drafter's cost per draft, v = a verify step's cost, and the speed-up
// over plain decoding they allow if each draft is kept independently with probability alpha:
// E(k) / (k c + v), E(k) = 1 + alpha + ... + alpha^k (tokens per verify step).
struct SpecFigures {
  double alpha = 0.0, k = 0.0, c = 0.0, v = 0.0, ideal_speedup = 0.0;
};
// Nothing when the turn had no verify step or no plain step to measure against.
std::optional<SpecFigures> spec_figures(const SpecStats& st);

// The outcome of one verification.
struct Verdict {
  int32_t accepted = 0;  // drafts kept: a prefix of the draft
  int32_t next = -1;     // the target's own token after them (a correction or the bonus)
};

// Applies the acceptance rule to the target's rows: rows.row(i) is the target's logits after
// the held token (i = 0) and after draft i (i >= 1); at least draft.tokens.size() + 1 rows.
// Greedy (temperature 0): keep drafts while each equals the argmax of its row, next = the
// argmax after them; no random draw. Sampled: accept draft x with probability
// min(1, p(x) / q(x)) (p: the target's distribution under the sampler's transforms, q: the
// drafter's; one-hot when draft.q is empty); on rejection next is drawn from max(0, p - q)
// renormalized; after all are kept, next is drawn from the last row as sample() would.
// `first`: the rows start at rows.row(first) (a verification inside a larger batch).
Verdict accept_drafts(const Logits& rows, const Draft& draft, Sampler& sampler,
                      size_t first = 0);

}  // namespace kvcache::engine
