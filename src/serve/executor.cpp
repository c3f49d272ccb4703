// Sessions, admission, prefix sharing and retention of the batching executor. The step itself
// (packing, room, forward, sampling) lives in executor_step.cpp. See executor.h.
#include "serve/executor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cell_layout.h"
#include "core/str_cat.h"
#include "serve/executor_state.h"

namespace kvcache::serve {

std::string_view to_string(Finish finish) {
  switch (finish) {
    case Finish::kNone: return "none";
    case Finish::kStop: return "stop";
    case Finish::kLength: return "length";
    case Finish::kCacheFull: return "cache_full";
    case Finish::kCancelled: return "cancelled";
  }
  return "none";
}

Executor::Executor(const engine::Model& model, const text::Tokenizer* tokenizer,
                   const ExecutorOptions& options)
    : model_(model), tokenizer_(tokenizer), opt_(options), index_(options.block_tokens) {}

Executor::~Executor() = default;

Result<std::unique_ptr<Executor>> Executor::create(const engine::Model& model,
                                                   const text::Tokenizer* tokenizer,
                                                   const ExecutorOptions& o) {
  if (o.block_tokens < 1)
    return invalid_argument(str_cat("executor: block_tokens = ", o.block_tokens, ", expected > 0"));
  if (o.step_tokens < 0)
    return invalid_argument(str_cat("executor: step_tokens = ", o.step_tokens, ", expected >= 0"));
  if (o.prefix_checkpoints < 0)
    return invalid_argument(str_cat("executor: prefix_checkpoints = ", o.prefix_checkpoints,
                                    ", expected >= 0"));
  if (o.store_wait_ms < 0)
    return invalid_argument(str_cat("executor: store_wait_ms = ", o.store_wait_ms,
                                    ", expected >= 0"));
  std::optional<StoreAddress> store_at;
  if (!o.kv_store.empty()) {
    if (!o.prefix_cache)
      return invalid_argument("executor: a kv store needs the prefix cache (it is off)");
    Result<StoreAddress> a = parse_store_url(o.kv_store);
    if (!a.ok()) return a.status();
    store_at = *a;
  }
  engine::CacheOptions co;
  co.initial_capacity = o.initial_capacity;
  co.kv_dtype = o.kv_dtype;
  co.k_dtype = o.k_dtype;
  co.v_dtype = o.v_dtype;
  co.kv_rotate = o.kv_rotate;
  if (o.step_tokens > 0) co.max_step_tokens = o.step_tokens;
  // The pool's one sizing rule (engine::plan_session_pool): the sessions plus as many retained
  // prefixes, plus the prompt checkpoints, size the sliding-window pools (each sequence keeps
  // its last W - 1 positions there); a K/V budget chooses how many sessions.
  engine::SessionPool sp;
  sp.max_sessions = o.max_sessions;
  sp.max_session_tokens = o.max_session_tokens;
  sp.pool_cells = o.pool_cells;
  sp.retained_seqs = o.prefix_cache ? o.prefix_checkpoints : 0;
  sp.kv_memory = o.kv_memory;
  Result<engine::SessionPlan> plan = engine::plan_session_pool(model, co, sp);
  if (!plan.ok()) return plan.status();
  Result<engine::CacheSetup> setup = std::move(plan->setup);
  Result<std::shared_ptr<Cache>> cache = engine::build_cache(*setup);
  if (!cache.ok()) return cache.status();
  Result<std::unique_ptr<engine::Engine>> eng = engine::Engine::create(model, *cache);
  if (!eng.ok()) return eng.status();
  ExecutorOptions resolved = o;
  resolved.max_sessions = plan->max_sessions;  // what a budget bought, else as given
  std::unique_ptr<Executor> ex(new Executor(model, tokenizer, resolved));
  ex->setup_ = std::move(*setup);
  ex->cache_ = std::move(*cache);
  ex->engine_ = std::move(*eng);
  ex->max_session_tokens_ = plan->max_session_tokens;
  // Local and store keys are one chain: seeded with the model, geometry, dtype and block size.
  ex->index_ = PrefixIndex(o.block_tokens, block_namespace(model.fingerprint(), ex->setup_.geometry,
                                                           ex->setup_.config.key_type(),
                                                           ex->setup_.config.value_type(),
                                                           o.block_tokens,
                                                           ex->setup_.config.rotated()));
  ex->budget_ = std::max<int64_t>(ex->setup_.step_tokens, resolved.max_sessions);
  if (o.make_drafter) {
    engine::SpecOptions& spec = ex->opt_.spec;
    if (spec.draft_max == 0)
      spec.draft_max = static_cast<int32_t>(
          std::clamp<int64_t>(ex->setup_.step_tokens - 1, 1, engine::kDefaultDraftMax));
    KVCACHE_RETURN_IF_ERROR_CTX(engine::check_spec_options(spec, ex->setup_.step_tokens),
                                "executor");
  }
  for (const LayerGeometry& l : ex->setup_.geometry.layers) {
    if (!l.sliding()) continue;
    ex->sliding_ = true;
    ex->min_window_ = ex->min_window_ == 0 ? l.window : std::min(ex->min_window_, l.window);
  }
  if (store_at) {
    BlockFormat f;
    f.ns = ex->index_.seed();
    f.fingerprint = model.fingerprint();
    f.geometry = ex->setup_.geometry;
    f.k_dtype = ex->setup_.config.key_type();
    f.v_dtype = ex->setup_.config.value_type();
    f.rotated = ex->setup_.config.rotated();
    f.block_tokens = o.block_tokens;
    ex->store_ = std::make_unique<StoreWorker>(make_redis_store(*store_at), std::move(f));
  }
  return ex;
}

Status Executor::check_request(std::span<const int32_t> prompt, const GenerateParams& p) const {
  if (prompt.empty()) return invalid_argument("request: the prompt is empty");
  const int32_t vocab = model_.hparams().vocab;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      return invalid_argument(str_cat("request: prompt token ", static_cast<int64_t>(i), " = ",
                                      prompt[i], ", expected in [0, ", vocab, ")"));
  if (p.n < 1 || p.n > opt_.max_sessions)
    return invalid_argument(str_cat("request: n = ", p.n, ", expected 1..",
                                    opt_.max_sessions, " (max_sessions)"));
  if (p.max_new_tokens < 0)
    return invalid_argument(str_cat("request: max_new_tokens = ", p.max_new_tokens,
                                    ", expected >= 0"));
  const engine::SamplerConfig& s = p.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0.0f)
    return invalid_argument(str_cat("request: temperature = ", s.temperature,
                                    ", expected a finite value >= 0"));
  if (!std::isfinite(s.top_p) || s.top_p <= 0.0f || s.top_p > 1.0f)
    return invalid_argument(str_cat("request: top_p = ", s.top_p,
                                    ", expected in (0, 1]"));
  if (s.top_k < 0)
    return invalid_argument(str_cat("request: top_k = ", s.top_k, ", expected >= 0"));
  for (const std::string& stop : p.stop)
    if (stop.empty()) return invalid_argument("request: an empty stop string");
  for (const auto& [key, v] : {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
                                {"frequency_penalty", p.frequency_penalty}})
    if (!std::isfinite(v) || v < -2.0f || v > 2.0f)
      return invalid_argument(str_cat("request: ", key, " = ", v, ", expected in [-2, 2]"));
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= vocab || !std::isfinite(bias) || bias < -100.0f || bias > 100.0f)
      return invalid_argument(str_cat("request: logit_bias ", id, " = ", bias,
                                      ", expected a token id in [0, ", vocab,
                                      ") and a bias in [-100, 100]"));
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    return invalid_argument(str_cat("request: logprobs = ", p.logprobs, ", expected -1 (none) or 0..",
                                    kMaxTopLogprobs, " alternatives"));
  if (p.grammar && tokenizer_ == nullptr)
    return invalid_argument("request: a grammar needs the executor's tokenizer (token bytes)");
  if (p.grammar) KVCACHE_RETURN_IF_ERROR_CTX(p.grammar->check(), "request: grammar");
  if (!p.grammar_trigger.empty() && !p.grammar)
    return invalid_argument("request: grammar_trigger without a grammar");
  for (int32_t id : p.grammar_trigger_tokens)
    if (id < 0 || id >= vocab)
      return invalid_argument(str_cat("request: grammar_trigger_tokens holds ", id,
                                      ", expected a token id in [0, ", vocab, ")"));
  const int64_t need = static_cast<int64_t>(prompt.size()) + p.max_new_tokens;
  if (need > max_session_tokens_)
    return invalid_argument(str_cat("request: prompt (", static_cast<int64_t>(prompt.size()),
                                    " tokens) + max_new_tokens (", p.max_new_tokens, ") = ",
                                    need, " exceeds max_session_tokens ",
                                    max_session_tokens_));
  return ok_status();
}

