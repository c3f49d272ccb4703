// Chunked prefill, decoding and undoable turns. See session.h.
#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/str_cat.h"

namespace kvcache::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Session::Session(Engine& engine, int64_t step_tokens, int32_t seq)
    : engine_(engine), step_(std::max<int64_t>(1, step_tokens)), seq_(seq) {}

Session::~Session() {
  for (Turn& t : turns_) drop(t);
}

Status Session::save(Turn& t) {
  Result<UndoPoint> point = engine_.cache().save_point(seq_);
  if (point.ok()) {
    t.point = std::move(point).value();
    return ok_status();
  }
  // No room for it (no free sequence id for a fork): undo falls back to rewind.
  if (point.status().code() == StatusCode::kResourceExhausted) return ok_status();
  return point.status();
}

Status Session::return_to(Turn& t) {
  KVCACHE_ASSIGN_OR_RETURN(seq_, engine_.cache().return_to(seq_, t.point));
  return ok_status();
}

void Session::drop(Turn& t) { engine_.cache().release(t.point); }

void Session::trim_undo() {
  int32_t keep = undo_turns_;
  for (auto t = turns_.rbegin(); t != turns_.rend(); ++t) {
    if (!t->point.saved()) continue;
    if (keep > 0) {
      --keep;
      continue;
    }
    drop(*t);
    t->released = true;
  }
}

Status Session::set_undo_turns(int32_t n) {
  if (n < 0) return invalid_argument(str_cat("session: undo_turns = ", n, ", expected >= 0"));
  undo_turns_ = n;
  trim_undo();
  return ok_status();
}

UndoCost Session::undo_cost() const {
  UndoCost c;
  for (const Turn& t : turns_) {
    if (!t.point.saved()) continue;
    ++c.turns_kept;
    c.checkpoint_bytes += t.point.bytes();
    if (t.point.fork >= 0) ++c.forks;
  }
  return c;
}

int64_t Session::pos() const { return engine_.cache().pos(seq_); }

Status prefill_chunks(Engine& engine, int32_t seq, std::span<const int32_t> tokens,
                      int64_t step_tokens, LogitsMode mode, Logits& out,
                      const std::function<void(const Logits&)>& on_chunk) {
  if (step_tokens < 1)
    return invalid_argument(str_cat("prefill: step_tokens = ", step_tokens, ", expected >= 1"));
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min<size_t>(static_cast<size_t>(step_tokens), tokens.size() - done);
    const int64_t p0 = engine.cache().pos(seq);
    ids.assign(n, seq);
    positions.resize(n);
    for (size_t i = 0; i < n; ++i) positions[i] = p0 + static_cast<int64_t>(i);
    Batch b{tokens.subspan(done, n), ids, positions};
    KVCACHE_RETURN_IF_ERROR(engine.forward(b, mode, out));
    if (on_chunk) on_chunk(out);
    done += n;
  }
  return ok_status();
}

Status Session::prefill(std::span<const int32_t> tokens, Logits* last) {
  const int64_t p0 = pos();
  Status st = prefill_chunks(engine_, seq_, tokens, step_, LogitsMode::kLast, logits_);
  // The conversation holds what the cache now holds (chunks before a refused one stay).
  const auto fed = static_cast<size_t>(std::clamp<int64_t>(pos() - p0, 0, tokens.size()));
  history_.insert(history_.end(), tokens.begin(), tokens.begin() + fed);
  KVCACHE_RETURN_IF_ERROR(st);
  if (last != nullptr) *last = logits_;
  return ok_status();
}

