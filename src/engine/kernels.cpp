// Dense kernels for the engine forward. See kernels.h.
#include "engine/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <immintrin.h>

#include "cpu/thread_pool.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace kvcache::engine {

namespace {

// Multiply-adds below which a product runs on the calling thread alone.
constexpr int64_t kMinParallelMacs = 1 << 17;

// OpenBLAS always runs one thread per call: the engine shares work out over
// cpu::global_pool() itself, so two sets of spinning threads never fight over the cores.
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// Runs fn(row_begin, row_end) over [0, rows) on the global pool when the product is big enough.
void split_rows(int64_t rows, int64_t macs, const std::function<void(int64_t, int64_t)>& fn) {
  cpu::ThreadPool& pool = cpu::global_pool();
  if (pool.size() == 1 || macs < kMinParallelMacs || rows < 2 * 16) return fn(0, rows);
  pool.parallel_for(rows, fn);
}

}  // namespace

void matmul(std::span<const float> x, std::span<const float> w, std::span<float> y, int64_t t,
            int64_t in, int64_t out, bool accumulate) {
  assert(static_cast<int64_t>(x.size()) >= t * in && static_cast<int64_t>(w.size()) >= out * in);
  assert(static_cast<int64_t>(y.size()) >= t * out);
  if (t <= 0 || out <= 0) return;
  blas_single_threaded();
  const float beta = accumulate ? 1.0f : 0.0f;
  const auto m = static_cast<blasint>(t), n = static_cast<blasint>(out);
  const auto k = static_cast<blasint>(in);
  // Each chunk computes output columns [r0, r1) for every token.
  split_rows(out, t * in * out, [&](int64_t r0, int64_t r1) {
    const auto nr = static_cast<blasint>(r1 - r0);
    if (t == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, nr, k, 1.0f, w.data() + r0 * in, k, x.data(), 1,
                  beta, y.data() + r0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nr, k, 1.0f, x.data(), k,
                  w.data() + r0 * in, k, beta, y.data() + r0, n);
    }
  });
}

void matmul_reference(std::span<const float> x, std::span<const float> w, std::span<float> y,
                      int64_t t, int64_t in, int64_t out, bool accumulate) {
  for (int64_t r = 0; r < t; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = accumulate ? y[r * out + o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += double{x[r * in + i]} * w[o * in + i];
      y[r * out + o] = static_cast<float>(acc);
    }
}

namespace {

__attribute__((target("avx2,f16c"))) void f16_row_avx2(const uint16_t* h, float* out,
                                                        int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(out + c,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + c))));
  for (; c < n; ++c) out[c] = _cvtsh_ss(h[c]);
}

bool has_avx2_f16c() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

}  // namespace

void Weight::row(int64_t r, std::span<float> out) const {
  if (!is_f16()) {
    std::copy_n(f32.begin() + r * cols, cols, out.begin());
    return;
  }
  const uint16_t* h = f16.data() + r * cols;
  if (has_avx2_f16c()) {
    f16_row_avx2(h, out.data(), cols);
    return;
  }
  for (int64_t c = 0; c < cols; ++c) out[c] = program_detail::f16_to_f32(h[c]);
}

void gemv_f16_scalar(const uint16_t* w, const float* x, float* y, int64_t rows, int64_t cols,
                     bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    const uint16_t* wr = w + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc += program_detail::f16_to_f32(wr[c]) * x[c];
    y[r] = accumulate ? y[r] + acc : acc;
  }
}

namespace {

// Rows of W against T <= kSmallBatch activation rows, each weight row converted once per four
// activation rows. Every product is summed exactly as for T = 1 (two 8-lane accumulators over
// 16-column steps, one reduction order), so a row's result does not depend on how many rows
// share the call — a batched decode step gives each session what decoding alone gives it.
__attribute__((target("avx2,fma,f16c"))) void gemv_f16_avx2(const uint16_t* w, const float* x,
                                                              float* y, int64_t rows,
                                                              int64_t cols, int64_t t,
                                                              int64_t y_stride, bool accumulate) {
  const int64_t body = cols & ~int64_t{15};
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* wr = w + r * cols;
    for (int64_t t0 = 0; t0 < t; t0 += 4) {
      const int64_t nt = std::min<int64_t>(4, t - t0);
      __m256 a0[4], a1[4];
      for (int j = 0; j < 4; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
      for (int64_t c = 0; c < body; c += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + c)));
        const __m256 w1 =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + c + 8)));
        for (int64_t j = 0; j < nt; ++j) {
          const float* xj = x + (t0 + j) * cols + c;
          a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xj), a0[j]);
          a1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xj + 8), a1[j]);
        }
      }
      for (int64_t j = 0; j < nt; ++j) {
        const __m256 a = _mm256_add_ps(a0[j], a1[j]);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        float acc = _mm_cvtss_f32(s);
        const float* xj = x + (t0 + j) * cols;
        for (int64_t c = body; c < cols; ++c) acc += _cvtsh_ss(wr[c]) * xj[c];
        float& out = y[(t0 + j) * y_stride + r];
        out = accumulate ? out + acc : acc;
      }
    }
  }
}

