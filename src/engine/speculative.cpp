// Drafters and the acceptance rule of speculative decoding. See speculative.h.
#include "engine/speculative.h"

#include <algorithm>
#include <utility>

#include "core/str_cat.h"
#include "engine/session.h"

namespace kvcache::engine {

NgramDrafter::NgramDrafter(int32_t max_n) : max_n_(std::clamp(max_n, 1, kMaxNgram)) {}

std::string NgramDrafter::name() const { return str_cat("ngram:", max_n_); }

Status NgramDrafter::propose(std::span<const int32_t> context, int32_t k, Draft& out) {
  out.clear();
  const auto len = static_cast<int64_t>(context.size());
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= 1 && k > 0; n -= 1) {
    const std::span<const int32_t> tail = context.subspan(len - n);
    // The most recent earlier occurrence: starts below len - n, so it is not the tail itself.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(k, len - from);
      out.tokens.assign(context.begin() + from, context.begin() + from + take);
      return ok_status();
    }
  }
  return ok_status();
}

ModelDrafter::ModelDrafter(CachedEngine draft, const SamplerConfig& sampling, std::string label)
    : draft_(std::move(draft)), sampler_(sampling), label_(std::move(label)) {}

Result<std::unique_ptr<ModelDrafter>> ModelDrafter::create(const Model& model,
                                                           CacheOptions options,
                                                           const SamplerConfig& sampling,
                                                           std::string label) {
  options.kind = std::string(kSequenceKind);
  options.max_seqs.reset();
  KVCACHE_RETURN_IF_ERROR(check_sampler_config(sampling));
  KVCACHE_ASSIGN_OR_RETURN(CachedEngine built, build_engine(model, options));
  return std::unique_ptr<ModelDrafter>(
      new ModelDrafter(std::move(built), sampling, std::move(label)));
}

Status ModelDrafter::catch_up(std::span<const int32_t> context) {
  CacheControl& cache = draft_.engine->cache();
  // Keep the common prefix, but always feed at least the last id (its logits are needed).
  size_t keep = static_cast<size_t>(
      std::mismatch(fed_.begin(), fed_.end(), context.begin(), context.end()).first -
      fed_.begin());
  keep = std::min(keep, context.size() - 1);
  if (keep < fed_.size()) {
    if (!cache.rewind(draft_.seq, static_cast<int64_t>(keep)).ok()) {
      keep = 0;  // the rings moved past it: start over (rewind to 0 always works)
      KVCACHE_RETURN_IF_ERROR(cache.rewind(draft_.seq, 0));
    }
    fed_.resize(keep);
  }
  const std::span<const int32_t> rest = context.subspan(keep);
  const Status s = prefill_chunks(*draft_.engine, draft_.seq, rest, draft_.setup.step_tokens,
                                  LogitsMode::kLast, logits_);
  const auto held = static_cast<size_t>(cache.pos(draft_.seq));
  fed_.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(
                                                     std::min(held, context.size())));
  return s;
}

Status ModelDrafter::propose(std::span<const int32_t> context, int32_t k, Draft& out) {
  out.clear();
  if (context.empty() || k < 1) return ok_status();
  // No room for the context and k - 1 drafts: offer nothing (the target decodes plainly).
  if (static_cast<int64_t>(context.size()) + k - 1 > draft_.setup.config.capacity)
    return ok_status();
  KVCACHE_RETURN_IF_ERROR_CTX(catch_up(context), "draft model");
  const bool greedy = sampler_.config().temperature <= 0.0f;
  std::vector<int32_t> ids(1, draft_.seq);
  std::vector<int64_t> positions(1);
  for (int32_t i = 0; i < k; ++i) {
    int32_t d = -1;
    if (greedy) {
      d = argmax(logits_.row(0));
    } else {
      out.q.emplace_back();
      sampler_.distribution(logits_.row(0), out.q.back());
      d = sampler_.draw_from(out.q.back());
    }
    out.tokens.push_back(d);
    if (i + 1 == k) break;
    positions[0] = draft_.engine->cache().pos(draft_.seq);
    const Batch b{std::span<const int32_t>(&d, 1), ids, positions};
    KVCACHE_RETURN_IF_ERROR_CTX(draft_.engine->forward(b, LogitsMode::kLast, logits_),
                                "draft model");
    fed_.push_back(d);
  }
  return ok_status();
}

