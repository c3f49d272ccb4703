// The batching executor: many generation sessions over one cell pool, driven one engine step
// at a time. Layer: serve (above engine). Each step packs one decode token for every running
// session, then prefill chunks of the others (rotating fairly) up to a token budget, runs one
// Engine::forward over the mixed batch and samples the rows that need it. Requests queue when
// no session is free; prompts that start with tokens the pool already holds clone that prefix
// (no bytes copied); under pool pressure retained prefixes are evicted least-recently-used
// first, then the youngest running session is preempted and requeued for recompute. Sessions
// may draft (ExecutorOptions::make_drafter): their drafts join the step after the decode
// tokens and are verified in the same forward (executor_draft.cpp). With a
// shared store (kv_store) prompt blocks are also fetched from and written to Redis by a store
// thread it owns (executor_store.cpp); otherwise one caller drives it and nothing else runs.
// It does not tokenize prompts or render chat templates.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cache.h"
#include "core/status.h"
#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/snapshot.h"
#include "engine/speculative.h"
#include "text/grammar.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"
#include "serve/kv_store.h"
#include "serve/prefix_index.h"

namespace kvcache::serve {

inline constexpr int64_t kDefaultSessionTokens = engine::kDefaultCapacity;  // default's cap
inline constexpr int32_t kDefaultBlockTokens = 16;      // prefix-index block (see docs)

// What a session's drafter must hold (a draft model's own cache): the session's positions
// plus the drafts of one step, and the step width its prefill may use.
struct DraftRoom {
  int64_t positions = 0;    // max_session_tokens + draft_max
  int64_t step_tokens = 0;  // the executor's step width
};

struct ExecutorOptions {
  int32_t max_sessions = 8;             // > 0; forks of an n > 1 request count one each
  int64_t max_session_tokens = 0;       // 0 = min(model max_context, kDefaultSessionTokens)
  std::optional<int64_t> pool_cells;    // default max_sessions * max_session_tokens; a smaller
                                        // pool (>= max_session_tokens) may preempt
  // A K/V memory budget in bytes (not with pool_cells): max_sessions becomes the most sessions
  // of max_session_tokens whose pool fits (engine::plan_session_pool; the given value is
  // ignored); max_sessions() reports it.
  std::optional<int64_t> kv_memory;
  DType kv_dtype = DType::kF32;  // K and V, unless one is overridden below
  std::optional<DType> k_dtype;  // key storage type; unset = kv_dtype
  std::optional<DType> v_dtype;  // value storage type; unset = kv_dtype
  std::optional<bool> kv_rotate;  // Hadamard rotation; unset = on for block types
  int64_t initial_capacity = 0;         // cells allocated up front
  int64_t step_tokens = 0;              // token budget of a step; 0 = the model's step
  bool prefix_cache = true;             // share prompt prefixes; retain finished sequences
  int32_t block_tokens = kDefaultBlockTokens;
  // Sliding-window models: prompt checkpoints, clones kept at the block boundaries of prompts,
  // so a later prompt that shares only a prefix finds the window that prefix's end needs (a
  // finished sequence keeps only its last W - 1 positions). At most this many are kept, least
  // recently used dropped first; each costs a sequence id and W - 1 cells per sliding pool
  // (the pools are sized for them). 0 = none. >= 0.
  int32_t prefix_checkpoints = 8;
  std::vector<int32_t> eog_ids;         // end-of-generation token ids
  // A prefix-block store shared with other replicas (executor_store.cpp): "" = none, else
  // redis://HOST:PORT[/DB]. Needs prefix_cache. An admitted request waits for the store's
  // answer at most store_wait_ms, then prefills what it has.
  std::string kv_store;
  int32_t store_wait_ms = 1000;         // >= 0
  // Speculative decoding (docs/speculative.md, "In the batching executor"): null = off. Else
  // each session that may draft (GenerateParams::draft) gets a drafter of its own from this factory at its first drafting step, and
  // a decode step of it verifies the held token + k drafts as k + 1 rows of the step's forward
  // (k from engine::AdaptiveK). A factory that fails leaves that session decoding plainly.
  std::function<Result<std::unique_ptr<engine::Drafter>>(const DraftRoom&)> make_drafter;
  // draft_max: 0 = min(engine::kDefaultDraftMax, step width - 1); else draft_max + 1 <= the
  // step width (InvalidArgument otherwise). With measured_cost (the default) each session's K
  // follows adaptive K's measured-cost rule over the executor's step costs (a step's time is
  // shared by every session; engine::AdaptiveK); false = the acceptance rule.
  engine::SpecOptions spec = [] {
    engine::SpecOptions o;
    o.draft_max = 0;
    return o;
  }();
};

inline constexpr int32_t kMaxTopLogprobs = 20;  // GenerateParams::logprobs' most alternatives

struct GenerateParams {
  int32_t max_new_tokens = 64;          // >= 0
  engine::SamplerConfig sampling;       // completion i samples with seed + i
  int32_t n = 1;                        // completions; n > 1 prefills once and forks
  std::vector<std::string> stop;        // stop strings (excluded from the text)
  bool ignore_eos = false;
  // Constrained decoding: null = free text. Each completion samples only tokens that keep its
  // text a prefix of a document of the grammar (text/token_mask.h) and stops once the document
  // is complete and nothing may follow; the completions of a request share one matcher and
  // its mask cache. A preempted session keeps its grammar state (its tokens are recomputed,
  // not resampled).
  std::shared_ptr<const text::Grammar> grammar;
  // A lazy grammar (tool calls with tool_choice auto): with a trigger, the grammar is off
  // until the completion's text holds `grammar_trigger` (as its first bytes when
  // grammar_trigger_at_start), then on for the rest of the completion, starting from the state
  // after the text from the trigger on. When that text is no prefix of a document the grammar
  // stays off (the answer is free text). grammar_trigger_tokens: tokens that write
  // grammar_trigger into the text when sampled (a control token the tokenizer prints as
  // nothing, such as Mistral's [TOOL_CALLS]).
  std::string grammar_trigger;  // "" = the grammar applies from the first token
  bool grammar_trigger_at_start = false;
  std::vector<int32_t> grammar_trigger_tokens;
  // OpenAI's logit adjustments, before the grammar mask and sampling: logit[id] += bias;
  // logit[t] -= count(t) * frequency_penalty + (count(t) > 0) * presence_penalty, count over
  // the completion's generated tokens.
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100])
  float presence_penalty = 0.0f;                      // [-2, 2]
  float frequency_penalty = 0.0f;                     // [-2, 2]
  // Log-probabilities (engine::token_logprob): -1 = none; else each sampled token's, after
  // the logit adjustments and the grammar mask, with this many alternatives (0..kMaxTopLogprobs).
  int32_t logprobs = -1;
  // Speculative decoding for this request when the executor drafts (ExecutorOptions::
  // make_drafter); false = plain decoding. Ignored by an executor that does not draft.
  bool draft = true;
};

