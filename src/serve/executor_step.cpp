// One step of the batching executor: pack decode tokens then prefill chunks, find room (evict
// retained prefixes, shrink prefill, preempt the youngest), one forward, sample. See executor.h.
#include <algorithm>
#include <chrono>
#include <string>

#include "cpu/thread_pool.h"
#include "serve/executor.h"
#include "serve/executor_state.h"

namespace kvcache::serve {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string: text
// that may still become a stop string is held back from streaming.
size_t held_back(std::string_view text, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const std::string& stop : stops)
    for (size_t k = std::min(stop.size() - 1, text.size()); k > keep; --k)
      if (text.substr(text.size() - k) == std::string_view(stop).substr(0, k)) {
        keep = k;
        break;
      }
  return keep;
}

}  // namespace

std::vector<Executor::Planned> Executor::plan_step() {
  std::vector<Planned> plan;
  std::vector<int64_t> prefill;
  int64_t left = budget_;
  for (int64_t sid : running_) {
    const Session& s = *sessions_.at(sid);
    if (s.store_wait) continue;  // its prefix may still come from the store
    if (s.remaining() == 1) {
      plan.push_back({sid, 1});
      --left;
    } else if (s.remaining() > 1) {
      prefill.push_back(sid);
    }
  }
  // Drafts after every decode token and before prefill chunks; while prompts are waiting for
  // their chunks, drafts take at most half of what is left.
  int64_t room = prefill.empty() ? left : left / 2;
  for (Planned& p : plan) {
    const int64_t k = propose_drafts(*sessions_.at(p.session), room);
    p.n += k;
    room -= k;
    left -= k;
  }
  if (prefill.empty()) return plan;
  const size_t start = rotate_++ % prefill.size();
  for (size_t k = 0; k < prefill.size() && left > 0; ++k) {
    const Session& s = *sessions_.at(prefill[(start + k) % prefill.size()]);
    int64_t n = std::min({s.remaining(), setup_.step_tokens, left});
    if (wants_snapshot(s)) n = std::min(n, s.prompt_len - 1 - s.fed);  // stop before the end
    n = std::min(n, store_chunk_end(s) - s.fed);  // sliding rows of a block still held
    plan.push_back({s.id, n});
    left -= n;
  }
  return plan;
}

// Makes the pool hold the plan's tokens: evicts retained sequences, then trims prefill chunks,
// then preempts the youngest session. False when nothing can run (the last session then
// finishes as cache_full — it cannot happen when the pool holds max_session_tokens).
bool Executor::fit_step(std::vector<Planned>& plan) {
  for (;;) {
    int64_t need = 0;
    for (const Planned& p : plan) need += p.n;
    if (need == 0) return false;
    if (make_room(need)) return true;
    int64_t over = need - cache_->free_cells();
    for (auto it = plan.rbegin(); it != plan.rend() && over > 0; ++it) {  // drafts first
      Session& s = *sessions_.at(it->session);
      if (!verifies(*it)) continue;
      const int64_t cut = std::min(over, it->n - 1);
      it->n -= cut;
      over -= cut;
      s.draft.tokens.resize(static_cast<size_t>(it->n - 1));
      if (!s.draft.q.empty()) s.draft.q.resize(s.draft.tokens.size());
    }
    for (auto it = plan.rbegin(); it != plan.rend() && over > 0; ++it) {
      if (sessions_.at(it->session)->remaining() == 1) continue;  // a decode token
      const int64_t cut = std::min(over, it->n);
      it->n -= cut;
      over -= cut;
    }
    plan.erase(std::remove_if(plan.begin(), plan.end(), [](const Planned& p) { return p.n == 0; }),
               plan.end());
    if (over <= 0) return true;
    auto youngest = std::max_element(running_.begin(), running_.end(), [&](int64_t a, int64_t b) {
      return sessions_.at(a)->admitted_at < sessions_.at(b)->admitted_at;
    });
    if (youngest == running_.end()) return false;
    Session& victim = *sessions_.at(*youngest);
    if (running_.size() == 1) {
      finish(victim, Finish::kCacheFull);
      return false;
    }
    const int64_t vid = victim.id;
    plan.erase(std::remove_if(plan.begin(), plan.end(),
                              [&](const Planned& p) { return p.session == vid; }),
               plan.end());
    preempt(victim);
  }
}