Result<TurnStats> Session::turn(std::span<const int32_t> prompt, int32_t max_new_tokens,
                                Sampler& sampler, const std::function<void(int32_t)>& on_token,
                                const std::function<bool(int32_t)>& is_eog) {
  std::vector<int32_t> feed = pending_;
  feed.insert(feed.end(), prompt.begin(), prompt.end());
  if (feed.empty()) return invalid_argument("session turn: the prompt is empty");
  if (max_new_tokens < 0)
    return invalid_argument(
        str_cat("session turn: max_new_tokens = ", max_new_tokens, ", expected >= 0"));
  Turn record;
  record.point.pos = pos();
  record.pending = pending_;
  KVCACHE_RETURN_IF_ERROR(save(record));
  TurnStats st;
  st.checkpoint_bytes = record.point.bytes();
  auto t0 = std::chrono::steady_clock::now();
  Status s = prefill(feed, nullptr);
  if (!s.ok()) {  // drop a partial prefill: back to the turn's start
    Status back = return_to(record);
    drop(record);
    if (back.ok()) history_.resize(static_cast<size_t>(record.point.pos));
    if (!back.ok())
      return Status(s.code(), s.message() + " (and returning to the turn's start failed: " +
                                  back.message() + ")");
    return s;
  }
  // A draft model reads the prompt now: prompt work, timed with the prefill. If it cannot,
  // its first proposal tries again (and fails the turn there if it still cannot).
  if (drafter_ != nullptr && max_new_tokens > 1) (void)drafter_->prepare(history_);
  st.prefill_seconds = seconds_since(t0);
  st.prefill_tokens = static_cast<int64_t>(feed.size());
  turns_.push_back(std::move(record));
  trim_undo();
  pending_.clear();
  t0 = std::chrono::steady_clock::now();
  s = decode(max_new_tokens, sampler, st, on_token, is_eog);
  st.decode_seconds = seconds_since(t0);
  if (!s.ok()) return s;
  return st;
}

bool Session::emit(int32_t tok, int32_t max_new_tokens, TurnStats& st,
                   const std::function<void(int32_t)>& on_token,
                   const std::function<bool(int32_t)>& is_eog) {
  if (is_eog && is_eog(tok)) {
    pending_.push_back(tok);
    st.eog_token = tok;
    return true;
  }
  st.generated.push_back(tok);
  if (on_token) on_token(tok);
  if (st.generated.size() < static_cast<size_t>(max_new_tokens)) return false;
  pending_.push_back(tok);
  return true;
}

Status Session::decode(int32_t max_new_tokens, Sampler& sampler, TurnStats& st,
                       const std::function<void(int32_t)>& on_token,
                       const std::function<bool(int32_t)>& is_eog) {
  if (max_new_tokens == 0) return ok_status();
  int32_t tok = sampler.sample(logits_.row(0));
  if (emit(tok, max_new_tokens, st, on_token, is_eog)) return ok_status();
  for (;;) {  // `tok` is held: sampled, not yet in the cache
    const int64_t p0 = pos();
    const int64_t room = engine_.cache().free_cells();
    if (room < 1) {
      pending_.push_back(tok);
      st.stopped_full = true;
      return ok_status();
    }
    draft_.clear();
    history_.push_back(tok);  // the drafter's context ends with the held token
    double draft_seconds = 0.0;
    if (drafter_ != nullptr) {
      const int64_t left = max_new_tokens - static_cast<int64_t>(st.generated.size());
      const auto k = static_cast<int32_t>(std::min<int64_t>({draft_k_.k(), room - 1, left - 1}));
      const auto t0 = std::chrono::steady_clock::now();
      Status d = k > 0 ? drafter_->propose(history_, k, draft_) : ok_status();
      draft_seconds = seconds_since(t0);
      if (!d.ok()) {
        history_.pop_back();
        return d;
      }
      if (draft_.tokens.size() > static_cast<size_t>(std::max(k, 0))) draft_.tokens.resize(k);
    }
    const auto n = static_cast<int64_t>(draft_.tokens.size()) + 1;
    feed_.assign(1, tok);
    feed_.insert(feed_.end(), draft_.tokens.begin(), draft_.tokens.end());
    ids_.assign(static_cast<size_t>(n), seq_);
    positions_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) positions_[i] = p0 + i;
    Batch b{feed_, ids_, positions_};
    const auto t1 = std::chrono::steady_clock::now();
    Status s = engine_.forward(b, n > 1 ? LogitsMode::kAll : LogitsMode::kLast, logits_);
    const double forward_seconds = seconds_since(t1);
    if (!s.ok()) {
      history_.pop_back();
      return s;
    }
    const Verdict v = accept_drafts(logits_, draft_, sampler);
    // Emit the kept drafts, then the target's own token; the turn may end at any of them.
    int32_t kept = 0;
    bool done = false;
    while (kept < v.accepted && !done)
      if (!(done = emit(draft_.tokens[kept], max_new_tokens, st, on_token, is_eog))) ++kept;
    if (!done) done = emit(v.next, max_new_tokens, st, on_token, is_eog);
    // The cache keeps the held token and the drafts before the first one not kept.
    if (p0 + 1 + kept < p0 + n)
      KVCACHE_RETURN_IF_ERROR_CTX(engine_.cache().rewind(seq_, p0 + 1 + kept),
                                  "speculative decoding: taking back rejected drafts");
    history_.insert(history_.end(), draft_.tokens.begin(), draft_.tokens.begin() + kept);
    st.decode_tokens += 1 + kept;
    if (drafter_ != nullptr) {
      ++st.spec.steps;
      st.spec.draft_seconds += draft_seconds;  // a call that offered nothing costs too
      if (n > 1) {
        ++st.spec.verify_steps;
        st.spec.verify_seconds += forward_seconds;
      } else {
        st.spec.plain_seconds += forward_seconds;
      }
      draft_k_.observe_costs(static_cast<int32_t>(n - 1), draft_seconds, static_cast<int32_t>(n),
                             forward_seconds);
      draft_k_.observe(static_cast<int32_t>(n - 1), v.accepted);
    }
    st.spec.drafted += n - 1;
    st.spec.accepted += v.accepted;
    if (done) return ok_status();
    tok = v.next;
  }
}

