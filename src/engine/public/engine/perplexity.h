// What a perplexity run computes per position: the log-softmax of a logits row, the KL
// divergence between two next-token distributions, and the scoring of one window of tokens
// through the cache (prefill from an empty sequence, logits for the scored part); the top-1
// token is sampler.h's argmax. Layer: engine. It reads no files and prints nothing: the window split, the baseline
// file and the report are the perplexity tool's (tools/cmd_perplexity.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/status.h"
#include "engine/forward.h"

namespace kvcache::engine {

// out[i] = x[i] - log(sum_j exp(x[j])), the sum taken in double around the row's maximum.
// InvalidArgument when the sizes differ or the row is empty; `out` may alias `logits`.
Status log_softmax(std::span<const float> logits, std::span<float> out);

// KL(p || q) = sum_i p_i (log p_i - log q_i) in nats, from log-probabilities (log_softmax
// rows of equal size), accumulated in double. Terms with p_i = 0 add nothing. >= 0 up to
// rounding; +inf when q gives 0 where p does not.
double kl_divergence(std::span<const float> log_p, std::span<const float> log_q);

// Called per scored token: `pos` is its index in the window, `log_probs` the log-softmax of
// the logits at pos - 1 (the distribution that predicted it). Valid for the call only.
using ScoredToken = std::function<void(int64_t pos, std::span<const float> log_probs)>;

// Runs `window` from an empty sequence `seq` (rewound to 0 first) through engine.forward in
// chunks of step_tokens (prefill_chunks) and calls on_token for every token at index
// [first, window.size()), in order. Logits are computed only for positions >= first - 1.
// InvalidArgument when first < 1 or first >= window.size(); the forward's errors otherwise.
// The sequence holds the window afterwards.
Status score_window(Engine& engine, int32_t seq, std::span<const int32_t> window,
                    int64_t step_tokens, int64_t first, const ScoredToken& on_token);

}  // namespace kvcache::engine
