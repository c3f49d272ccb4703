// The AVX2+FMA+F16C build of the matrix-vector row kernels (quant_matvec_simd.inc): integer dot
// products by maddubs/madd. Entered only through matvec's run-time dispatch. All headers are
// included before the target pragma so nothing shared is compiled for AVX2.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/simd_target.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::engine {
namespace {

// u8 x s8 products summed in groups of four bytes into int32 lanes (|sum| < 2^16, no overflow).
inline __m256i dot4(__m256i u8, __m256i s8) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
}

#include "kernels/quant_matvec_simd.inc"

}  // namespace

quant_detail::RowKernel quant_detail::avx2_kernel(gguf::TensorType type) { return pick(type); }
quant_detail::HalfBatchKernel quant_detail::avx2_half_batch(gguf::TensorType type) {
  if (type == gguf::TensorType::kF16) return half_rows_batch<false>;
  if (type == gguf::TensorType::kBF16) return half_rows_batch<true>;
  return nullptr;
}

}  // namespace kvcache::engine

KVCACHE_SIMD_END()

#else
namespace kvcache::engine {
quant_detail::RowKernel quant_detail::avx2_kernel(gguf::TensorType) { return nullptr; }
quant_detail::HalfBatchKernel quant_detail::avx2_half_batch(gguf::TensorType) { return nullptr; }
}  // namespace kvcache::engine
#endif