int64_t Executor::new_request(std::vector<int32_t> prompt, const GenerateParams& p) {
  auto r = std::make_unique<Request>();
  r->id = next_request_++;
  r->params = p;
  r->result.id = r->id;
  r->result.prompt_tokens = static_cast<int64_t>(prompt.size());
  r->result.completions.resize(static_cast<size_t>(p.n));
  if (p.grammar) r->masker = masker_for(p.grammar);
  Request& req = *r;
  requests_.emplace(req.id, std::move(r));
  Session& s = new_session(req, 0, std::move(prompt));
  s.forks_pending = p.n - 1;
  return req.id;
}

std::shared_ptr<text::TokenMasker> Executor::masker_for(
    const std::shared_ptr<const text::Grammar>& g) {
  constexpr size_t kKeptMaskers = 4;  // each holds up to 16 MiB of masks
  if (!trie_) {
    const int32_t vocab = model_.hparams().vocab;
    std::vector<std::string> pieces(static_cast<size_t>(vocab));
    for (int32_t id = 0; id < vocab && id < tokenizer_->n_tokens(); ++id)
      pieces[id] = tokenizer_->decode_one(id);
    trie_ = text::TokenTrie::from_pieces(std::move(pieces), opt_.eog_ids);
  }
  std::erase_if(maskers_, [](const auto& kv) { return kv.second.expired(); });
  // A matcher grows with the states its requests visit (deep nesting makes new ones): past
  // this many, new requests start a fresh one and the old goes with its last request.
  constexpr int64_t kMaxSharedStates = 200'000;
  std::shared_ptr<text::TokenMasker> m = maskers_[g.get()].lock();
  if (m && m->matcher().n_states() > kMaxSharedStates) {
    std::erase(kept_maskers_, m);
    m.reset();
  }
  if (!m) {
    m = std::make_shared<text::TokenMasker>(std::make_shared<text::GrammarMatcher>(g), *trie_);
    maskers_[g.get()] = m;
  }
  std::erase(kept_maskers_, m);
  kept_maskers_.push_front(m);
  if (kept_maskers_.size() > kKeptMaskers) kept_maskers_.pop_back();
  return m;
}