// Serialized by name ("stop", "length", "cache_full", "cancelled"); append only.
enum class Finish { kNone, kStop, kLength, kCacheFull, kCancelled };
std::string_view to_string(Finish finish);

struct Completion {
  std::vector<int32_t> tokens;          // generated ids, in order
  std::string text;                     // decoded, cut before a stop string
  Finish finish = Finish::kNone;
  std::string stop_string;              // the stop string that ended it (else empty)
  std::vector<engine::TokenLogprob> logprobs;  // one per token with GenerateParams::logprobs
  // Drafting (all 0 when it did not draft): steps = its decode steps while drafting was on,
  // drafted / accepted = drafts verified / kept.
  engine::SpecStats draft;
};

struct RequestResult {
  int64_t id = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;     // prompt tokens taken from the pool, not prefilled
  std::vector<Completion> completions;  // n of them, in fork order
};

// A sampled token, as it happens (for streaming).
struct TokenEvent {
  int64_t request = -1;
  int32_t completion = 0;
  int32_t token = 0;
  std::string_view piece;               // text released by this token (held back while it
                                        // may still become a stop string); valid in the call
  Finish finish = Finish::kNone;        // set on the completion's last token
  const engine::TokenLogprob* logprob = nullptr;  // with GenerateParams::logprobs; valid in
                                                  // the call
};

