// Picks the next token from a row of logits: greedy (temperature 0) or sampled with
// temperature, top-k and top-p, optionally only among allowed tokens (a mask some caller
// computed, e.g. a grammar's). Layer: engine. Reproducible for a seed (std::mt19937_64).
// It does not know why a token is allowed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvcache::engine {

struct SamplerConfig {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties); else > 0
  int32_t top_k = 0;         // 0 = all tokens
  float top_p = 1.0f;        // (0, 1]; smallest set whose probability reaches top_p
  uint64_t seed = 0;
};

// InvalidArgument naming the field ("temperature", "top_k", "top_p") when a value is NaN,
// infinite or out of its range (temperature in [0, 1e4], top_k >= 0, top_p in (0, 1]).
Status check_sampler_config(const SamplerConfig& config);

// Not thread-safe (owns the random engine).
class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);
  int32_t sample(std::span<const float> logits);
  // As sample(), over only the tokens whose bit is set in `allowed` (bit id % 64 of word
  // id / 64; ceil(vocab / 64) words; empty = every token): the others count as -infinity
  // before top-k/top-p. -1 when no token is allowed (nothing drawn).
  int32_t sample(std::span<const float> logits, std::span<const uint64_t> allowed);
  const SamplerConfig& config() const { return config_; }

  // What sample() draws from, as probabilities by id (size = vocabulary, sums to 1): one-hot
  // at argmax when greedy, else softmax(l / T) cut by top-k and top-p and renormalized.
  // Speculative decoding compares these (engine/speculative.h). Draws nothing.
  void distribution(std::span<const float> logits, std::vector<double>& p);
  // One uniform draw in [0, 1) from the sampler's stream.
  double uniform();
  // A draw from `weights` by id (>= 0, not all 0; need not sum to 1): inverse CDF of one
  // uniform(). -1 when every weight is 0.
  int32_t draw_from(std::span<const double> weights);

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
  std::vector<float> masked_;  // the logits with disallowed tokens at -infinity
  int32_t draw(std::span<const float> logits, int32_t limit);
  // Fills order_/probs_ (unnormalized, highest first) for a sampled draw; returns how many
  // are kept and sets `sum` to their total.
  int32_t weigh(std::span<const float> logits, int32_t limit, double& sum);
};

int32_t argmax(std::span<const float> logits);

// The log-probability of a drawn token and of the `top` most likely tokens, for an API's
// logprobs: log-softmax of logits / t over the allowed tokens (mask as Sampler::sample; empty =
// all), where t is the temperature, or 1 for greedy (temperature 0 samples from no spread,
// so the model's own distribution is reported). Before top-k / top-p: a token they cut still
// has its probability. `top` alternatives highest first, ties by lower id; disallowed tokens
// never appear.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob)
};
TokenLogprob token_logprob(std::span<const float> logits, std::span<const uint64_t> allowed,
                           float temperature, int32_t token, int32_t top);

// The first `keep` token ids in sampling order: highest logit first, ties by lower id (-0 and
// +0 are one value). The whole vocabulary (keep close to its size, e.g. top_k = 0) is ordered
// by a stable radix sort over the logits' order-preserving bit patterns — linear, where a
// comparison sort of a 32K vocabulary cost milliseconds per sampled token; a short top-k by a
// partial sort. `order` is resized to the vocabulary; its first `keep` entries are the result.
void order_by_logit(std::span<const float> logits, int32_t keep, std::vector<int32_t>& order);
// The readable form: std::partial_sort with the comparison above (tests compare the two).
void order_by_logit_reference(std::span<const float> logits, int32_t keep,
                              std::vector<int32_t>& order);

}  // namespace kvcache::engine
