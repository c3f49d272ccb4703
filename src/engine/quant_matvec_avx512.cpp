// The AVX-512 VNNI build of the matrix-vector row kernels (quant_matvec_simd.inc): each integer
// dot product is one vpdpbusd on 256-bit vectors (AVX-512 VL), where AVX2 needs maddubs + madd.
// Entered only through matvec's run-time dispatch, which checks avx512vnni. All headers are
// included before the target pragma so nothing shared is compiled for AVX-512.
// GCC 12's AVX-512 headers build _mm512_undefined_* from a self-initialized variable, which
// -Wuninitialized reports at every use; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/quant_matvec.h"
#include "program/gguf_quant.h"
#include "program/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

namespace kvcache::engine {
namespace {

inline __m256i dot4(__m256i u8, __m256i s8) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8);
}

#include "engine/quant_matvec_simd.inc"

}  // namespace

quant_detail::RowKernel quant_detail::avx512_kernel(gguf::TensorType type) { return pick(type); }
quant_detail::HalfBatchKernel quant_detail::avx512_half_batch(gguf::TensorType type) {
  return pick_half_batch(type);
}

}  // namespace kvcache::engine

#pragma GCC pop_options

#else
namespace kvcache::engine {
quant_detail::RowKernel quant_detail::avx512_kernel(gguf::TensorType) { return nullptr; }
quant_detail::HalfBatchKernel quant_detail::avx512_half_batch(gguf::TensorType) { return nullptr; }
}  // namespace kvcache::engine
#endif