struct ExecutorStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;           // tokens fed as prompt (recompute included)
  int64_t decode_tokens = 0;            // decode tokens the cache kept (one per plain decode
                                        // step; 1 + accepted drafts per verification)
  int64_t prefix_hit_tokens = 0;        // prompt tokens cloned from the pool
  int64_t prefix_miss_tokens = 0;       // prompt tokens that had to be prefilled
  int64_t evictions = 0;                // retained sequences dropped for room
  int64_t checkpoints_taken = 0;        // prompt checkpoints cloned (sliding-window models)
  int64_t preemptions = 0;              // running sessions dropped and requeued
  double prefill_seconds = 0.0;         // step time shared out by token counts
  double decode_seconds = 0.0;
  int32_t running = 0;                  // admitted sessions
  int32_t peak_running = 0;             // most sessions running in one step so far
  int32_t waiting = 0;                  // queued sessions
  int32_t retained = 0;                 // finished sequences kept for their prefix
  int32_t checkpoints = 0;              // of which prompt checkpoints
  int32_t grammar_matchers = 0;         // matchers kept for grammars (one per compiled grammar:
                                        // requests with the same one share its mask cache)
  // Speculative decoding (all 0 without a drafter):
  int64_t draft_steps = 0;              // session decode steps while drafting was on
  int64_t draft_tokens = 0;             // drafts verified
  int64_t draft_accepted = 0;           // drafts kept
  // Shared store (all 0 without one):
  int64_t store_hit_tokens = 0;         // prompt tokens written from store blocks (a part of
                                        // prefix_hit_tokens)
  int64_t store_timeouts = 0;           // admissions that stopped waiting for the store
  StoreStats store;                     // the store thread's counters
};

// Thread-safety: not thread-safe; one thread owns an executor (the model must outlive it).
class Executor {
 public:
  // InvalidArgument naming the option: max_sessions < 1, max_session_tokens above the model's
  // max_context, a pool size that overflows or is smaller than max_session_tokens, a geometry
  // or config the core validation refuses; ResourceExhausted naming kv_memory when the budget
  // holds no session (engine::plan_session_pool). `tokenizer` (optional, borrowed) gives text and
  // stop strings.
  static Result<std::unique_ptr<Executor>> create(const engine::Model& model,
                                                  const text::Tokenizer* tokenizer,
                                                  const ExecutorOptions& options);

  // Queues a request. InvalidArgument (nothing queued) for an empty prompt, a token outside
  // the vocabulary, n < 1 or n > max_sessions, max_new_tokens < 0, bad sampling values, or
  // prompt + max_new_tokens above max_session_tokens or the pool.
  Result<int64_t> submit(std::vector<int32_t> prompt, const GenerateParams& params);
  // Ends a request now: its sessions finish with kCancelled. NotFound for an unknown or
  // already finished request.
  Status cancel(int64_t request);

  // A session of its own (n must be 1), admitted now: ResourceExhausted when max_sessions are
  // open or the pool cannot take its prompt. Returns the request id that reports it.
  Result<int64_t> open(std::vector<int32_t> prompt, const GenerateParams& params);
  // A new request continuing the first `upto` tokens (prompt + generated) of `request`'s
  // completion 0, then `more` tokens, with its own sampling, sharing those cells. NotFound /
  // InvalidArgument / ResourceExhausted as for open(); upto in [1, tokens held]. When a sliding
  // pool no longer holds the window the clone needs, its tokens are prefilled instead.
  Result<int64_t> clone(int64_t request, int64_t upto, const GenerateParams& params,
                        std::span<const int32_t> more = {});
  // Finishes the request like cancel() and releases its claims now.
  Status close(int64_t request);

  // One engine step. Ok with nothing done when idle. A forward that fails is returned and
  // every request it touched finishes as cancelled (the pool stays consistent).
  Status step();
  bool idle() const;
  // Steps until idle.
  Status run();

  // Results of requests finished since the last call, in finishing order.
  std::vector<RequestResult> take_finished();
  void set_on_token(std::function<void(const TokenEvent&)> fn) { on_token_ = std::move(fn); }

  // Drops every retained sequence (the pool's free cells return to what running sessions
  // leave).
  void clear_prefix_cache();

