// Prefill products (T > kSmallBatch) of Q8_0 weights as an integer GEMM: every row of X is
// quantized to int8 blocks of 32 as quantize_activations does, block dot products are exact
// int32 sums, each scaled in f32 by (weight scale x activation scale). Layer: kernels. An
// AVX-512 VNNI kernel (rows packed 16 to a vector), an AVX2 one (vpmaddubsw + vpmaddwd, rows
// packed 8 to a vector) and the scalar reference both are tested against bitwise; other types
// keep matmul's decoded-tile sgemm (weight.cpp), and so does a CPU without AVX2+FMA+F16C.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/attention.h"
#include "kernels/weight.h"

namespace kvcache::engine {

// Whether q8_gemm has a kernel for w on `isa` (kAuto = the level matvec runs, cpu/isa.h's
// kInt8Dot family under the ceilings): Q8_0 weights at the AVX-512 VNNI or the AVX2 level.
// Measured on 2 Zen 4 cores (kvcache_quant_bench BM_PrefillProduct, a 512 x 768 -> 2048
// product): VNNI ~2.8x the multiply-adds per second of f32 tiles + sgemm, which stay the path
// at the scalar level.
bool q8_gemm_available(const Weight& w, cpu::Isa isa = cpu::Isa::kAuto);

// Y[t, w.rows] = X[t, w.cols] W^T (+ Y when accumulate), w Q8_0. y[j, r] sums, block by
// block in column order, fma(float(int dot), d_w * d_x, acc): bitwise q8_gemm_reference.
// Requires q8_gemm_available(w, isa). Rows and the quantization are shared over
// cpu::global_pool().
void q8_gemm(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
             cpu::Isa isa = cpu::Isa::kAuto);

// The same sums one (token, row) at a time, single-threaded: the readable form.
void q8_gemm_reference(const Weight& w, const float* x, float* y, int64_t t, bool accumulate);

namespace quant_detail {
// X quantized for the GEMM, q and d[j * blocks + b] exactly what quantize_activations gives
// row j, in the form the level's kernel reads: xu[j * cols + c] = q + 128 (unsigned, for
// vpdpbusd; AVX-512) or the byte of q itself (AVX2, which signs it by the weight's sign).
struct Q8GemmActs {
  int64_t t = 0, cols = 0, blocks = 0;
  std::vector<uint8_t> xu;
  std::vector<float> d;
};
// Fills rows [j0, j1) of `a` (sized by the caller) from x.
using Q8QuantizeFn = void (*)(const float* x, int64_t j0, int64_t j1, Q8GemmActs& a);
// y[j * w.rows + r] for weight rows [r0, r1) and every row j of `a`.
using Q8GemmRowsFn = void (*)(const Weight& w, int64_t r0, int64_t r1, const Q8GemmActs& a,
                              float* y, bool accumulate);
Q8QuantizeFn avx512_q8_quantize();  // nullptr without the AVX-512 build
Q8GemmRowsFn avx512_q8_gemm_rows();
Q8QuantizeFn avx2_q8_quantize();  // nullptr off x86-64
Q8GemmRowsFn avx2_q8_gemm_rows();
}  // namespace quant_detail

}  // namespace kvcache::engine
