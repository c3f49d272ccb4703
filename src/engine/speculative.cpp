// Drafters and the acceptance rule of speculative decoding. See speculative.h.
#include "engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/str_cat.h"
#include "engine/session.h"

namespace kvcache::engine {

NgramDrafter::NgramDrafter(int32_t max_n) : max_n_(std::clamp(max_n, 1, kMaxNgram)) {}

std::string NgramDrafter::name() const { return str_cat("ngram:", max_n_); }

// Where the ids that followed the most recent earlier occurrence of seq's longest matching
// tail (n = max_n down to 1) start in seq, and how many (at most `want`, up to seq's end);
// none when no tail occurs earlier.
NgramDrafter::Span NgramDrafter::continuation(std::span<const int32_t> seq, int64_t want) const {
  const auto len = static_cast<int64_t>(seq.size());
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= 1; n -= 1) {
    const std::span<const int32_t> tail = seq.subspan(len - n);
    // The most recent earlier occurrence: starts below len - n, so it is not the tail itself.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), seq.begin() + start)) continue;
      const int64_t from = start + n;
      return {from, std::min<int64_t>(want, len - from)};
    }
  }
  return {};
}

Status NgramDrafter::propose(std::span<const int32_t> context, int32_t k, Draft& out) {
  out.clear();
  // A continuation that runs into the end of the conversation (a recent repeat: "x y x y",
  // a run of one id) goes on from the drafts themselves, as the pattern would if they were
  // kept: the conversation plus the drafts so far is matched again, until k or no match.
  seq_.assign(context.begin(), context.end());
  auto want = static_cast<int64_t>(k);
  while (want > 0) {
    const Span next = continuation(seq_, want);
    if (next.count == 0) break;
    for (int64_t i = 0; i < next.count; ++i) {
      const int32_t id = seq_[static_cast<size_t>(next.from + i)];  // a copy: seq_ grows
      out.tokens.push_back(id);
      seq_.push_back(id);
    }
    want -= next.count;
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

bool ModelDrafter::has_room(size_t context, int32_t k) const {
  return static_cast<int64_t>(context) + k - 1 <= draft_.setup.config.capacity;
}

Status ModelDrafter::prepare(std::span<const int32_t> context) {
  if (context.empty() || !has_room(context.size(), 1))
    return ok_status();  // nothing to read, or no room: propose() offers nothing then
  KVCACHE_RETURN_IF_ERROR_CTX(catch_up(context), "draft model");
  return ok_status();
}

Status ModelDrafter::propose(std::span<const int32_t> context, int32_t k, Draft& out) {
  out.clear();
  if (context.empty() || k < 1) return ok_status();
  // No room for the context and k - 1 drafts: offer nothing (the target decodes plainly).
  if (!has_room(context.size(), k)) return ok_status();
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

std::optional<SpecFigures> spec_figures(const SpecStats& st) {
  const int64_t plain_steps = st.steps - st.verify_steps;
  if (st.verify_steps < 1 || plain_steps < 1 || st.plain_seconds <= 0.0) return std::nullopt;
  const double step = st.plain_seconds / double(plain_steps);
  SpecFigures f;
  f.alpha = st.acceptance();
  f.k = double(st.drafted) / double(st.verify_steps);
  f.c = st.draft_seconds / double(st.drafted) / step;
  f.v = st.verify_seconds / double(st.verify_steps) / step;
  // E(k) = (1 - alpha^(k+1)) / (1 - alpha), which tends to k + 1 as alpha tends to 1.
  const double expected =
      f.alpha >= 1.0 ? f.k + 1.0 : (1.0 - std::pow(f.alpha, f.k + 1.0)) / (1.0 - f.alpha);
  f.ideal_speedup = expected / (f.k * f.c + f.v);
  return f;
}

AdaptiveK::AdaptiveK(const SpecOptions& options)
    : options_(options),
      k_(options.adaptive && options.measured_cost ? std::min(kFirstMeasured, options.draft_max)
                                                   : options.draft_max) {}

void AdaptiveK::observe(int32_t drafted, int32_t accepted) {
  if (!options_.adaptive) return;
  if (drafted < 1) {  // nothing verified: only a session resting at K = 0 counts the step
    if (k_ == 0 && ++plain_ >= probe_wait_) {
      k_ = 1;
      plain_ = 0;
      probing_ = timed_;
    }
    return;
  }
  rate_ = 0.75 * rate_ + 0.25 * static_cast<double>(accepted) / static_cast<double>(drafted);
  plain_ = 0;
  if (timed_) {
    constexpr double kDecay = 0.9;  // about the last ten verified steps
    kept_ = kDecay * kept_ + accepted;
    examined_ = kDecay * examined_ + accepted + (accepted < drafted ? 1 : 0);
    k_ = best_k();
    // A probe that finds drafting still not worth it, and whose drafter took longer than a
    // plain step (a draft model catching up), waits twice as long for the next one; and
    // never so little that its loss is more than kProbeLoss of the plain steps between.
    // A drafter that could not pay even with every draft kept is not probed again.
    const bool costly = probe_draft_seconds_ > step_cost(0);
    if (k_ > 0) {
      probe_wait_ = kProbeAfter;
    } else if (hopeless()) {
      probe_wait_ = std::numeric_limits<int32_t>::max();
    } else if (probing_) {
      if (costly) probe_wait_ = std::min(2 * probe_wait_, kMaxProbeWait);
      probe_wait_ = std::max(probe_wait_, wait_for_probe_loss());
    }
    probing_ = false;
    return;
  }
  if (accepted == drafted) k_ = std::min(k_ + 1, options_.draft_max);
  else if (accepted == 0 || rate_ < 0.5) k_ /= 2;
}

void CostByRows::add(int32_t rows, double seconds) {
  if (rows < 1 || !(seconds >= 0.0)) return;
  if (seconds_.size() <= static_cast<size_t>(rows)) seconds_.resize(static_cast<size_t>(rows) + 1);
  double& x = seconds_[static_cast<size_t>(rows)];
  x = x > 0.0 ? 0.8 * x + 0.2 * seconds : seconds;
}

double CostByRows::at(int32_t rows, Unmeasured narrower) const {
  const auto n = static_cast<int32_t>(seconds_.size());
  for (int32_t r = std::min(rows, n - 1); r >= 1; --r) {  // the widest narrower width measured
    const double s = seconds_[static_cast<size_t>(r)];
    if (s > 0.0) return narrower == Unmeasured::kFlat ? s : s * rows / r;
  }
  for (int32_t r = rows + 1; r < n; ++r)  // else a wider one, per row
    if (seconds_[static_cast<size_t>(r)] > 0.0) return seconds_[static_cast<size_t>(r)] * rows / r;
  return 0.0;
}

void AdaptiveK::note_draft_seconds(int32_t drafted, double draft_seconds) {
  timed_ = true;
  // A probe's drafter first catches up on every token of the plain steps before it, and a
  // session's first drafting step on the whole prompt (a draft model prefills it): not what
  // a draft costs while drafting.
  const bool first = drafted > 0 && !drafted_before_;
  drafted_before_ |= drafted > 0;
  if (drafted > 0 && !probing_ && !first)
    draft_cost_ = draft_cost_ > 0.0 ? 0.8 * draft_cost_ + 0.2 * (draft_seconds / drafted)
                                    : draft_seconds / drafted;
  if (probing_) probe_draft_seconds_ = draft_seconds;
}

void AdaptiveK::observe_costs(int32_t drafted, double draft_seconds, int32_t rows,
                              double forward_seconds) {
  if (!options_.adaptive || !options_.measured_cost || rows < 1 ||
      rows > options_.draft_max + 1)
    return;
  forward_.add(rows, forward_seconds);
  step_.clear();
  for (int32_t k = 0; k <= options_.draft_max; ++k) step_.push_back(forward_.at(k + 1));
  others_ = 0.0;
  note_draft_seconds(drafted, draft_seconds);
}

void AdaptiveK::observe_step_costs(int32_t drafted, double draft_seconds, double others,
                                   const CostByRows& steps, int32_t base_rows) {
  if (!options_.adaptive || !options_.measured_cost || base_rows < 1) return;
  step_.clear();
  for (int32_t k = 0; k <= options_.draft_max; ++k)
    step_.push_back(steps.at(base_rows + k, CostByRows::Unmeasured::kPerRow));
  others_ = std::max(0.0, others);
  note_draft_seconds(drafted, draft_seconds);
}

double AdaptiveK::step_cost(int32_t k) const {
  return static_cast<size_t>(k) < step_.size() ? step_[static_cast<size_t>(k)] : 0.0;
}

double AdaptiveK::tokens_per_second(int32_t k) const {
  const double v = step_cost(k);
  if (!timed_ || v <= 0.0) return 0.0;
  const double p = examined_ > 0.0 ? kept_ / examined_ : 1.0;
  double e = 0.0, pi = 1.0;
  for (int32_t i = 0; i <= k; ++i, pi *= p) e += pi;
  return (others_ + e) / (k * draft_cost_ + v);
}

int32_t AdaptiveK::wait_for_probe_loss() const {
  const double plain = step_cost(0);
  if (plain <= 0.0) return kProbeAfter;
  // The probe's price in plain steps, less the plain steps' worth it yields: (S + 1 + p)
  // tokens where a plain step gives S + 1. The drafter is priced at its cost per draft, not
  // at what this probe's took: a draft model's catch-up grows with the wait (the doubling
  // above answers it).
  const double p = examined_ > 0.0 ? kept_ / examined_ : 1.0;
  const double loss = (draft_cost_ + step_cost(1)) / plain - (others_ + 1.0 + p) / (others_ + 1.0);
  if (!(loss > 0.0)) return kProbeAfter;
  const double wait = std::ceil(loss / kProbeLoss);
  return static_cast<int32_t>(std::clamp(wait, double{kProbeAfter}, double{kMaxProbeWait}));
}

bool AdaptiveK::hopeless() const {
  const double plain = step_cost(0);
  if (draft_cost_ <= 0.0 || plain <= 0.0) return false;
  for (int32_t k = 1; k <= options_.draft_max; ++k)
    if ((others_ + k + 1) / (k * draft_cost_ + step_cost(k)) > 1.01 * (others_ + 1) / plain)
      return false;
  return true;
}

int32_t AdaptiveK::best_k() const {
  int32_t best = 0;
  double best_rate = tokens_per_second(0);
  for (int32_t k = 1; k <= options_.draft_max; ++k)
    if (const double r = tokens_per_second(k); r > best_rate * 1.01) best = k, best_rate = r;
  return best;
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
