// Weight views and the type-dispatching matrix product. See weight.h.
#include "kernels/weight.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/isa.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "core/half.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace kvcache::kernels {

Weight Weight::from_f32(int64_t rows, int64_t cols, std::vector<float> values) {
  auto owned = std::make_shared<const std::vector<float>>(std::move(values));
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(owned->data()),
                                     owned->size() * sizeof(float));
  w.owner = std::move(owned);
  return w;
}

Weight Weight::from_bytes(gguf::TensorType type, int64_t rows, int64_t cols,
                          std::vector<uint8_t> data) {
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(data));
  Weight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.bytes = std::span<const uint8_t>(owned->data(), owned->size());
  w.owner = std::move(owned);
  return w;
}

namespace {

#if defined(__x86_64__)
// F16 rows are decoded for every prefill tile and embedding lookup: 8 values per F16C step.
__attribute__((target("avx2,f16c"))) void f16_row_f16c(const uint8_t* h, float* out, int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(out + c, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(h + 2 * c))));
  for (; c < n; ++c) {
    uint16_t v;
    std::memcpy(&v, h + 2 * c, 2);
    out[c] = _cvtsh_ss(v);
  }
}
#endif

}  // namespace

void Weight::row(int64_t r, std::span<float> out) const {
  const auto n = static_cast<int64_t>(row_bytes());
#if defined(__x86_64__)
  if (type == gguf::TensorType::kF16 && cpu::isa_supported(cpu::Isa::kAvx2))
    return f16_row_f16c(row_data(r), out.data(), cols);
#endif
  // The loader admits only computable types whose rows are whole blocks: this cannot fail.
  const bool ok = gguf::dequantize(type, bytes.subspan(static_cast<size_t>(r * n),
                                                       static_cast<size_t>(n)),
                                   out.first(static_cast<size_t>(cols)));
  assert(ok);
  (void)ok;
}

float Weight::at(int64_t r, int64_t c) const {
  if (type == gguf::TensorType::kF32) return f32()[r * cols + c];
  const gguf::BlockGeometry g = *gguf::block_geometry(type);
  float block[256];
  const int64_t b = c / g.elements;
  (void)gguf::dequantize(type, bytes.subspan(static_cast<size_t>(r * row_bytes() + b * g.bytes),
                                             static_cast<size_t>(g.bytes)),
                         std::span<float>(block, static_cast<size_t>(g.elements)));
  return block[c % g.elements];
}

void gemv_f16_scalar(const uint16_t* w, const float* x, float* y, int64_t rows, int64_t cols,
                     bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    const uint16_t* wr = w + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc += kvcache::f16_to_f32(wr[c]) * x[c];
    y[r] = accumulate ? y[r] + acc : acc;
  }
}

namespace {

// T > 1: tiles of at most kMaxTile rows decoded to f32 once, then sgemm per tile (the decode
// is amortized over T tokens); tiles are shared out over the global pool, as many per thread
// (768 rows on 2 threads: 4 tiles of 192, not 256 + 256 | 256, which left one thread a third
// of the matrix idle; 256 rows: 2 of 128, not one thread alone).
void gemm_tiles(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
                bool accumulate) {
  constexpr int64_t kMaxTile = 256;
  static const bool blas_once = [] {  // the pool shares the work; OpenBLAS runs one thread
    openblas_set_num_threads(1);
    return true;
  }();
  (void)blas_once;
  if (w.rows == 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  cpu::ThreadPool& pool = cpu::global_pool();
  const bool alone = pool.size() == 1 || t * w.rows * w.cols < (int64_t{1} << 17);
  const int64_t threads = alone ? 1 : static_cast<int64_t>(pool.size());
  const int64_t per_thread = (w.rows + threads * kMaxTile - 1) / (threads * kMaxTile);
  const int64_t want = threads * per_thread;
  const int64_t tile = ((w.rows + want - 1) / want + 15) / 16 * 16;  // whole 16-row steps
  const int64_t n_tiles = (w.rows + tile - 1) / tile;
  auto run = [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> tile_f32;
    tile_f32.resize(static_cast<size_t>(tile * w.cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * tile, n = std::min(tile, w.rows - r0);
      for (int64_t r = 0; r < n; ++r)
        w.row(r0 + r,
              std::span<float>(tile_f32).subspan(static_cast<size_t>(r * w.cols), w.cols));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(t),
                  static_cast<blasint>(n), static_cast<blasint>(w.cols), 1.0f, x.data(),
                  static_cast<blasint>(w.cols), tile_f32.data(), static_cast<blasint>(w.cols),
                  beta, y.data() + r0, static_cast<blasint>(w.rows));
    }
  };
  if (alone || n_tiles < 2) return run(0, n_tiles);
  pool.parallel_for(n_tiles, run);
}

}  // namespace

void matmul(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
            bool accumulate) {
  if (w.type == gguf::TensorType::kF32) {
    matmul(x, std::span<const float>(w.f32(), static_cast<size_t>(w.n_elements())), y, t, w.cols,
           w.rows, accumulate);
    return;
  }
  assert(static_cast<int64_t>(x.size()) >= t * w.cols);
  assert(static_cast<int64_t>(y.size()) >= t * w.rows);
  if (t == 1) matvec(w, x.data(), y.data(), accumulate);
  else if (t > 1 && t <= kSmallBatch) matvec_batch(w, x.data(), y.data(), t, accumulate);
  else if (t > kSmallBatch && q8_gemm_available(w)) q8_gemm(w, x.data(), y.data(), t, accumulate);
  else if (t > kSmallBatch) gemm_tiles(x, w, y, t, accumulate);
}

}  // namespace kvcache::kernels
