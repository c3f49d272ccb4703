// Dense kernels for the engine forward. See kernels.h.
#include "kernels/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <immintrin.h>

#include "cpu/attention.h"
#include "cpu/thread_pool.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace kvcache::kernels {

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

// Element-wise work of a prefill chunk (a 512-token SwiGLU is a million exps): fn(i0, i1) over
// items [0, n) of `per_item` elements each, shared on the pool from kMinParallelElements
// elements on; each element is computed as alone, so the split never changes a result.
constexpr int64_t kMinParallelElements = 1 << 14;
void split_items(int64_t n, int64_t per_item, const std::function<void(int64_t, int64_t)>& fn) {
  cpu::ThreadPool& pool = cpu::global_pool();
  if (pool.size() == 1 || n < 2 || n * per_item < kMinParallelElements) return fn(0, n);
  pool.parallel_for(n, fn);
}

}  // namespace

void matmul_f32_rows(const float* x, const float* w, float* y, int64_t t, int64_t in,
                     int64_t out, int64_t r0, int64_t r1, bool accumulate) {
  if (t <= 0 || r1 <= r0) return;
  blas_single_threaded();
  const float beta = accumulate ? 1.0f : 0.0f;
  const auto nr = static_cast<blasint>(r1 - r0), k = static_cast<blasint>(in);
  if (t == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, nr, k, 1.0f, w + r0 * in, k, x, 1, beta, y + r0, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(t), nr, k, 1.0f,
                x, k, w + r0 * in, k, beta, y + r0, static_cast<blasint>(out));
  }
}

void matmul(std::span<const float> x, std::span<const float> w, std::span<float> y, int64_t t,
            int64_t in, int64_t out, bool accumulate) {
  assert(static_cast<int64_t>(x.size()) >= t * in && static_cast<int64_t>(w.size()) >= out * in);
  assert(static_cast<int64_t>(y.size()) >= t * out);
  if (t <= 0 || out <= 0) return;
  split_rows(out, t * in * out, [&](int64_t r0, int64_t r1) {
    matmul_f32_rows(x.data(), w.data(), y.data(), t, in, out, r0, r1, accumulate);
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

void rmsnorm_rows(std::span<const float> x, std::span<const float> weight, std::span<float> out,
                  int64_t rows, int64_t d, float eps) {
  split_items(rows, d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data() + r * d;
      double ss = 0.0;
      for (int64_t i = 0; i < d; ++i) ss += double{xr[i]} * xr[i];
      const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
      float* o = out.data() + r * d;
      for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * weight[i];
    }
  });
}

void rope(std::span<float> x, std::span<const int64_t> positions, int32_t heads,
          const RopeParams& p) {
  const int32_t half = p.rope_dim / 2;
  if (half == 0) return;
  const auto tokens = static_cast<int64_t>(positions.size());
  std::vector<double> freqs(static_cast<size_t>(half));  // the same for every token
  for (int32_t j = 0; j < half; ++j) {
    double freq = std::pow(static_cast<double>(p.base), -2.0 * j / p.rope_dim);
    if (!p.freq_factors.empty()) freq /= static_cast<double>(p.freq_factors[j]);
    freqs[static_cast<size_t>(j)] = freq;
  }
  split_items(tokens, int64_t{half} * heads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = static_cast<double>(positions[t]) / p.linear;
      for (int32_t j = 0; j < half; ++j) {
        const double angle = pos * freqs[static_cast<size_t>(j)];
        const auto c = static_cast<float>(std::cos(angle));
        const auto s = static_cast<float>(std::sin(angle));
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
  });
}

void swiglu_reference(std::span<float> g, std::span<const float> u) {
  for (size_t i = 0; i < g.size(); ++i) {
    const float v = g[i];
    g[i] = v / (1.0f + std::exp(-v)) * u[i];
  }
}

void swiglu(std::span<float> g, std::span<const float> u) {
  const bool avx512 = cpu::isa_supported(cpu::Isa::kAvx512);  // per call: honours the ceiling
  split_items(static_cast<int64_t>(g.size()), 1, [&](int64_t i0, int64_t i1) {
    if (avx512) return detail::swiglu_avx512(g.data() + i0, u.data() + i0, i1 - i0);
    swiglu_reference(g.subspan(static_cast<size_t>(i0), static_cast<size_t>(i1 - i0)),
                     u.subspan(static_cast<size_t>(i0), static_cast<size_t>(i1 - i0)));
  });
}

void swiglu_oai(std::span<float> g, std::span<const float> u, float alpha, float limit) {
  split_items(static_cast<int64_t>(g.size()), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) {
      const float x = std::min(g[i], limit);
      const float y = std::clamp(u[i], -limit, limit);
      g[i] = x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
    }
  });
}

float gelu_tanh(float x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))));
}

void gelu_tanh_gated(std::span<float> g, std::span<const float> u) {
  split_items(static_cast<int64_t>(g.size()), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i)
      g[i] = gelu_tanh(g[i]) * u[i];
  });
}

void softcap(std::span<float> x, float cap) {
  if (!(cap > 0.0f)) return;
  for (float& v : x) v = cap * std::tanh(v / cap);
}

}  // namespace kvcache::kernels
