// The reference kernel: written for reading, not speed. Every logit and sum in double.
#include <cmath>
#include <vector>

#include "cpu/attention.h"
#include "cpu/dtype_convert.h"

namespace kvcache::cpu {

void attend_reference(const AttentionProblem& p) {
  const KvView& kv = p.kv;
  const int32_t group = p.q_heads / kv.kv_heads;
  std::vector<float> k_row(kv.head_dim), v_row(kv.value_dim);
  std::vector<double> logits, acc(kv.value_dim);
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const KeySet& keys = p.keys[t];
    for (int32_t h = 0; h < p.q_heads; ++h) {
      const int32_t g = h / group;
      const float* q = p.q + (static_cast<int64_t>(t) * p.q_heads + h) * kv.head_dim;
      // Pass 1: logits and their maximum.
      logits.assign(static_cast<size_t>(keys.size()), 0.0);
      double max_logit = -INFINITY;
      for (int64_t j = 0; j < keys.size(); ++j) {
        load_row(kv.k_dtype, kv.k_row(g, keys.row(j)), k_row.data(), kv.head_dim);
        double dot = 0.0;
        for (int32_t d = 0; d < kv.head_dim; ++d) dot += double(q[d]) * double(k_row[d]);
        double s = dot * double(p.scale);
        if (p.softcap > 0.0f) s = double(p.softcap) * std::tanh(s / double(p.softcap));
        logits[j] = s;
        max_logit = std::max(max_logit, s);
      }
      // The sink (when the layer has one) joins the maximum and the denominator, not the sum.
      const bool sink = p.sinks != nullptr;
      if (sink) max_logit = std::max(max_logit, double(p.sinks[h]));
      // Pass 2: normalized weights times values.
      double denom = sink ? std::exp(double(p.sinks[h]) - max_logit) : 0.0;
      for (double& s : logits) denom += (s = std::exp(s - max_logit));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < keys.size(); ++j) {
        load_row(kv.v_dtype, kv.v_row(g, keys.row(j)), v_row.data(), kv.value_dim);
        for (int32_t d = 0; d < kv.value_dim; ++d) acc[d] += logits[j] * double(v_row[d]);
      }
      float* out = p.out + (static_cast<int64_t>(t) * p.q_heads + h) * kv.value_dim;
      for (int32_t d = 0; d < kv.value_dim; ++d) out[d] = static_cast<float>(acc[d] / denom);
    }
  }
}

}  // namespace kvcache::cpu
