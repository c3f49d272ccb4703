// Speculative decoding in the batching executor: a drafting session's decode step feeds its
// held token + k drafts, the acceptance rule (engine::accept_drafts) keeps a prefix, and the
// rejected rows leave the cache right after the step. See executor.h and docs/speculative.md.
#include <algorithm>
#include <chrono>
#include <limits>
#include <span>

#include "serve/executor.h"
#include "serve/executor_state.h"

namespace kvcache::serve {

bool Executor::verifies(const Planned& p) const {
  return p.n > 1 && sessions_.at(p.session)->remaining() == 1;
}

// Up to `budget` drafts for a decode session, never past its max_new_tokens (the step's own
// token is the last one it may keep) nor wider than the step; 0 = a plain decode step.
int64_t Executor::propose_drafts(Session& s, int64_t budget) {
  s.draft.clear();
  if (!s.may_draft || s.forks_pending > 0) return 0;
  const GenerateParams& p = requests_.at(s.request)->params;
  const int64_t k = std::min<int64_t>({s.draft_k.k(), setup_.step_tokens - 1, budget,
                                       p.max_new_tokens - s.generated() - 1});
  if (k < 1) return 0;
  if (!s.drafter) {
    const DraftRoom room{max_session_tokens_ + opt_.spec.draft_max, setup_.step_tokens};
    Result<std::unique_ptr<engine::Drafter>> d = opt_.make_drafter(room);
    if (!d.ok() || *d == nullptr) {
      s.may_draft = false;  // no drafter for it: it decodes plainly
      return 0;
    }
    s.drafter = std::move(*d);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const bool proposed = s.drafter->propose(s.tokens, static_cast<int32_t>(k), s.draft).ok();
  s.draft_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!proposed) {
    s.draft.clear();  // a drafter that fails offers nothing: a plain step
    return 0;
  }
  if (s.draft.tokens.size() > static_cast<size_t>(k)) s.draft.tokens.resize(static_cast<size_t>(k));
  if (s.draft.q.size() > s.draft.tokens.size()) s.draft.q.resize(s.draft.tokens.size());
  return static_cast<int64_t>(s.draft.tokens.size());
}

void Executor::shape_verification_rows(Session& s, size_t first, int64_t n,
                                       std::vector<text::TokenMasker::Mask>& masks) {
  masks.clear();
  const GenerateParams& p = requests_.at(s.request)->params;
  const bool adjust = adjusts_logits(p);
  if (!adjust && !s.grammar) return;
  const auto vocab = static_cast<size_t>(logits_.vocab);
  size_t taken = 0;  // drafts counted (and taken by the grammar) so far
  for (int64_t i = 0; i < n; ++i) {
    const std::span<float> row =
        std::span<float>(logits_.data).subspan((first + i) * vocab, vocab);
    if (adjust) adjust_logits(p, s.counts, row);
    if (s.grammar) {
      const text::TokenMasker::Mask& mask = masks.emplace_back(s.grammar->allowed());
      if (mask)
        for (size_t id = 0; id < vocab; ++id)  // ids past the mask's words are not allowed
          if ((id >> 6) >= mask->size() || !text::mask_allows(*mask, static_cast<int32_t>(id)))
            row[id] = -std::numeric_limits<float>::infinity();
    }
    if (i + 1 == n) break;
    const int32_t d = s.draft.tokens[static_cast<size_t>(i)];
    if (s.grammar && !s.grammar->accept(d)) {
      s.draft.tokens.resize(static_cast<size_t>(i));  // refused: never kept
      s.draft.q.resize(std::min(s.draft.q.size(), static_cast<size_t>(i)));
      break;
    }
    ++s.counts[d];
    ++taken;
  }
  // Back to the state before the drafts.
  if (s.grammar) s.grammar->rewind(taken);
  for (size_t i = 0; i < taken; ++i) {
    const auto it = s.counts.find(s.draft.tokens[i]);
    if (--it->second == 0) s.counts.erase(it);
  }
}

void Executor::note_plain_decode(Session& s) {
  if (!s.may_draft) return;
  s.draft_k.observe(0, 0);
  ++requests_.at(s.request)->result.completions[static_cast<size_t>(s.completion)].draft.steps;
  ++stats_.draft_steps;
}

Result<std::vector<std::pair<int64_t, Finish>>> Executor::verify_drafts(
    const std::vector<Planned>& plan) {
  std::vector<std::pair<int64_t, Finish>> ended;
  std::vector<int32_t> seqs;
  std::vector<int64_t> to, kept_drafts;
  std::vector<Session*> who;
  std::vector<text::TokenMasker::Mask> masks;  // a grammar's per verification row
  size_t row = 0;
  // The measured-cost rule's view of this step: its rows and its decode sessions.
  const auto rows = static_cast<int32_t>(batch_tokens_.size());
  int32_t decoding = 0;
  for (const Planned& p : plan) decoding += sessions_.at(p.session)->remaining() == 1 ? 1 : 0;
  for (const Planned& p : plan) {
    Session& s = *sessions_.at(p.session);
    if (!verifies(p)) {
      ++row;  // one row: the chunk's last
      continue;
    }
    const size_t first = row;
    shape_verification_rows(s, first, p.n, masks);
    const engine::Verdict v = engine::accept_drafts(logits_, s.draft, s.sampler, first);
    row += static_cast<size_t>(p.n);
    const GenerateParams& gp = requests_.at(s.request)->params;
    // A kept token's logprob, from the row it was drawn from (under that row's mask).
    auto note_logprob = [&](int32_t i, int32_t tok) {
      if (gp.logprobs < 0) return;
      const auto at = static_cast<size_t>(i);
      const std::span<const uint64_t> allowed =
          at < masks.size() && masks[at] ? std::span<const uint64_t>(*masks[at])
                                         : std::span<const uint64_t>();
      s.drawn_logprob = engine::token_logprob(logits_.row(first + at), allowed,
                                              gp.sampling.temperature, tok, gp.logprobs);
    };
    // The kept drafts, then the target's own token; the completion may end at any of them. A
    // lazy grammar that switches on at a kept draft stops there: the rows after it were not
    // masked, so that draft is held for the next step (fed and drawn from then, masked).
    const bool lazy = !s.grammar && requests_.at(s.request)->masker != nullptr;
    int32_t kept = 0;
    bool switched = false;
    Finish why = Finish::kNone;
    while (kept < v.accepted && why == Finish::kNone && !switched) {
      const int32_t tok = s.draft.tokens[static_cast<size_t>(kept)];
      note_logprob(kept, tok);
      if ((why = push_token(s, tok)) == Finish::kNone) {
        ++kept;
        switched = lazy && s.grammar.has_value();
      }
    }
    if (why == Finish::kNone && !switched) {
      note_logprob(kept, v.next);
      why = push_token(s, v.next);
    }
    if (why != Finish::kNone) ended.emplace_back(s.id, why);
    if (switched) --kept;  // the held token now
    // The cache keeps the held token and the drafts before the first one not kept.
    if (kept + 1 < p.n) {
      seqs.push_back(s.seq);
      to.push_back(s.fed + 1 + kept);
    }
    kept_drafts.push_back(kept);
    who.push_back(&s);
    Completion& c = requests_.at(s.request)->result.completions[static_cast<size_t>(s.completion)];
    ++c.draft.steps;
    c.draft.drafted += p.n - 1;
    c.draft.accepted += v.accepted;
    ++stats_.draft_steps;
    stats_.draft_tokens += p.n - 1;
    stats_.draft_accepted += v.accepted;
    const auto drafted = static_cast<int32_t>(p.n - 1);
    s.draft_k.observe_step_costs(drafted, s.draft_seconds, decoding - 1, step_costs_,
                                 rows - drafted);
    s.draft_k.observe(drafted, v.accepted);
  }
  if (Status st = seqs.empty() ? ok_status() : cache_->rewind_many(seqs, to); !st.ok()) {
    // Cannot happen while a step is at most max_write wide; end those requests cleanly.
    for (Session* s : who) {
      retire(*s, /*keep=*/false);
      finish(*s, Finish::kCancelled);
    }
    return Status(st.code(), "executor step: taking back rejected drafts: " + st.message());
  }
  for (size_t i = 0; i < who.size(); ++i) {
    Session& s = *who[i];
    s.fed += 1 + kept_drafts[i];
    stats_.decode_tokens += 1 + kept_drafts[i];
    if (opt_.prefix_cache)  // never a rejected draft: tokens holds only what was kept
      index_.add(s.seq, std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.fed)));
    store_capture(s);  // a prompt's last token fed as a decode token may complete its block
  }
  return ended;
}

}  // namespace kvcache::serve