  // Saved prefixes (executor_snapshot.cpp; docs/server.md). export_prefix(): the K/V of the
  // longest prefix of `tokens` a sequence of the pool holds (a running session's fed tokens
  // or a retained sequence, compared token by token) as a snapshot. With sliding-window
  // layers only a sequence holding exactly that prefix qualifies (its pools hold the window
  // before that prefix's end, not before a shorter one's). NotFound when none holds any.
  Result<engine::Snapshot> export_prefix(std::span<const int32_t> tokens);
  // import_prefix(): writes a snapshot into a new sequence retained under its first
  // `positions` tokens (evicting older retained ones for room), so a request whose prompt
  // starts with them (and goes on) is a prefix hit. Returns the tokens now held.
  // FailedPrecondition: the prefix cache is off. InvalidArgument: another model, geometry or
  // dtype (engine::check_snapshot) or longer than max_session_tokens. ResourceExhausted: no
  // sequence id or cells even with nothing retained. A refusal leaves the running sessions
  // and the pool's contents as they were (retained prefixes evicted while looking for room
  // stay evicted).
  Result<int64_t> import_prefix(const engine::Snapshot& snapshot);
  // Waits up to `timeout` until the shared store has written every block queued so far (a
  // batch run calls it before exiting). True when done or when there is no store.
  bool flush_store(std::chrono::milliseconds timeout);

  ExecutorStats stats() const;
  // The store thread's counters as of now (zeros without a store). Unlike stats(), safe to call
  // from another thread while the executor runs: the store keeps counting after the last step
  // (writes finish in the background), so a reader must not wait for a step to see them.
  StoreStats store_stats() const;
  const engine::CacheSetup& setup() const { return setup_; }
  const CacheControl& cache() const { return *cache_; }
  int64_t max_session_tokens() const { return max_session_tokens_; }
  int32_t max_sessions() const { return opt_.max_sessions; }  // as given, or as a budget bought
  const engine::SpecOptions& spec() const { return opt_.spec; }  // draft_max resolved
  int64_t step_budget() const { return budget_; }

  ~Executor();

 private:
  struct Session;
  struct Request;
  using CloneFrom = std::optional<std::pair<int32_t, int64_t>>;  // (src seq, upto)
  Executor(const engine::Model& model, const text::Tokenizer* tokenizer,
           const ExecutorOptions& options);

  // Requests and sessions (executor.cpp).
  Status check_request(std::span<const int32_t> prompt, const GenerateParams& p) const;
  int64_t new_request(std::vector<int32_t> prompt, const GenerateParams& p);
  Session& new_session(Request& r, int32_t completion, std::vector<int32_t> tokens);
  void drop_request(int64_t id);
  std::span<const int32_t> held_tokens(int32_t seq) const;
  int32_t sessions_reserved() const;
  // Admission: a session slot, a sequence (new, or a clone of a held prefix) and room for the
  // rest of its tokens, or nothing changes and false.
  bool admit(Session& s);
  bool admit_from(Session& s, int32_t src, int64_t upto, bool fallback = true);
  bool wants_snapshot(const Session& s) const;
  void snapshot_prompt(Session& s);
  bool admit_from_prefix(Session& s);
  void touch_checkpoints(std::span<const int32_t> prefix);
  void take_checkpoints(const Session& s, int64_t from);
  void take_checkpoint(const Session& s, int64_t at);
  void count_prefix(Session& s, int64_t cached);
  bool new_seq(CloneFrom from, int32_t& seq);
  bool prefix_in_flight(const Session& s) const;
  void admit_waiting();
  bool evict_one_retained(CloneFrom keep);
  bool make_room(int64_t cells);
  void release_seq(int32_t seq);
  void retire(Session& s, bool keep);
  void preempt(Session& s);
  void finish(Session& s, Finish why);
  void finish_request_if_done(Request& r);

