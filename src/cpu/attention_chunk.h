// Internal to the cpu kernels: the per-(token, kv head, key range) worker every instruction
// set implements. It visits keys [j0, j1) of token t's KeySet for the q heads of kv head g
// together and leaves the unnormalized online-softmax state: m[G] running max of the logits,
// l[G] sum of exp(logit - m), acc[G * value_dim] sum of exp(logit - m) * v.
#pragma once

#include <cstdint>

#include "cpu/attention.h"

namespace kvcache::cpu::detail {

inline constexpr int64_t kKeyBlock = 32;  // keys whose logits are computed before one rescale
// The SIMD workers ask for each key's K and V rows this many keys before they reach them.
inline constexpr int64_t kPrefetchKeys = 32;

// scratch holds at least G * kKeyBlock floats.
using ChunkFn = void (*)(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                         int64_t j1, float* m, float* l, float* acc, float* scratch);

void chunk_scalar(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch);
void chunk_avx2(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                float* m, float* l, float* acc, float* scratch);
void chunk_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch);

}  // namespace kvcache::cpu::detail