Status Executor::step() {
  admit_waiting();
  store_poll();
  if (running_.empty()) {
    if (!waiting_.empty()) finish(*sessions_.at(waiting_.front()), Finish::kCacheFull);
    return ok_status();
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Planned> plan = plan_step();
  if (plan.empty()) {  // every running session waits for the store
    store_idle_wait();
    return ok_status();
  }
  if (!fit_step(plan)) return ok_status();
  stats_.peak_running = std::max(stats_.peak_running, static_cast<int32_t>(running_.size()));
  batch_tokens_.clear();
  batch_seqs_.clear();
  batch_pos_.clear();
  batch_rows_.clear();
  int64_t prefill = 0, decode = 0;
  for (const Planned& p : plan) {
    const Session& s = *sessions_.at(p.session);
    const bool all_rows = verifies(p);  // the held token's and every draft's row
    for (int64_t i = 0; i < p.n; ++i) {
      // A decode session's token 0 is its held token; the rest are this step's drafts.
      batch_tokens_.push_back(i < s.remaining() ? s.tokens[static_cast<size_t>(s.fed + i)]
                                                : s.draft.tokens[static_cast<size_t>(i - 1)]);
      batch_seqs_.push_back(s.seq);
      batch_pos_.push_back(s.fed + i);
      if (all_rows || i + 1 == p.n)
        batch_rows_.push_back(static_cast<int32_t>(batch_tokens_.size() - 1));
    }
    (s.remaining() == 1 ? decode : prefill) += p.n;
  }
  engine::Batch batch{batch_tokens_, batch_seqs_, batch_pos_};
  const auto t1 = std::chrono::steady_clock::now();
  Status st = engine_->forward(batch, batch_rows_, logits_);
  step_costs_.add(static_cast<int32_t>(batch_tokens_.size()),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  if (!st.ok()) {
    // The cache may hold part of the step: drop those sequences and end their requests.
    for (const Planned& p : plan) {
      auto it = sessions_.find(p.session);
      if (it == sessions_.end() || it->second->done) continue;
      retire(*it->second, /*keep=*/false);
      finish(*it->second, Finish::kCancelled);
    }
    return Status(st.code(), "executor step: " + st.message());
  }
  // Verifications first: their rejected rows leave the cache before anything else happens.
  Result<std::vector<std::pair<int64_t, Finish>>> ended = verify_drafts(plan);
  if (!ended.ok()) return ended.status();
  for (const Planned& p : plan) {
    Session& s = *sessions_.at(p.session);
    if (verifies(p)) continue;  // done in verify_drafts
    if (s.remaining() == 1) {
      note_plain_decode(s);
      ++stats_.decode_tokens;
    }
    const bool snapshot = wants_snapshot(s);
    const int64_t from = s.fed;
    s.fed += p.n;
    if (opt_.prefix_cache)
      index_.add(s.seq, std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.fed)));
    take_checkpoints(s, from);
    if (snapshot && s.fed == s.prompt_len - 1) snapshot_prompt(s);
    store_capture(s);
  }
  // Rows belong to the last token of each sequence in the batch; sample those that reached the
  // end of their tokens (a prefill chunk that stops short samples nothing).
  std::vector<int64_t> row_session(logits_.rows());
  for (size_t r = 0; r < logits_.rows(); ++r)
    row_session[r] = seq_session_.at(batch_seqs_[static_cast<size_t>(logits_.token_index[r])]);
  const std::vector<int32_t> drawn = draw_tokens(row_session);
  for (size_t r = 0; r < logits_.rows(); ++r) {
    Session& s = *sessions_.at(row_session[r]);
    if (s.remaining() == 0) sample(s, logits_.row(r), drawn[r]);
  }
  for (const auto& [sid, why] : *ended) finish(*sessions_.at(sid), why);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double total = static_cast<double>(prefill + decode);
  stats_.prefill_seconds += secs * static_cast<double>(prefill) / total;
  stats_.decode_seconds += secs * static_cast<double>(decode) / total;
  stats_.prefill_tokens += prefill;
  ++stats_.steps;
  return ok_status();
}