  // The step (executor_step.cpp).
  struct Planned {
    int64_t session;
    int64_t n;  // tokens fed this step
  };
  std::vector<Planned> plan_step();
  int64_t propose_drafts(Session& s, int64_t budget);
  bool fit_step(std::vector<Planned>& plan);
  // Speculative decoding (executor_draft.cpp): applies each verifying session's verdict to
  // its tokens, takes the rejected rows back from the cache (one rewind_many) and returns the
  // sessions that finished inside their drafts, with why (finished after the step's other
  // work, so that no verb ends the step before its checkpoints are cloned).
  bool verifies(const Planned& p) const;
  Result<std::vector<std::pair<int64_t, Finish>>> verify_drafts(const std::vector<Planned>& plan);
  // Turns s's n verification rows (from logits_ row `first`) into what draw_one would draw
  // from after the drafts before each: bias and penalties counting those drafts, the grammar's
  // mask after them (disallowed at -infinity). Drafts from the first one the grammar refuses
  // on are dropped (the rows after it are never compared). s's state is as it was. `masks`
  // gets the grammar's mask per row (empty without a grammar).
  void shape_verification_rows(Session& s, size_t first, int64_t n,
                               std::vector<text::TokenMasker::Mask>& masks);
  void note_plain_decode(Session& s);
  // Appends a token to s's completion: grammar, penalties' counts, text and stop strings,
  // streaming. Returns why the completion ends with it (kNone: it goes on); finishing is the
  // caller's.
  Finish push_token(Session& s, int32_t tok);
  // `drawn` >= 0: the token s's sampler already drew from `logits` (draw_tokens).
  void sample(Session& s, std::span<const float> logits, int32_t drawn = -1);
  void switch_grammar_on(Session& s, int32_t tok);
  std::vector<int32_t> draw_tokens(std::span<const int64_t> row_session);
  // s's next token from `logits`, under its grammar's mask if it has one; -1 when the mask
  // allows nothing.
  int32_t draw_one(Session& s, std::span<const float> logits);
  void fork_children(Session& parent, std::span<const float> logits);

  // The shared store (executor_store.cpp).
  void store_begin(Session& s, bool first_admission);
  void store_poll();
  void store_idle_wait();
  void store_import(Session& s, LookupAnswer& answer);
  void store_forget(Session& s);
  int64_t store_chunk_end(const Session& s) const;
  void store_capture(Session& s);

  const engine::Model& model_;
  const text::Tokenizer* tokenizer_;
  std::optional<text::TokenTrie> trie_;  // the vocabulary's token bytes, built at the first
                                           // request with a grammar
  // The masker of each compiled grammar in use, so that requests with the same grammar share
  // states and cached masks; the last kKeptMaskers stay alive between requests.
  std::unordered_map<const text::Grammar*, std::weak_ptr<text::TokenMasker>> maskers_;
  std::deque<std::shared_ptr<text::TokenMasker>> kept_maskers_;
  std::shared_ptr<text::TokenMasker> masker_for(const std::shared_ptr<const text::Grammar>& g);
  ExecutorOptions opt_;
  engine::CacheSetup setup_;
  std::shared_ptr<Cache> cache_;
  std::unique_ptr<engine::Engine> engine_;
  PrefixIndex index_;
  int64_t max_session_tokens_ = 0;
  int64_t budget_ = 0;
  bool sliding_ = false;  // some cache layer has a sliding window
  int32_t min_window_ = 0;  // narrowest sliding window; 0 = none
  std::unique_ptr<StoreWorker> store_;  // null without a store

  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;   // unfinished
  std::unordered_map<int64_t, std::unique_ptr<Session>> sessions_;   // of unfinished requests
  std::vector<int64_t> running_;   // admitted session ids, oldest admission first
  std::deque<int64_t> waiting_;    // queued session ids, next first
  struct Retained {
    int32_t seq = -1;
    int64_t request = -1;
    int32_t completion = 0;
    std::vector<int32_t> tokens;   // what its positions [0, size) hold
    int64_t last_use = 0;
    std::optional<uint64_t> checkpoint;  // a prompt checkpoint: the block key of its tokens
  };
  std::unordered_map<int32_t, Retained> retained_;    // by cache seq id
  std::unordered_map<int32_t, int64_t> seq_session_;  // running seq -> session id
  std::vector<RequestResult> finished_;
  std::function<void(const TokenEvent&)> on_token_;
  int64_t next_request_ = 0, next_session_ = 0, tick_ = 0;
  size_t rotate_ = 0;
  ExecutorStats stats_;
  engine::Logits logits_;
  // Seconds of a step's forward by its rows: adaptive K's measured costs (executor_draft.cpp).
  engine::CostByRows step_costs_;
  std::vector<int32_t> batch_tokens_, batch_seqs_, batch_rows_;
  std::vector<int64_t> batch_pos_;
};

}  // namespace kvcache::serve
