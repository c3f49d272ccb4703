// The integer GEMM's dispatch and its scalar reference. See quant_gemm.h.
#include "kernels/quant_gemm.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "cpu/thread_pool.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "core/half.h"

namespace kvcache::kernels {

namespace {
constexpr int64_t kRowTile = 32;     // weight rows per task (two AVX-512 / four AVX2 panels)
constexpr int64_t kTokenTile = 16;   // activation rows quantized per task

struct Q8GemmKernel {
  detail::Q8QuantizeFn quantize = nullptr;
  detail::Q8GemmRowsFn rows = nullptr;
};
// The kernel of `isa` (kAuto: the level matvec runs); empty when that level has none here.
Q8GemmKernel q8_gemm_kernel(cpu::Isa isa) {
  if (isa == cpu::Isa::kAuto) isa = matvec_best_isa();
  if (isa == cpu::Isa::kScalar || !matvec_isa_supported(isa)) return {};
  if (isa == cpu::Isa::kAvx512)
    return {detail::avx512_q8_quantize(), detail::avx512_q8_gemm_rows()};
  return {detail::avx2_q8_quantize(), detail::avx2_q8_gemm_rows()};
}

bool is_int_block_type(gguf::TensorType type) {
  using T = gguf::TensorType;
  for (T b : {T::kQ4_0, T::kQ4_1, T::kQ5_0, T::kQ5_1, T::kQ8_0, T::kQ4_K, T::kQ5_K, T::kQ6_K,
              T::kMXFP4})
    if (type == b) return true;
  return false;
}
}  // namespace

detail::IntGemmForm detail::int_gemm_form(gguf::TensorType type) {
  using T = gguf::TensorType;
  return {type == T::kQ6_K,
          type == T::kQ4_1 || type == T::kQ5_1 || type == T::kQ4_K || type == T::kQ5_K};
}

int detail::avx2_code_bias(gguf::TensorType type) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kQ4_0: return 8;
    case T::kQ5_0: return 16;
    case T::kMXFP4: return 12;
    default: return 0;
  }
}

namespace {
// The level whose kernel multiplies w at `isa`: AVX-512 VNNI has Q8_0 and MXFP4 kernels;
// every other integer block type runs the AVX2 kernel there too (on this AMD EPYC, Q4_K_M
// prefill of 400 tokens measured 596-623 tok/s through f32 tiles and sgemm, 616-749 through
// the AVX2 integer GEMM).
cpu::Isa gemm_isa(const Weight& w, cpu::Isa isa) {
  if (isa == cpu::Isa::kAuto) isa = matvec_best_isa();
  if (isa == cpu::Isa::kAvx512 && w.type != gguf::TensorType::kQ8_0 &&
      w.type != gguf::TensorType::kMXFP4)
    return cpu::Isa::kAvx2;
  return isa;
}
}  // namespace

bool q8_gemm_available(const Weight& w, cpu::Isa isa) {
  if (isa == cpu::Isa::kAuto) isa = matvec_best_isa();
  if (q8_gemm_kernel(isa).rows == nullptr || !is_int_block_type(w.type)) return false;
  return q8_gemm_kernel(gemm_isa(w, isa)).rows != nullptr;
}

void q8_gemm(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
             cpu::Isa isa) {
  if (w.rows == 0 || t <= 0) return;
  assert(q8_gemm_available(w, isa));
  const cpu::Isa at = gemm_isa(w, isa);
  const Q8GemmKernel kernel = q8_gemm_kernel(at);
  const detail::Q8QuantizeFn quantize = kernel.quantize;
  const detail::Q8GemmRowsFn rows = kernel.rows;
  thread_local detail::Q8GemmActs acts;
  detail::Q8GemmActs& a = acts;  // the workers use the caller's thread_local, by reference
  a.t = t;
  a.cols = w.cols;
  a.blocks = w.cols / 32;
  a.xu.resize(static_cast<size_t>(t * w.cols));
  a.d.resize(static_cast<size_t>(t * a.blocks));
  // The block sums of q, for the offset term or the AVX2 kernel's code bias (AVX2 only:
  // its xu holds q; offset types always run there).
  const bool sums = detail::int_gemm_form(w.type).offset ||
                    (at == cpu::Isa::kAvx2 && detail::avx2_code_bias(w.type) > 0);
  a.sum.resize(sums ? static_cast<size_t>(t * a.blocks) : 0);
  cpu::ThreadPool& pool = cpu::global_pool();
  pool.run_tasks((t + kTokenTile - 1) / kTokenTile, [&](int64_t i) {
    const int64_t j0 = i * kTokenTile, j1 = std::min(t, (i + 1) * kTokenTile);
    quantize(x, j0, j1, a);
    if (!sums) return;
    for (int64_t k = j0 * a.blocks; k < j1 * a.blocks; ++k) {
      int32_t sum = 0;
      for (int l = 0; l < 32; ++l)
        sum += static_cast<int8_t>(a.xu[static_cast<size_t>(32 * k + l)]);
      a.sum[static_cast<size_t>(k)] = sum;
    }
  });
  pool.run_tasks((w.rows + kRowTile - 1) / kRowTile, [&](int64_t i) {
    rows(w, i * kRowTile, std::min(w.rows, (i + 1) * kRowTile), a, y, accumulate);
  });
}

void q8_gemm_reference(const Weight& w, const float* x, float* y, int64_t t, bool accumulate) {
  const gguf::BlockGeometry g = *gguf::block_geometry(w.type);
  const int64_t per_block = g.elements / 32;
  const detail::IntGemmForm form = detail::int_gemm_form(w.type);
  Q8Activations a;
  detail::IntBlock ib;
  for (int64_t j = 0; j < t; ++j) {
    quantize_activations(x + j * w.cols, w.cols, a);
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = w.row_data(r);
      float acc = 0.0f;
      for (int64_t b = 0; b < a.blocks; ++b) {
        detail::int_block(w.type, row + (b / per_block) * g.bytes,
                          static_cast<int>(b % per_block), ib);
        const int8_t* q = a.q.data() + 32 * b;
        int32_t lo = 0, hi = 0, sum = 0;
        for (int l = 0; l < 16; ++l) lo += int32_t{ib.w[l]} * q[l];
        for (int l = 16; l < 32; ++l) hi += int32_t{ib.w[l]} * q[l];
        for (int l = 0; l < 32; ++l) sum += q[l];
        if (form.split) {
          acc = std::fma(static_cast<float>(lo), ib.s[0] * a.d[b], acc);
          acc = std::fma(static_cast<float>(hi), ib.s[1] * a.d[b], acc);
        } else {
          acc = std::fma(static_cast<float>(lo + hi), ib.s[0] * a.d[b], acc);
        }
        if (form.offset) acc = std::fma(static_cast<float>(sum), ib.c * a.d[b], acc);
      }
      float& out = y[j * w.rows + r];
      out = accumulate ? out + acc : acc;
    }
  }
}

}  // namespace kvcache::kernels
