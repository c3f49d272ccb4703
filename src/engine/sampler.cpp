// Greedy and temperature/top-k/top-p sampling. See sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "core/str_cat.h"

namespace kvcache::engine {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Status check_sampler_config(const SamplerConfig& c) {
  auto bad = [](const char* field, double v, const char* want) {
    return invalid_argument(str_cat("sampler: ", field, " = ", v,
                                    ", expected ", want));
  };
  if (!std::isfinite(c.temperature) || c.temperature < 0.0f || c.temperature > 1e4f)
    return bad("temperature", c.temperature, "a finite number in [0, 10000]");
  if (c.top_k < 0) return bad("top_k", c.top_k, ">= 0");
  if (!std::isfinite(c.top_p) || !(c.top_p > 0.0f) || c.top_p > 1.0f)
    return bad("top_p", c.top_p, "a finite number in (0, 1]");
  return ok_status();
}

namespace {

// Bits of a logit as an unsigned key that sorts descending by value: the float's sign-folded
// pattern (ascending in value) complemented. -0 is taken as +0, so equal logits have equal keys.
uint32_t descending_key(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
  return ~u;
}

// Stable least-significant-digit radix sort of ids 0..n-1 by descending_key, 8 bits a pass:
// ids start ascending, so equal keys stay in id order. Passes whose digit is the same for
// every id are skipped.
void radix_order(std::span<const float> logits, std::vector<int32_t>& order) {
  const size_t n = logits.size();
  thread_local std::vector<uint32_t> keys, keys2;
  thread_local std::vector<int32_t> ids2;
  keys.resize(n);
  keys2.resize(n);
  ids2.resize(n);
  order.resize(n);
  size_t count[4][256] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = descending_key(logits[i]);
    keys[i] = k;
    order[i] = static_cast<int32_t>(i);
    for (int d = 0; d < 4; ++d) ++count[d][(k >> (8 * d)) & 0xFF];
  }
  for (int d = 0; d < 4; ++d) {
    const uint32_t first = (keys[0] >> (8 * d)) & 0xFF;
    if (count[d][first] == n) continue;  // one digit value: the pass would move nothing
    size_t at = 0;
    for (size_t& c : count[d]) {
      const size_t here = c;
      c = at;
      at += here;
    }
    for (size_t i = 0; i < n; ++i) {
      const size_t to = count[d][(keys[i] >> (8 * d)) & 0xFF]++;
      keys2[to] = keys[i];
      ids2[to] = order[i];
    }
    keys.swap(keys2);
    order.swap(ids2);
  }
}

}  // namespace

void order_by_logit_reference(std::span<const float> logits, int32_t keep,
                              std::vector<int32_t>& order) {
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
}

void order_by_logit(std::span<const float> logits, int32_t keep, std::vector<int32_t>& order) {
  // A partial sort costs about n log(keep) comparisons; the radix sort 5 linear passes.
  if (static_cast<size_t>(keep) * 64 < logits.size())
    return order_by_logit_reference(logits, keep, order);
  radix_order(logits, order);
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  return draw(logits, static_cast<int32_t>(logits.size()));
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const uint64_t> allowed) {
  if (allowed.empty()) return sample(logits);
  masked_.assign(logits.begin(), logits.end());
  int32_t n_allowed = 0;
  for (size_t i = 0; i < masked_.size(); ++i) {
    const bool ok = (i >> 6) < allowed.size() && ((allowed[i >> 6] >> (i & 63)) & 1) != 0;
    if (ok) ++n_allowed;
    else masked_[i] = -std::numeric_limits<float>::infinity();
  }
  if (n_allowed == 0) return -1;
  return draw(masked_, n_allowed);
}

// `limit`: how many tokens can be drawn at all (the rest are -infinity and sort last).
int32_t Sampler::weigh(std::span<const float> logits, int32_t limit, double& sum) {
  const auto n = static_cast<int32_t>(logits.size());
  int32_t keep = std::min(limit, config_.top_k > 0 ? std::min(config_.top_k, n) : n);
  // Highest logit first; ties by lower id so the order is deterministic.
  order_by_logit(logits, keep, order_);
  probs_.resize(keep);
  const double mx = logits[order_[0]];
  sum = 0.0;
  for (int32_t i = 0; i < keep; ++i)
    sum += (probs_[i] = std::exp((logits[order_[i]] - mx) / config_.temperature));
  if (config_.top_p < 1.0f) {
    double acc = 0.0;
    int32_t cut = keep;
    for (int32_t i = 0; i < keep; ++i) {
      acc += probs_[i] / sum;
      if (acc >= config_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  }
  return keep;
}

int32_t Sampler::draw(std::span<const float> logits, int32_t limit) {
  if (config_.temperature <= 0.0f || logits.size() <= 1 || limit == 1) return argmax(logits);
  double sum = 0.0;
  const int32_t keep = weigh(logits, limit, sum);
  // Inverse-CDF draw from one 53-bit uniform: the same seed gives the same tokens everywhere.
  const double u = uniform() * sum;
  double acc = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_[keep - 1];
}

void Sampler::distribution(std::span<const float> logits, std::vector<double>& p) {
  p.assign(logits.size(), 0.0);
  if (logits.empty()) return;
  if (config_.temperature <= 0.0f || logits.size() == 1) {
    p[argmax(logits)] = 1.0;
    return;
  }
  double sum = 0.0;
  const int32_t keep = weigh(logits, static_cast<int32_t>(logits.size()), sum);
  for (int32_t i = 0; i < keep; ++i) p[order_[i]] = probs_[i] / sum;
}

double Sampler::uniform() { return std::generate_canonical<double, 53>(rng_); }

int32_t Sampler::draw_from(std::span<const double> weights) {
  double sum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0.0) sum += weights[i], last = static_cast<int32_t>(i);
  if (last < 0) return -1;
  const double u = uniform() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    acc += weights[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return last;
}

TokenLogprob token_logprob(std::span<const float> logits, std::span<const uint64_t> allowed,
                           float temperature, int32_t token, int32_t top) {
  const double t = temperature > 0.0f ? temperature : 1.0;
  auto ok = [&](size_t i) {
    return allowed.empty() || ((i >> 6) < allowed.size() && ((allowed[i >> 6] >> (i & 63)) & 1));
  };
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i)
    if (ok(i)) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (ok(i)) sum += std::exp((logits[i] - mx) / t);
  const double log_z = mx / t + std::log(sum);
  auto lp = [&](int32_t id) { return static_cast<float>(logits[id] / t - log_z); };
  TokenLogprob out;
  out.token = token;
  out.logprob = token >= 0 && static_cast<size_t>(token) < logits.size() && ok(token)
                    ? lp(token)
                    : -std::numeric_limits<float>::infinity();
  if (top <= 0) return out;
  std::vector<float> masked(logits.begin(), logits.end());
  int32_t n_allowed = 0;
  for (size_t i = 0; i < masked.size(); ++i) {
    if (ok(i)) ++n_allowed;
    else masked[i] = -std::numeric_limits<float>::infinity();
  }
  std::vector<int32_t> order;
  const int32_t keep = std::min(top, n_allowed);
  order_by_logit(masked, keep, order);
  for (int32_t i = 0; i < keep; ++i) out.top.emplace_back(order[i], lp(order[i]));
  return out;
}

}  // namespace kvcache::engine