void gemv_f16_rows_scalar(const uint16_t* w, const float* x, float* y, int64_t rows,
                          int64_t cols, int64_t t, int64_t y_stride, bool accumulate) {
  for (int64_t j = 0; j < t; ++j) {
    std::vector<float> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) out[r] = y[j * y_stride + r];
    gemv_f16_scalar(w, x + j * cols, out.data(), rows, cols, accumulate);
    for (int64_t r = 0; r < rows; ++r) y[j * y_stride + r] = out[r];
  }
}

// 1 <= T <= kSmallBatch (decode, alone or batched): rows split over the global pool, each
// chunk with the dispatched kernel.
void gemv_f16(const Weight& w, const float* x, float* y, int64_t t, bool accumulate) {
  auto* fn = has_avx2_f16c() ? gemv_f16_avx2 : gemv_f16_rows_scalar;
  const int64_t min_rows = 64;
  cpu::ThreadPool& pool = cpu::global_pool();
  if (pool.size() == 1 || w.rows < 2 * min_rows) {
    fn(w.f16.data(), x, y, w.rows, w.cols, t, w.rows, accumulate);
    return;
  }
  pool.parallel_for(w.rows, [&](int64_t begin, int64_t end) {
    fn(w.f16.data() + begin * w.cols, x, y + begin, end - begin, w.cols, t, w.rows, accumulate);
  });
}

// T > 1: blocks of rows converted to f32 once, then sgemm per block (cost amortized over T);
// blocks are shared out over the global pool.
void gemm_f16(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
              bool accumulate) {
  constexpr int64_t kBlock = 256;
  const float beta = accumulate ? 1.0f : 0.0f;
  const int64_t n_blocks = (w.rows + kBlock - 1) / kBlock;
  split_rows(n_blocks, t * w.rows * w.cols, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<size_t>(kBlock * w.cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kBlock, n = std::min(kBlock, w.rows - r0);
      for (int64_t r = 0; r < n; ++r)
        w.row(r0 + r, std::span<float>(tile).subspan(static_cast<size_t>(r * w.cols), w.cols));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(t),
                  static_cast<blasint>(n), static_cast<blasint>(w.cols), 1.0f, x.data(),
                  static_cast<blasint>(w.cols), tile.data(), static_cast<blasint>(w.cols), beta,
                  y.data() + r0, static_cast<blasint>(w.rows));
    }
  });
}

}  // namespace

void matmul(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
            bool accumulate) {
  if (!w.is_f16()) {
    matmul(x, w.f32, y, t, w.cols, w.rows, accumulate);
    return;
  }
  assert(static_cast<int64_t>(x.size()) >= t * w.cols);
  assert(static_cast<int64_t>(y.size()) >= t * w.rows);
  if (t >= 1 && t <= kSmallBatch) gemv_f16(w, x.data(), y.data(), t, accumulate);
  else if (t > kSmallBatch) gemm_f16(x, w, y, t, accumulate);
}

void rmsnorm_rows(std::span<const float> x, std::span<const float> weight, std::span<float> out,
                  int64_t rows, int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * d;
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += double{xr[i]} * xr[i];
    const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    float* o = out.data() + r * d;
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void rope(std::span<float> x, std::span<const int64_t> positions, int32_t heads,
          const RopeParams& p) {
  const int32_t half = p.rope_dim / 2;
  if (half == 0) return;
  const auto tokens = static_cast<int64_t>(positions.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(positions[t]) / p.linear;
    for (int32_t j = 0; j < half; ++j) {
      double freq = std::pow(static_cast<double>(p.base), -2.0 * j / p.rope_dim);
      if (!p.freq_factors.empty()) freq /= static_cast<double>(p.freq_factors[j]);
      const double angle = pos * freq;
      const auto c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const int32_t i0 = p.interleaved ? 2 * j : j;
      const int32_t i1 = p.interleaved ? 2 * j + 1 : j + half;
      for (int32_t h = 0; h < heads; ++h) {
        float* v = x.data() + (t * heads + h) * p.head_dim;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
  }
}

void swiglu(std::span<float> g, std::span<const float> u) {
  for (size_t i = 0; i < g.size(); ++i) {
    const float v = g[i];
    g[i] = v / (1.0f + std::exp(-v)) * u[i];
  }
}

float gelu_tanh(float x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))));
}

void gelu_tanh_gated(std::span<float> g, std::span<const float> u) {
  for (size_t i = 0; i < g.size(); ++i) g[i] = gelu_tanh(g[i]) * u[i];
}

void softcap(std::span<float> x, float cap) {
  if (!(cap > 0.0f)) return;
  for (float& v : x) v = cap * std::tanh(v / cap);
}

}  // namespace kvcache::engine
