// Prefill products (T > kSmallBatch) of block-type weights as an integer GEMM: every row of X
// is quantized to int8 blocks of 32 as quantize_activations does, each weight sub-block of 32
// is taken in integer form (quant_matvec.h's IntBlock), block dot products are exact int32
// sums, each scaled in f32. Layer: kernels. Kernels: AVX-512 VNNI for Q8_0 and MXFP4 (rows
// packed 16 to a vector), AVX2 for every block type (vpmaddubsw + vpmaddwd, rows packed 8 to a
// vector), both tested bitwise against the scalar reference; other cases keep matmul's
// decoded-tile sgemm (weight.cpp). It does not handle F32/F16/BF16 weights.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/attention.h"
#include "kernels/weight.h"

namespace kvcache::kernels {

// Whether q8_gemm has a kernel for w on `isa` (kAuto = the level matvec runs, cpu/isa.h's
// kInt8Dot family under the ceilings): Q8_0 and MXFP4 at AVX-512 VNNI; every block type
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4) at AVX2. Measured on 2 Zen 4 cores
// (kvcache_quant_bench BM_PrefillProduct, a 512 x 768 -> 2048 product): VNNI ~2.8x the
// multiply-adds per second of f32 tiles + sgemm; the AVX2 kernel ~1.45x OpenBLAS's Haswell
// sgemm alone (CPU time).
bool q8_gemm_available(const Weight& w, cpu::Isa isa = cpu::Isa::kAuto);

// Y[t, w.rows] = X[t, w.cols] W^T (+ Y when accumulate), w a block type. y[j, r] sums, sub-block
// by sub-block in column order, with IntBlock {w, s, c} of the weight and (q, d_x) of the
// activation: acc = fma(float(dot of all 32), s[0] * d_x, acc) — or, for Q6_K whose halves
// have their own scales, the same with the first 16 and s[0], then the last 16 and s[1] —
// then, for types with an offset (Q4_1, Q5_1, Q4_K, Q5_K), acc = fma(float(sum of q), c * d_x,
// acc). Bitwise q8_gemm_reference. Requires q8_gemm_available(w, isa). Rows and the
// quantization are shared over cpu::global_pool().
void q8_gemm(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
             cpu::Isa isa = cpu::Isa::kAuto);

// The same sums one (token, row) at a time, single-threaded: the readable form.
void q8_gemm_reference(const Weight& w, const float* x, float* y, int64_t t, bool accumulate);

namespace detail {
// X quantized for the GEMM, q and d[j * blocks + b] exactly what quantize_activations gives
// row j, in the form the level's kernel reads: xu[j * cols + c] = q + 128 (unsigned, for
// vpdpbusd; AVX-512) or the byte of q itself (AVX2, which signs it by the weight's sign).
// sum[j * blocks + b] = the block's sum of q, filled only for types with an offset.
struct Q8GemmActs {
  int64_t t = 0, cols = 0, blocks = 0;
  std::vector<uint8_t> xu;
  std::vector<float> d;
  std::vector<int32_t> sum;
};
// How a type's sub-blocks are scaled (q8_gemm's order): s[1] apart from s[0]; an offset c.
struct IntGemmForm {
  bool split = false, offset = false;
};
IntGemmForm int_gemm_form(gguf::TensorType type);
// The AVX2 kernel's bias for a type whose codes are signed but few: it multiplies the
// unsigned codes w + bias (vpmaddubsw takes them as they are, no sign step) and takes
// bias x the activation block's sum back off the int32 dot, which stays exact. 8 for Q4_0,
// 16 for Q5_0, 12 for MXFP4 (doubled E2M1, |w| <= 12); 0 for the others (Q8_0's codes span
// the whole byte; the offset types have no negative codes; Q6_K's halves have no sums).
int avx2_code_bias(gguf::TensorType type);
// Fills rows [j0, j1) of `a` (sized by the caller) from x.
using Q8QuantizeFn = void (*)(const float* x, int64_t j0, int64_t j1, Q8GemmActs& a);
// y[j * w.rows + r] for weight rows [r0, r1) and every row j of `a`.
using Q8GemmRowsFn = void (*)(const Weight& w, int64_t r0, int64_t r1, const Q8GemmActs& a,
                              float* y, bool accumulate);
Q8QuantizeFn avx512_q8_quantize();  // nullptr without the AVX-512 build
Q8GemmRowsFn avx512_q8_gemm_rows();
Q8QuantizeFn avx2_q8_quantize();  // nullptr off x86-64
Q8GemmRowsFn avx2_q8_gemm_rows();
}  // namespace detail

}  // namespace kvcache::kernels
