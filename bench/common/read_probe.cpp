// See read_probe.h.
#include "read_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "cpu/attention.h"
#include "cpu/kv_pool.h"
#include "cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvcache::bench {
namespace {

cpu::ThreadPool& pool(int threads) {
  static cpu::ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
#endif

float sum_scalar(const float* p, int64_t n) {
  float s[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// Multiply-adds (lanes) of `iters` rounds of 12 independent chains, 16 lanes each.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_avx512(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  float out[16], s = 0;  // stored, not reduced: GCC 12's reduce warns about its own header
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_ps(out, a[i]);
    for (float x : out) s += x;
  }
  volatile float sink = s;
  (void)sink;
  return 12.0 * 16.0 * static_cast<double>(iters);
}
__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  float out[8], s = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_storeu_ps(out, a[i]);
    for (float x : out) s += x;
  }
  volatile float sink = s;
  (void)sink;
  return 12.0 * 8.0 * static_cast<double>(iters);
}
#endif

double fma_scalar(int64_t iters) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = 1.0f + static_cast<float>(i) * 1e-7f;
  for (int64_t k = 0; k < iters; ++k)
    for (float& x : a) x = x * 0.9999999f + 1e-7f;
  volatile float sink = a[0] + a[11];
  (void)sink;
  return 12.0 * static_cast<double>(iters);
}

}  // namespace

double measure_fma_probe(int threads, int passes) {
  constexpr int64_t kIters = int64_t{1} << 22;  // ~40 ms a pass at 1 G vector FMAs/s
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> done(threads);
    const auto t0 = std::chrono::steady_clock::now();
    pool(threads).parallel_for(threads, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
#if defined(__x86_64__)
        done[c] = cpu::isa_supported(cpu::Isa::kAvx512) ? fma_avx512(kIters)
                  : cpu::isa_supported(cpu::Isa::kAvx2)  ? fma_avx2(kIters)
                                                         : fma_scalar(kIters / 8);
#else
        done[c] = fma_scalar(kIters / 8);
#endif
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0;
    for (double d : done) total += d;
    best = std::max(best, total / s);
  }
  return best;
}

double measure_probe(int threads, int passes) {
  static cpu::AlignedBytes buf = cpu::aligned_alloc_bytes(kProbeBytes);
  static bool filled = false;
  const int64_t n = kProbeBytes / 4;
  auto* f = reinterpret_cast<float*>(buf.get());
  if (!filled) {
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(i & 7);
    filled = true;
  }
  const bool avx2 = cpu::isa_supported(cpu::Isa::kAvx2);  // AVX2 whenever the CPU has it
  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> part(threads);
    pool(threads).parallel_for(threads, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t lo = n * c / threads / 64 * 64, hi = n * (c + 1) / threads / 64 * 64;
#if defined(__x86_64__)
        part[c] = avx2 ? sum_avx2(f + lo, hi - lo) : sum_scalar(f + lo, hi - lo);
#else
        part[c] = sum_scalar(f + lo, hi - lo);
#endif
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float x : part) sink = sink + x;
    best = std::max(best, double(kProbeBytes) / s);
  }
  return best;
}

double ProbeAround::best() const { return std::max(before_, measure_probe(threads_, 3)); }

}  // namespace kvcache::bench