Status Session::set_drafter(Drafter* drafter, const SpecOptions& options) {
  if (drafter != nullptr) KVCACHE_RETURN_IF_ERROR(check_spec_options(options, step_));
  drafter_ = drafter;
  spec_ = options;
  draft_k_ = AdaptiveK(options);
  return ok_status();
}

Status Session::undo(int32_t n) {
  if (n < 1 || static_cast<size_t>(n) > turns_.size())
    return failed_precondition(
        str_cat("undo ", n, ": ", turns_.size(), " turn(s) to undo, expected 1..", turns_.size()));
  const size_t first = turns_.size() - static_cast<size_t>(n);
  Turn& target = turns_[first];
  const int64_t now = pos();
  Status s = return_to(target);
  if (!s.ok())
    return Status(
        s.code(),
        str_cat("undo ", n, ": cannot return to position ", target.point.pos, " (now at ", now,
                "): ", s.message(),
                (target.released ? str_cat("; that turn's saved start was released (the session "
                                           "keeps it for the last ",
                                           undo_turns_, " turn(s))")
                                 : std::string())));
  pending_ = target.pending;
  history_.resize(static_cast<size_t>(target.point.pos));
  for (size_t i = first; i < turns_.size(); ++i) drop(turns_[i]);
  turns_.resize(first);
  return ok_status();
}

Status Session::reset() {
  KVCACHE_RETURN_IF_ERROR(engine_.cache().rewind(seq_, 0));  // always works (SPEC §3, §4)
  for (Turn& t : turns_) drop(t);
  pending_.clear();
  history_.clear();
  turns_.clear();
  return ok_status();
}

std::vector<int32_t> Session::conversation() const {
  std::vector<int32_t> all = history_;
  all.insert(all.end(), pending_.begin(), pending_.end());
  return all;
}

Status Session::resume(std::span<const int32_t> tokens) {
  const int64_t held = pos();
  if (static_cast<int64_t>(tokens.size()) < held)
    return invalid_argument(str_cat("session resume: ", tokens.size(),
                                    " token ids for a sequence of ", held,
                                    " positions, expected at least one per position"));
  for (Turn& t : turns_) drop(t);
  turns_.clear();
  history_.assign(tokens.begin(), tokens.begin() + held);
  pending_.assign(tokens.begin() + held, tokens.end());
  return ok_status();
}

}  // namespace kvcache::engine