Executor::Session& Executor::new_session(Request& r, int32_t completion,
                                         std::vector<int32_t> tokens) {
  engine::SamplerConfig sc = r.params.sampling;
  sc.seed += static_cast<uint64_t>(completion);
  auto s = std::make_unique<Session>(sc);
  s->id = next_session_++;
  s->request = r.id;
  s->completion = completion;
  s->prompt_len = static_cast<int64_t>(tokens.size());
  s->tokens = std::move(tokens);
  if (r.masker && r.params.grammar_trigger.empty()) s->grammar.emplace(r.masker);
  // Drafts are checked against the rows draw_one would draw from (shape_verification_rows).
  s->may_draft = opt_.make_drafter && r.params.draft;
  // Measured costs pick K from timings; a sampled draw consumes randomness per draft, so a
  // seeded request keeps the acceptance rule and repeats its completion.
  engine::SpecOptions spec = opt_.spec;
  if (sc.temperature > 0.0f) spec.measured_cost = false;
  s->draft_k = engine::AdaptiveK(spec);
  Session& ref = *s;
  r.sessions.push_back(ref.id);
  sessions_.emplace(ref.id, std::move(s));
  return ref;
}

Result<int64_t> Executor::submit(std::vector<int32_t> prompt, const GenerateParams& params) {
  KVCACHE_RETURN_IF_ERROR(check_request(prompt, params));
  const int64_t id = new_request(std::move(prompt), params);
  waiting_.push_back(requests_.at(id)->sessions.front());
  return id;
}

