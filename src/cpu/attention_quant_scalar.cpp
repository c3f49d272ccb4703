// The portable quantized-K/V chunk worker (attention_quant.h) in plain loops: integer block
// dot products for block keys, each value row widened once (load_row) and added per head.
// Runs on CPUs without AVX2 and is the SIMD versions' second implementation in the tests.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attention_quant.h"

namespace kvcache::cpu::detail {
namespace {

struct ScalarOps {
  static void prepare(const QueryBlocks&, const KvView&, int32_t) {}
  static void logits(const KvView& kv, const std::byte* k, QueryBlocks& qb, const float* q,
                     int32_t group, float scale, float* s) {
    logits_key_scalar(kv, k, qb, q, group, scale, s);
  }
  static void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t jb,
                           int64_t nb, int64_t j1, QueryBlocks& qb, const float* q, float* s,
                           const std::byte** rows) {
    logits_by_key<ScalarOps>(p, keys, g, jb, nb, j1, qb, q, s, rows);
  }
  static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
    const float m_new = std::max(m, *std::max_element(s, s + nb));
    const float corr = std::exp(m - m_new);
    l *= corr;
    if (corr != 1.0f)
      for (int32_t d = 0; d < dv; ++d) acc[d] *= corr;
    for (int64_t b = 0; b < nb; ++b) l += (s[b] = std::exp(s[b] - m_new));
    m = m_new;
  }
  static void values(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const float* w, float* acc) {
    if (is_block_type(kv.v_dtype)) {
      ValueCodes& vc = thread_value_codes();
      value_codes_reference(kv, rows, nb, group, w, vc);
      return values_int_reference(kv, rows, nb, group, vc, acc);
    }
    const int32_t dv = kv.value_dim;
    thread_local std::vector<float> vf;
    vf.resize(static_cast<size_t>(dv));
    for (int64_t b = 0; b < nb; ++b) {
      load_row(kv.v_dtype, rows[b], vf.data(), dv);
      for (int32_t h = 0; h < group; ++h) {
        const float wb = w[h * kKeyBlock + b];
        float* a = acc + int64_t{h} * dv;
        for (int32_t d = 0; d < dv; ++d) a[d] += wb * vf[d];
      }
    }
  }
};

}  // namespace

void chunk_quant_scalar(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                        int64_t j1, float* m, float* l, float* acc, float* scratch) {
  quant_chunk<ScalarOps>(p, t, g, j0, j1, m, l, acc, scratch);
}

}  // namespace kvcache::cpu::detail
