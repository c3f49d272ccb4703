// The Q8_0 integer GEMM's dispatch and its scalar reference. See quant_gemm.h.
#include "kernels/quant_gemm.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "cpu/thread_pool.h"
#include "kernels/quant_matvec.h"
#include "core/half.h"

namespace kvcache::engine {

namespace {
constexpr int64_t kBlockBytes = 34;  // Q8_0: an f16 scale, then 32 int8 values
constexpr int64_t kRowTile = 32;     // weight rows per task (two AVX-512 / four AVX2 panels)
constexpr int64_t kTokenTile = 16;   // activation rows quantized per task

struct Q8GemmKernel {
  quant_detail::Q8QuantizeFn quantize = nullptr;
  quant_detail::Q8GemmRowsFn rows = nullptr;
};
// The kernel of `isa` (kAuto: the level matvec runs); empty when that level has none here.
Q8GemmKernel q8_gemm_kernel(cpu::Isa isa) {
  if (isa == cpu::Isa::kAuto) isa = matvec_best_isa();
  if (isa == cpu::Isa::kScalar || !matvec_isa_supported(isa)) return {};
  if (isa == cpu::Isa::kAvx512)
    return {quant_detail::avx512_q8_quantize(), quant_detail::avx512_q8_gemm_rows()};
  return {quant_detail::avx2_q8_quantize(), quant_detail::avx2_q8_gemm_rows()};
}
}  // namespace

bool q8_gemm_available(const Weight& w, cpu::Isa isa) {
  return w.type == gguf::TensorType::kQ8_0 && q8_gemm_kernel(isa).rows != nullptr;
}

void q8_gemm(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
             cpu::Isa isa) {
  if (w.rows == 0 || t <= 0) return;
  assert(q8_gemm_available(w, isa));
  const Q8GemmKernel kernel = q8_gemm_kernel(isa);
  const quant_detail::Q8QuantizeFn quantize = kernel.quantize;
  const quant_detail::Q8GemmRowsFn rows = kernel.rows;
  thread_local quant_detail::Q8GemmActs acts;
  quant_detail::Q8GemmActs& a = acts;  // the workers use the caller's thread_local, by reference
  a.t = t;
  a.cols = w.cols;
  a.blocks = w.cols / 32;
  a.xu.resize(static_cast<size_t>(t * w.cols));
  a.d.resize(static_cast<size_t>(t * a.blocks));
  cpu::ThreadPool& pool = cpu::global_pool();
  pool.run_tasks((t + kTokenTile - 1) / kTokenTile, [&](int64_t i) {
    quantize(x, i * kTokenTile, std::min(t, (i + 1) * kTokenTile), a);
  });
  pool.run_tasks((w.rows + kRowTile - 1) / kRowTile, [&](int64_t i) {
    rows(w, i * kRowTile, std::min(w.rows, (i + 1) * kRowTile), a, y, accumulate);
  });
}

void q8_gemm_reference(const Weight& w, const float* x, float* y, int64_t t, bool accumulate) {
  Q8Activations a;
  for (int64_t j = 0; j < t; ++j) {
    quantize_activations(x + j * w.cols, w.cols, a);
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = w.row_data(r);
      float acc = 0.0f;
      for (int64_t b = 0; b < a.blocks; ++b) {
        const uint8_t* blk = row + b * kBlockBytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l)
          dot += int32_t{static_cast<int8_t>(blk[2 + l])} * a.q[static_cast<size_t>(32 * b + l)];
        acc = std::fma(static_cast<float>(dot), kvcache::f16_to_f32(h) * a.d[b], acc);
      }
      float& out = y[j * w.rows + r];
      out = accumulate ? out + acc : acc;
    }
  }
}

}  // namespace kvcache::engine
