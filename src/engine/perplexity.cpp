// Log-softmax, KL divergence and window scoring. See perplexity.h.
#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/str_cat.h"
#include "engine/session.h"

namespace kvcache::engine {

Status log_softmax(std::span<const float> logits, std::span<float> out) {
  if (logits.empty() || logits.size() != out.size())
    return invalid_argument(str_cat("log_softmax: ", logits.size(), " logits into ", out.size(),
                                    " outputs, expected equal non-zero sizes"));
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_z);
  return ok_status();
}

double kl_divergence(std::span<const float> log_p, std::span<const float> log_q) {
  double kl = 0.0;
  const size_t n = std::min(log_p.size(), log_q.size());
  for (size_t i = 0; i < n; ++i) {
    const double p = std::exp(static_cast<double>(log_p[i]));
    if (p == 0.0) continue;  // 0 log 0 = 0, also against a q of 0
    kl += p * (static_cast<double>(log_p[i]) - static_cast<double>(log_q[i]));
  }
  return kl;
}

Status score_window(Engine& engine, int32_t seq, std::span<const int32_t> window,
                    int64_t step_tokens, int64_t first, const ScoredToken& on_token) {
  const auto n = static_cast<int64_t>(window.size());
  if (first < 1 || first >= n)
    return invalid_argument(str_cat("score_window: first = ", first, " of a ", n,
                                    "-token window, expected [1, ", n, ")"));
  KVCACHE_RETURN_IF_ERROR(engine.cache().rewind(seq, 0));
  Logits out;
  // Context only: no row is scored before position first - 1.
  KVCACHE_RETURN_IF_ERROR(prefill_chunks(engine, seq, window.first(first - 1), step_tokens,
                                         LogitsMode::kLast, out));
  std::vector<float> log_probs;
  Status bad = ok_status();
  int64_t pos = first;  // the token the next row predicts
  auto score = [&](const Logits& chunk) {
    log_probs.resize(static_cast<size_t>(chunk.vocab));
    for (size_t r = 0; r < chunk.rows() && bad.ok(); ++r) {
      if (pos < n) bad = log_softmax(chunk.row(r), log_probs);
      if (pos < n && bad.ok()) on_token(pos, log_probs);
      ++pos;  // the window's last row predicts past it: not scored
    }
  };
  KVCACHE_RETURN_IF_ERROR(prefill_chunks(engine, seq, window.subspan(first - 1), step_tokens,
                                         LogitsMode::kAll, out, score));
  return bad;
}

}  // namespace kvcache::engine