void Executor::drop_request(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (int64_t sid : it->second->sessions) sessions_.erase(sid);
  requests_.erase(it);
}

Result<int64_t> Executor::open(std::vector<int32_t> prompt, const GenerateParams& params) {
  if (params.n != 1)
    return invalid_argument(str_cat("open: n = ", params.n, ", expected 1 (use submit)"));
  KVCACHE_RETURN_IF_ERROR(check_request(prompt, params));
  const int64_t id = new_request(std::move(prompt), params);
  Session& s = *sessions_.at(requests_.at(id)->sessions.front());
  if (!admit(s)) {
    drop_request(id);
    return resource_exhausted(str_cat("open: ", static_cast<int64_t>(running_.size()), " of ",
                                      opt_.max_sessions,
                                      " sessions are open or the pool has no room for the prompt"));
  }
  return id;
}

// Tokens the cache holds for `seq` (a running session's fed tokens or a retained sequence).
std::span<const int32_t> Executor::held_tokens(int32_t seq) const {
  auto r = retained_.find(seq);
  if (r != retained_.end()) return r->second.tokens;
  auto s = seq_session_.find(seq);
  if (s == seq_session_.end()) return {};
  const Session& ses = *sessions_.at(s->second);
  return std::span<const int32_t>(ses.tokens).first(static_cast<size_t>(ses.fed));
}

Result<int64_t> Executor::clone(int64_t request, int64_t upto, const GenerateParams& params,
                                std::span<const int32_t> more) {
  if (params.n != 1)
    return invalid_argument(str_cat("clone: n = ", params.n, ", expected 1"));
  int32_t src = -1;
  for (const auto& [seq, sid] : seq_session_)
    if (sessions_.at(sid)->request == request && sessions_.at(sid)->completion == 0) src = seq;
  for (const auto& [seq, r] : retained_)
    if (r.request == request && r.completion == 0) src = seq;
  if (src < 0) return not_found(str_cat("clone: request ", request, " holds no cells"));
  const std::span<const int32_t> held = held_tokens(src);
  if (upto < 1 || upto > static_cast<int64_t>(held.size()))
    return invalid_argument(str_cat("clone: upto = ", upto, ", expected 1..",
                                    static_cast<int64_t>(held.size())));
  std::vector<int32_t> prompt(held.begin(), held.begin() + upto);
  prompt.insert(prompt.end(), more.begin(), more.end());
  KVCACHE_RETURN_IF_ERROR(check_request(prompt, params));
  const int64_t id = new_request(std::move(prompt), params);
  Session& s = *sessions_.at(requests_.at(id)->sessions.front());
  // With nothing appended the last cloned token is fed again: its logits start the
  // generation.
  if (!admit_from(s, src, more.empty() ? upto - 1 : upto)) {
    drop_request(id);
    return resource_exhausted(str_cat("clone: no free session or cell for request ", request));
  }
  count_prefix(s, s.fed);
  return id;
}

int32_t Executor::sessions_reserved() const {
  int32_t n = 0;
  for (int64_t sid : running_) n += 1 + sessions_.at(sid)->forks_pending;
  return n;
}

bool Executor::new_seq(CloneFrom from, int32_t& seq) {
  for (;;) {
    Result<int32_t> r = from ? cache_->seq_clone(from->first, from->second) : cache_->seq_new();
    if (r.ok()) {
      seq = *r;
      return true;
    }
    if (r.status().code() != StatusCode::kResourceExhausted || !evict_one_retained(from))
      return false;
  }
}

bool Executor::admit_from(Session& s, int32_t src, int64_t upto, bool fallback) {
  if (sessions_reserved() + 1 + s.forks_pending > opt_.max_sessions) return false;
  int32_t seq = -1;
  CloneFrom from;
  if (src >= 0 && upto > 0) from = std::make_pair(src, upto);
  if (!new_seq(from, seq)) {
    // A clone the layout refuses (e.g. a sliding pool no longer holds the window the prefix
    // needs) falls back to a fresh sequence: the prompt is prefilled in full.
    if (!from || !fallback || !new_seq(std::nullopt, seq)) return false;
    from.reset();
  }
  // Room for the first chunk: later chunks find theirs step by step (sliding pools recycle
  // as the sequence advances; the full pool holds every admitted session by construction).
  const int64_t need = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - (from ? upto : 0),
                                         setup_.step_tokens);
  if (!make_room(need)) {
    (void)cache_->seq_rm(seq);
    return false;
  }
  s.seq = seq;
  s.fed = from ? upto : 0;
  s.admitted_at = ++tick_;
  if (from) {
    auto r = retained_.find(src);
    if (r != retained_.end()) r->second.last_use = tick_;
  }
  seq_session_[seq] = s.id;
  running_.push_back(s.id);
  if (opt_.prefix_cache) index_.add(seq, std::span<const int32_t>(s.tokens).first(s.fed));
  return true;
}