// The next token of every row whose session samples a plain next token this step (no forks
// to make first, not at max_new_tokens: exactly the rows where sample() would draw), drawn
// on the pool: each session draws from its own sampler, so the tokens are those a serial
// loop draws; a temperature draw over a whole vocabulary costs a fraction of a millisecond,
// a step of many sessions one per row. -1 for the other rows.
std::vector<int32_t> Executor::draw_tokens(std::span<const int64_t> row_session) {
  std::vector<Session*> who(row_session.size(), nullptr);
  int64_t sampled = 0;
  for (size_t r = 0; r < row_session.size(); ++r) {
    Session& s = *sessions_.at(row_session[r]);
    if (s.remaining() != 0 || s.forks_pending > 0 ||
        s.generated() >= requests_.at(s.request)->params.max_new_tokens)
      continue;
    who[r] = &s;
    // A temperature draw or a grammar mask (a cold one walks the vocabulary's trie) is worth
    // a pool thread; a greedy free row is not.
    sampled += s.sampler.config().temperature > 0.0f || s.grammar ? 1 : 0;
  }
  std::vector<int32_t> drawn(row_session.size(), -1);
  auto draw = [&](int64_t r) {
    if (who[r] != nullptr) {
      const int32_t tok = draw_one(*who[r], logits_.row(static_cast<size_t>(r)));
      drawn[r] = tok >= 0 ? tok : -2;  // -2: the grammar allowed nothing
    }
  };
  if (sampled > 1) {  // greedy rows take microseconds: not worth waking a thread
    cpu::global_pool().run_tasks(static_cast<int64_t>(row_session.size()), draw);
  } else {
    for (size_t r = 0; r < row_session.size(); ++r) draw(static_cast<int64_t>(r));
  }
  return drawn;
}

