// Matrix-vector products (decode, T = 1) for weights kept in their file format: F16, BF16 and
// the block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4. Layer: kernels. Block
// types quantize the activation to int8 blocks of 32 (one f32 scale each) and take integer dot
// products; a scalar kernel, an AVX2+FMA+F16C one and an AVX-512 VNNI one (256-bit vectors;
// 512-bit for MXFP4) compute the same sums, chosen at run time. matvec_reference is the
// readable form (dequantize, then double dot) everything is tested against. F32 weights go to
// BLAS elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/isa.h"
#include "kernels/weight.h"

namespace kvcache::kernels {

// The activation as int8 blocks of 32: x[32 b + l] ~= d[b] * q[32 b + l], |q| <= 127, and
// sum16[2 b + h] = sum of q over the half [32 b + 16 h, +16) (for offsets and mins), also
// premultiplied by d[b] (dsum16) and whole (dsum[b] = d[b] * sum of the block's q);
// sum4[8 b + k] = sum of q over [32 b + 4 k, +4) (lane k of a SIMD dot product).
// q_pairs: q's whole groups of eight blocks regrouped for kernels that hold the nibbles of
// blocks k and k + 4 in one vector: per group g and k < 4, 64 bytes at 256 g + 64 k: the first
// 16 values of block 8 g + k, of 8 g + k + 4, then the last 16 of each (pair_activations).
struct Q8Activations {
  int64_t blocks = 0;
  std::vector<int8_t> q, q_pairs;
  std::vector<float> d;
  std::vector<int32_t> sum16, sum4;
  std::vector<float> dsum16, dsum;
};
// cols must be a multiple of 32. Vectorized (AVX2) when the ISA ceiling allows it, with the
// same result bit for bit (detail::quantize_activations_scalar is the readable form).
void quantize_activations(const float* x, int64_t cols, Q8Activations& out);

// The matvec kernels are cpu/isa.h's KernelFamily::kInt8Dot (their AVX-512 level needs VNNI);
// these name that family for callers and hold no rule of their own.
inline bool matvec_isa_supported(cpu::Isa isa) {
  return cpu::isa_supported(isa, cpu::KernelFamily::kInt8Dot);
}
inline cpu::Isa matvec_best_isa() { return cpu::best_isa(cpu::KernelFamily::kInt8Dot); }
// The level matvec / matvec_batch(…, isa) run now (never kAuto): the one choice they make.
inline cpu::Isa matvec_isa(cpu::Isa isa = cpu::Isa::kAuto) {
  return cpu::resolve_isa(isa, cpu::KernelFamily::kInt8Dot);
}

// Bytes of weight rows a small-batch product reads for every activation row before moving on
// (they stay in L2).
inline constexpr int64_t kRowChunkBytes = int64_t{64} << 10;
// The least bytes of weight rows a task on the pool reads, where the product allows: each task
// is a new stream for the hardware prefetcher. Work items of 64 KiB decoded the Qwen3-MoE- and
// gpt-oss-shaped files 10-22 % slower than items of 256 KiB, and dense Q4_K_M 12-15 %
// slower in tasks of 41 KB (2 cores, AVX2). row_chunk (weight.h) and matvec's split use it.
inline constexpr int64_t kShareTaskBytes = int64_t{256} << 10;

// y[w.rows] = W x (+ y when accumulate). w.type is not F32. `isa` must be supported (kAuto
// always is); rows are shared over cpu::global_pool() (matvec_batch with t = 1).
void matvec(const Weight& w, const float* x, float* y, bool accumulate,
            cpu::Isa isa = cpu::Isa::kAuto);

// Y[T, w.rows] = X[T, w.cols] W^T (+ Y when accumulate) for a few rows (a batched decode
// step): each chunk of weight rows is read from memory once and applied to every row of X
// while it is in cache, with the same row kernel as matvec — so row j of Y is bitwise what
// matvec gives for row j of X alone, whoever else is in the batch. Ranges of rows are shared
// over cpu::global_pool(), each computed by detail::product_rows.
void matvec_batch(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
                  cpu::Isa isa = cpu::Isa::kAuto);

// Decodes each row to f32 and accumulates in double. Single-threaded.
void matvec_reference(const Weight& w, const float* x, float* y, bool accumulate);

namespace detail {
// One 32-value sub-block of a weight row in integer form: value l = s[l / 16] * w[l] + c.
// Every block type decodes to this shape, so one integer loop serves them all (the scalar
// matvec kernel, the integer GEMM's reference and its panels).
struct IntBlock {
  int8_t w[32] = {};
  float s[2] = {0.0f, 0.0f};
  float c = 0.0f;
};
// Sub-block `sb` (32 values) of the weight block at `b` of a block type.
void int_block(gguf::TensorType type, const uint8_t* b, int sb, IntBlock& o);
// Every sub-block of the block at `b` (elements / 32 of them) into out[0..], each what
// int_block gives; the K types decode their f16 scales once (prefill panels pack whole rows).
void int_blocks(gguf::TensorType type, const uint8_t* b, IntBlock* out);

// One ISA's row kernel: y[r - r0] for rows [r0, r1) from the quantized activation (block
// types) or from x (F16/BF16). Entered only through matvec's dispatch.
using RowKernel = void (*)(const Weight& w, int64_t r0, int64_t r1, const Q8Activations& a,
                           const float* x, float* y, bool accumulate);
RowKernel scalar_kernel(gguf::TensorType type);
// matmul_rows (weight.h) at a given ISA (must be supported; kAuto resolves): the one home of
// the row-range product of non-F32 weights — matvec, matvec_batch and matmul_rows call it.
void product_rows(const Weight& w, const ProductInput& in, int64_t r0, int64_t r1, float* y,
                  bool accumulate, cpu::Isa isa);
// F16/BF16 rows [r0, r1) against t activation rows: y[j * y_stride + r - r0], each bitwise what
// the ISA's RowKernel gives row j alone; nullptr for other types or without the ISA.
using HalfBatchKernel = void (*)(const Weight& w, int64_t r0, int64_t r1, const float* x,
                                 int64_t t, float* y, int64_t y_stride, bool accumulate);
HalfBatchKernel avx2_half_batch(gguf::TensorType type);
HalfBatchKernel avx512_half_batch(gguf::TensorType type);
// Block rows [r0, r1) against n quantized activation rows at once (each row's codes opened
// once for all n): y[j][r - r0] from a[j], each bitwise what the ISA's RowKernel gives that
// activation alone; nullptr for the types (or widths n) without one.
using RowGroupKernel = void (*)(const Weight& w, int64_t r0, int64_t r1,
                                const Q8Activations* const* a, float* const* y, bool accumulate);
RowGroupKernel avx2_group_kernel(gguf::TensorType type, int n);
RowGroupKernel avx512_group_kernel(gguf::TensorType type, int n);
RowKernel avx2_kernel(gguf::TensorType type);
// quantize_activations one value at a time, and the AVX2 form (nullptr without it).
void quantize_activations_scalar(const float* x, int64_t cols, Q8Activations& out);
// Fills out.q_pairs from out.q (both quantizers end with it).
void pair_activations(Q8Activations& out);
using QuantizeFn = void (*)(const float* x, int64_t cols, Q8Activations& out);
QuantizeFn avx2_quantize();
RowKernel avx512_kernel(gguf::TensorType type);
}  // namespace detail

}  // namespace kvcache::kernels