bool Executor::admit(Session& s) {
  if (sessions_reserved() + 1 + s.forks_pending > opt_.max_sessions) return false;
  if (!(opt_.prefix_cache && s.fed == 0 && admit_from_prefix(s)) && !admit_from(s, -1, 0))
    return false;
  const bool first = !s.counted;
  count_prefix(s, s.fed);
  store_begin(s, first);
  return true;
}

// Every holder of the longest run of leading blocks, verified against its own tokens (a hash
// collision is a miss) and the match extended token by token past the last full block; the
// longest first (newest on ties). A holder whose sliding pools no longer hold the window the
// clone needs is passed over, and then — on sliding-window models — the holders of shorter
// runs are tried: a prompt checkpoint at an earlier block boundary still clones exactly.
bool Executor::admit_from_prefix(Session& s) {
  // Leave at least one token to feed: its logits start the generation.
  std::span<const int32_t> want = std::span<const int32_t>(s.tokens).first(s.tokens.size() - 1);
  std::vector<int32_t> tried;
  for (;;) {
    const PrefixIndex::Match m = index_.longest(want);
    if (m.tokens == 0) return false;
    std::vector<std::pair<int64_t, int32_t>> found;  // (matched tokens, holder)
    for (int32_t src : m.seqs) {
      if (std::find(tried.begin(), tried.end(), src) != tried.end()) continue;
      const std::span<const int32_t> held = held_tokens(src);
      int64_t n = 0;
      const int64_t lim = std::min<int64_t>(static_cast<int64_t>(held.size()),
                                            static_cast<int64_t>(want.size()));
      while (n < lim && held[n] == want[n]) ++n;
      if (n >= m.tokens) found.emplace_back(n, src);
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [n, src] : found) {
      tried.push_back(src);
      if (admit_from(s, src, n, /*fallback=*/false)) {
        touch_checkpoints(std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.fed)));
        return true;
      }
    }
    if (!sliding_) return false;
    want = want.first(static_cast<size_t>(m.tokens - 1));
  }
}

// A clone of `prefix` used every prompt checkpoint that holds a leading part of it: they
// become the most recently used (a shared system prompt's checkpoint stays while prompts that
// share more keep cloning longer ones).
void Executor::touch_checkpoints(std::span<const int32_t> prefix) {
  const size_t b = static_cast<size_t>(index_.block_tokens());
  const std::vector<uint64_t> keys = index_.keys(prefix);
  std::vector<std::pair<size_t, Retained*>> used;  // (length, checkpoint)
  for (auto& [seq, r] : retained_) {
    const size_t n = r.tokens.size();
    if (r.checkpoint && n > 0 && n % b == 0 && n <= prefix.size() && keys[n / b - 1] == *r.checkpoint)
      used.emplace_back(n, &r);
  }
  // Shorter first, so that of two equally recent checkpoints the longer is dropped last.
  std::sort(used.begin(), used.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [n, r] : used) r->last_use = ++tick_;
}

// Prefix hits and misses count at a request's first admission only (not at recompute).
void Executor::count_prefix(Session& s, int64_t cached) {
  if (s.counted) return;
  s.counted = true;
  if (s.completion == 0) requests_.at(s.request)->result.cached_prompt_tokens = cached;
  stats_.prefix_hit_tokens += cached;
  stats_.prefix_miss_tokens += s.prompt_len - cached;
}