Status check_same_vocabulary(const text::Tokenizer& target, const text::Tokenizer& draft) {
  if (target.n_tokens() != draft.n_tokens())
    return invalid_argument(str_cat("draft vocabulary: it has ", draft.n_tokens(),
                                    " tokens, the target's ", target.n_tokens(),
                                    "; expected the same vocabulary"));
  for (int32_t id = 0; id < target.n_tokens(); ++id) {
    const std::string a = target.piece(id), b = draft.piece(id);
    if (a != b)
      return invalid_argument(str_cat("draft vocabulary: token ", id, " is \"", b,
                                      "\" in the draft's vocabulary and \"", a,
                                      "\" in the target's; expected the same vocabulary"));
  }
  return ok_status();
}

Status check_spec_options(const SpecOptions& o, int64_t step_tokens) {
  if (o.draft_max < 1 || o.draft_max + 1 > step_tokens)
    return invalid_argument(str_cat(
        "speculative: draft_max = ", o.draft_max, ", expected 1..", step_tokens - 1,
        " (a verification step is draft_max + 1 tokens and the cache's step width, max_write, "
        "is ", step_tokens, ")"));
  return ok_status();
}

AdaptiveK::AdaptiveK(const SpecOptions& options) : options_(options), k_(options.draft_max) {}

void AdaptiveK::observe(int32_t drafted, int32_t accepted) {
  if (!options_.adaptive) return;
  if (drafted < 1) {  // nothing verified: only a session resting at K = 0 counts the step
    if (k_ == 0 && ++plain_ >= kProbeAfter) {
      k_ = 1;
      plain_ = 0;
    }
    return;
  }
  rate_ = 0.75 * rate_ + 0.25 * static_cast<double>(accepted) / static_cast<double>(drafted);
  if (accepted == drafted) k_ = std::min(k_ + 1, options_.draft_max);
  else if (accepted == 0 || rate_ < 0.5) k_ /= 2;
  plain_ = 0;
}

Verdict accept_drafts(const Logits& logits, const Draft& draft, Sampler& sampler, size_t first) {
  auto row = [&](int32_t i) { return logits.row(first + static_cast<size_t>(i)); };
  Verdict v;
  const auto n = static_cast<int32_t>(draft.tokens.size());
  if (sampler.config().temperature <= 0.0f) {
    while (v.accepted < n && draft.tokens[v.accepted] == argmax(row(v.accepted)))
      ++v.accepted;
    v.next = argmax(row(v.accepted));
    return v;
  }
  std::vector<double> p;
  for (; v.accepted < n; ++v.accepted) {
    const int32_t x = draft.tokens[v.accepted];
    sampler.distribution(row(v.accepted), p);
    const double qx = draft.q.empty() ? 1.0 : draft.q[v.accepted][x];
    // min(1, p/q) as a comparison: u < p/q  <=>  u * q < p (q > 0 for a drawn token).
    if (sampler.uniform() * qx < p[x]) continue;
    if (draft.q.empty()) {
      p[x] = 0.0;  // max(0, p - onehot(x))
    } else {
      const std::vector<double>& q = draft.q[v.accepted];
      for (size_t i = 0; i < p.size(); ++i) p[i] = std::max(0.0, p[i] - q[i]);
    }
    v.next = sampler.draw_from(p);
    if (v.next < 0) v.next = x;  // p == q to rounding: nothing left to redistribute
    return v;
  }
  v.next = sampler.sample(row(v.accepted));
  return v;
}

}  // namespace kvcache::engine