bool adjusts_logits(const GenerateParams& p) {
  return !p.logit_bias.empty() || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// logits += the request's bias, less its penalties for the tokens generated so far (counts).
void adjust_logits(const GenerateParams& p, const std::unordered_map<int32_t, int32_t>& counts,
                   std::span<float> logits) {
  for (const auto& [id, bias] : p.logit_bias) logits[static_cast<size_t>(id)] += bias;
  for (const auto& [id, n] : counts)
    logits[static_cast<size_t>(id)] -=
        static_cast<float>(n) * p.frequency_penalty + (n > 0 ? p.presence_penalty : 0.0f);
}

int32_t Executor::draw_one(Session& s, std::span<const float> logits) {
  const GenerateParams& p = requests_.at(s.request)->params;
  if (adjusts_logits(p)) {
    s.adjusted.assign(logits.begin(), logits.end());
    adjust_logits(p, s.counts, s.adjusted);
    logits = s.adjusted;
  }
  text::TokenMasker::Mask mask;
  if (s.grammar) mask = s.grammar->allowed();
  const std::span<const uint64_t> allowed = mask ? std::span<const uint64_t>(*mask)
                                                 : std::span<const uint64_t>();
  const int32_t tok = s.sampler.sample(logits, allowed);
  if (p.logprobs >= 0 && tok >= 0)
    s.drawn_logprob = engine::token_logprob(logits, allowed, p.sampling.temperature, tok,
                                            p.logprobs);
  return tok;
}

void Executor::fork_children(Session& parent, std::span<const float> logits) {
  Request& r = *requests_.at(parent.request);
  const int32_t forks = parent.forks_pending;
  parent.forks_pending = 0;
  for (int32_t i = 1; i <= forks; ++i) {
    std::vector<int32_t> prompt(parent.tokens.begin(), parent.tokens.begin() + parent.prompt_len);
    Session& c = new_session(r, i, std::move(prompt));
    c.counted = true;
    int32_t seq = -1;
    if (!new_seq(std::make_pair(parent.seq, parent.fed), seq)) {
      waiting_.push_front(c.id);  // no id now: it recomputes (the index finds the prompt)
      continue;
    }
    c.seq = seq;
    c.fed = parent.fed;
    c.admitted_at = ++tick_;
    seq_session_[seq] = c.id;
    running_.push_back(c.id);
    if (opt_.prefix_cache)
      index_.add(seq, std::span<const int32_t>(c.tokens).first(static_cast<size_t>(c.fed)));
    sample(c, logits);
  }
}

// A lazy grammar's trigger (GenerateParams::grammar_trigger): looks for it in the completion's
// text after token `tok` and, once there, starts the grammar from the text that follows it.
void Executor::switch_grammar_on(Session& s, int32_t tok) {
  Request& r = *requests_.at(s.request);
  const GenerateParams& p = r.params;
  std::string& text = r.result.completions[static_cast<size_t>(s.completion)].text;
  const std::string& trigger = p.grammar_trigger;
  const auto& marks = p.grammar_trigger_tokens;
  if (std::find(marks.begin(), marks.end(), tok) != marks.end()) text += trigger;
  size_t at = std::string::npos;
  if (p.grammar_trigger_at_start) {
    if (text.compare(0, trigger.size(), trigger) == 0) at = 0;
    else if (text.size() >= trigger.size() || trigger.compare(0, text.size(), text) != 0)
      s.trigger_off = true;  // the text no longer starts as the trigger does
  } else {
    at = text.find(trigger, std::min(s.trigger_scan, text.size()));
    s.trigger_scan = text.size() >= trigger.size() ? text.size() - trigger.size() + 1 : 0;
  }
  if (at == std::string::npos) return;
  text::GrammarMatcher& m = r.masker->matcher();
  const text::GrammarState st = m.advance(m.start(), std::string_view(text).substr(at));
  if (st == text::kDeadState) {
    s.trigger_off = true;  // the token ran past the trigger into what no document has
    return;
  }
  s.grammar.emplace(r.masker, st);
}

void Executor::sample(Session& s, std::span<const float> logits, int32_t drawn) {
  Request& r = *requests_.at(s.request);
  const GenerateParams& p = r.params;
  if (s.forks_pending > 0) fork_children(s, logits);
  if (s.generated() >= p.max_new_tokens) {
    finish(s, Finish::kLength);
    return;
  }
  const int32_t tok = drawn != -1 ? drawn : draw_one(s, logits);
  if (tok < 0) {  // a grammar with no allowed token: a dead end the grammar check missed
    finish(s, Finish::kStop);
    return;
  }
  if (const Finish why = push_token(s, tok); why != Finish::kNone) finish(s, why);
}

Finish Executor::push_token(Session& s, int32_t tok) {
  Request& r = *requests_.at(s.request);
  const GenerateParams& p = r.params;
  if (s.grammar) static_cast<void>(s.grammar->accept(tok));  // the mask allowed it
  ++s.counts[tok];
  s.tokens.push_back(tok);
  Completion& c = r.result.completions[static_cast<size_t>(s.completion)];
  c.tokens.push_back(tok);
  if (p.logprobs >= 0) c.logprobs.push_back(s.drawn_logprob);
  const bool eog = !p.ignore_eos &&
                   std::find(opt_.eog_ids.begin(), opt_.eog_ids.end(), tok) != opt_.eog_ids.end();
  Finish why = Finish::kNone;
  if (eog) {
    why = Finish::kStop;
  } else if (tokenizer_ != nullptr) {
    const size_t before = c.text.size();
    c.text += tokenizer_->decode_one(tok);
    size_t cut = std::string::npos;
    for (const std::string& stop : p.stop) {
      const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      const size_t at = c.text.find(stop, from);
      if (at < cut) {
        cut = at;
        c.stop_string = stop;
      }
    }
    if (cut != std::string::npos) {
      c.text.resize(cut);
      why = Finish::kStop;
    }
  }
  if (why == Finish::kNone && !s.grammar && r.masker && !s.trigger_off) switch_grammar_on(s, tok);
  if (why == Finish::kNone && s.grammar && s.grammar->finished()) why = Finish::kStop;
  if (why == Finish::kNone && s.generated() >= p.max_new_tokens) why = Finish::kLength;
  // Stream what can no longer turn into a stop string; everything once finished.
  const size_t safe = why != Finish::kNone ? c.text.size()
                                           : c.text.size() - held_back(c.text, p.stop);
  if (on_token_) {
    TokenEvent e;
    e.request = s.request;
    e.completion = s.completion;
    e.token = tok;
    e.finish = why;
    if (p.logprobs >= 0) e.logprob = &c.logprobs.back();
    e.piece = std::string_view(c.text).substr(std::min(s.streamed, safe), safe - std::min(s.streamed, safe));
    on_token_(e);
  }
  s.streamed = std::max(s.streamed, safe);
  return why;
}

}  // namespace kvcache::serve