// True when a running session is still prefilling full blocks that `s`'s prompt starts with:
// admitting `s` after they are fed clones them instead of computing them twice.
bool Executor::prefix_in_flight(const Session& s) const {
  const int64_t b = index_.block_tokens();
  const int64_t want = static_cast<int64_t>(s.tokens.size()) - 1;
  for (int64_t sid : running_) {
    const Session& o = *sessions_.at(sid);
    const int64_t lim = std::min<int64_t>(want, static_cast<int64_t>(o.tokens.size()));
    int64_t n = 0;
    while (n < lim && o.tokens[n] == s.tokens[n]) ++n;
    if (n / b > o.fed / b) return true;
  }
  return false;
}

void Executor::admit_waiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Session& s = *sessions_.at(*it);
    if (opt_.prefix_cache && s.fed == 0 && prefix_in_flight(s)) {
      ++it;  // it waits for the shared blocks; later requests may go first
      continue;
    }
    if (!admit(s)) return;  // no room: the rest wait too (first come, first served)
    it = waiting_.erase(it);
  }
}

// Least recently used first, prompt checkpoints last: they have their own bound
// (prefix_checkpoints) and ids and sliding cells set aside for it.
bool Executor::evict_one_retained(CloneFrom keep) {
  int32_t victim = -1;
  std::pair<bool, int64_t> oldest{};
  for (const auto& [seq, r] : retained_) {
    if (keep && keep->first == seq) continue;
    const std::pair<bool, int64_t> age{r.checkpoint.has_value(), r.last_use};
    if (victim < 0 || age < oldest) {
      victim = seq;
      oldest = age;
    }
  }
  if (victim < 0) return false;
  retained_.erase(victim);
  release_seq(victim);
  ++stats_.evictions;
  return true;
}

bool Executor::make_room(int64_t cells) {
  while (cache_->free_cells() < cells)
    if (!evict_one_retained(std::nullopt)) return false;
  return true;
}

void Executor::release_seq(int32_t seq) {
  index_.remove(seq);
  (void)cache_->seq_rm(seq);
}

void Executor::clear_prefix_cache() {
  while (evict_one_retained(std::nullopt)) --stats_.evictions;
}

void Executor::retire(Session& s, bool keep) {
  if (s.seq < 0) return;
  store_forget(s);
  seq_session_.erase(s.seq);
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  if (keep && opt_.prefix_cache && s.fed > 0) {
    Retained r;
    r.seq = s.seq;
    r.request = s.request;
    r.completion = s.completion;
    r.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.fed);
    r.last_use = ++tick_;
    retained_.emplace(s.seq, std::move(r));
  } else {
    release_seq(s.seq);
  }
  s.seq = -1;
}

// With sliding-window layers a finished sequence soon stops holding the window its prompt's
// end needs, so a later request with the same prompt could not clone it. Such prompts are
// fed up to their last token, and there the sequence is cloned whole — that clone keeps the
// window tail — and retained under the prompt's blocks.
bool Executor::wants_snapshot(const Session& s) const {
  return opt_.prefix_cache && sliding_ && !s.snapshotted && s.fed < s.prompt_len - 1 &&
         s.prompt_len - 1 >= index_.block_tokens();
}

void Executor::snapshot_prompt(Session& s) {
  s.snapshotted = true;
  Result<int32_t> c = cache_->seq_clone(s.seq, s.fed);
  if (!c.ok() && c.status().code() == StatusCode::kResourceExhausted &&
      evict_one_retained(std::nullopt))
    c = cache_->seq_clone(s.seq, s.fed);
  if (!c.ok()) return;  // no sequence id or cell: the prompt is simply not kept
  Retained r;
  r.seq = *c;
  r.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.fed);
  r.last_use = ++tick_;
  index_.add(*c, r.tokens);
  retained_.emplace(*c, std::move(r));
}

// A prompt checkpoint at every block boundary the chunk [from, s.fed) crossed inside the
// prompt (the prompt's last position is snapshot_prompt's): the step's positions are still
// held in the sliding pools until the next step, so each boundary can be cloned.
void Executor::take_checkpoints(const Session& s, int64_t from) {
  if (!opt_.prefix_cache || !sliding_ || opt_.prefix_checkpoints == 0) return;
  const int64_t b = index_.block_tokens();
  for (int64_t at = (from / b + 1) * b; at <= s.fed && at < s.prompt_len - 1; at += b)
    take_checkpoint(s, at);
}

