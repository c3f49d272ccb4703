// The portable chunk worker: the same blocked online softmax as the SIMD versions, in plain
// float loops. Used on CPUs without AVX2 and as a second implementation in the tests.
#include <algorithm>
#include <cmath>

#include "cpu/attention_chunk.h"
#include "cpu/dtype_convert.h"

namespace kvcache::cpu::detail {

namespace {
float element(DType dtype, const std::byte* row, int32_t d) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * d, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * d, 2);
      return f16_to_f32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * d, 2);
      return bf16_to_f32(h);
    }
    default: return 0.0f;  // block types go to chunk_quant_scalar
  }
}
}  // namespace

void chunk_scalar(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch) {
  const KvView& kv = p.kv;
  const int32_t group = p.q_heads / kv.kv_heads;
  const KeySet& keys = p.keys[t];
  const float* q = p.q + (static_cast<int64_t>(t) * p.q_heads + g * group) * kv.head_dim;
  for (int32_t h = 0; h < group; ++h) m[h] = -INFINITY, l[h] = 0.0f;
  std::fill(acc, acc + group * kv.value_dim, 0.0f);
  for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, j1 - jb);
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* k = kv.k_row(g, keys.row(jb + b));
      for (int32_t h = 0; h < group; ++h) {
        float dot = 0.0f;
        for (int32_t d = 0; d < kv.head_dim; ++d)
          dot += q[h * kv.head_dim + d] * element(kv.k_dtype, k, d);
        float s = dot * p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        scratch[h * kKeyBlock + b] = s;
      }
    }
    for (int32_t h = 0; h < group; ++h) {
      float* s = scratch + h * kKeyBlock;
      const float m_new = std::max(m[h], *std::max_element(s, s + nb));
      const float corr = std::exp(m[h] - m_new);
      l[h] *= corr;
      if (corr != 1.0f)
        for (int32_t d = 0; d < kv.value_dim; ++d) acc[h * kv.value_dim + d] *= corr;
      for (int64_t b = 0; b < nb; ++b) l[h] += (s[b] = std::exp(s[b] - m_new));
      m[h] = m_new;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* v = kv.v_row(g, keys.row(jb + b));
      for (int32_t d = 0; d < kv.value_dim; ++d) {
        const float x = element(kv.v_dtype, v, d);
        for (int32_t h = 0; h < group; ++h)
          acc[h * kv.value_dim + d] += scratch[h * kKeyBlock + b] * x;
      }
    }
  }
}

}  // namespace kvcache::cpu::detail