void Executor::take_checkpoint(const Session& s, int64_t at) {
  const std::span<const int32_t> prefix = std::span<const int32_t>(s.tokens).first(at);
  const uint64_t key = index_.keys(prefix).back();  // names every token of [0, at)
  int32_t oldest = -1, held = 0;
  for (const auto& [seq, r] : retained_) {
    if (!r.checkpoint) continue;
    if (*r.checkpoint == key && r.tokens.size() == prefix.size()) return;  // already kept
    ++held;
    if (oldest < 0 || r.last_use < retained_.at(oldest).last_use) oldest = seq;
  }
  if (held >= opt_.prefix_checkpoints) {
    retained_.erase(oldest);
    release_seq(oldest);
    ++stats_.evictions;
  }
  Result<int32_t> c = cache_->seq_clone(s.seq, at);
  if (!c.ok() && c.status().code() == StatusCode::kResourceExhausted &&
      evict_one_retained(std::nullopt))
    c = cache_->seq_clone(s.seq, at);
  if (!c.ok()) return;  // no id or cell: this boundary is simply not kept
  Retained r;
  r.seq = *c;
  r.tokens.assign(prefix.begin(), prefix.end());
  r.last_use = ++tick_;
  r.checkpoint = key;
  index_.add(*c, r.tokens);
  retained_.emplace(*c, std::move(r));
  ++stats_.checkpoints_taken;
}

void Executor::preempt(Session& s) {
  retire(s, /*keep=*/false);
  s.fed = 0;
  waiting_.push_front(s.id);
  ++stats_.preemptions;
}

void Executor::finish(Session& s, Finish why) {
  Request& r = *requests_.at(s.request);
  r.result.completions[static_cast<size_t>(s.completion)].finish = why;
  retire(s, /*keep=*/true);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s.id), waiting_.end());
  if (s.forks_pending > 0) {  // forks that never started end with their parent
    for (int32_t i = 1; i <= s.forks_pending; ++i)
      r.result.completions[static_cast<size_t>(r.params.n - i)].finish = why;
    s.forks_pending = 0;
  }
  s.done = true;
  finish_request_if_done(r);
}

void Executor::finish_request_if_done(Request& r) {
  for (const Completion& c : r.result.completions)
    if (c.finish == Finish::kNone) return;
  finished_.push_back(std::move(r.result));
  drop_request(r.id);
}

Status Executor::cancel(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end())
    return not_found(str_cat("cancel: no unfinished request ", request));
  const std::vector<int64_t> ids = it->second->sessions;
  for (int64_t sid : ids) {
    auto s = sessions_.find(sid);
    if (s != sessions_.end() && !s->second->done) finish(*s->second, Finish::kCancelled);
  }
  return ok_status();
}

Status Executor::close(int64_t request) {
  bool found = requests_.count(request) != 0;
  if (found) KVCACHE_RETURN_IF_ERROR(cancel(request));
  std::vector<int32_t> drop;
  for (const auto& [seq, r] : retained_)
    if (r.request == request) drop.push_back(seq);
  for (int32_t seq : drop) {
    retained_.erase(seq);
    release_seq(seq);
  }
  if (!found && drop.empty()) return not_found(str_cat("close: no request ", request));
  return ok_status();
}

std::vector<RequestResult> Executor::take_finished() {
  std::vector<RequestResult> out;
  out.swap(finished_);
  return out;
}

bool Executor::idle() const { return running_.empty() && waiting_.empty(); }

Status Executor::run() {
  while (!idle()) KVCACHE_RETURN_IF_ERROR(step());
  return ok_status();
}

ExecutorStats Executor::stats() const {
  ExecutorStats s = stats_;
  s.running = static_cast<int32_t>(running_.size());
  s.waiting = static_cast<int32_t>(waiting_.size());
  s.retained = static_cast<int32_t>(retained_.size());
  for (const auto& [seq, r] : retained_) s.checkpoints += r.checkpoint ? 1 : 0;
  s.grammar_matchers = 0;
  for (const auto& [g, m] : maskers_) s.grammar_matchers += m.expired() ? 0 : 1;
  s.store = store_stats();
  return s;
}

StoreStats Executor::store_stats() const { return store_ ? store_->stats() : StoreStats{}; }

}  // namespace kvcache::serve
