// Activation quantization, the scalar integer kernels, the double reference and the run-time
// dispatch of the matrix-vector products. See quant_matvec.h.
#include "kernels/quant_matvec.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "program/gguf_quant.h"
#include "core/half.h"

namespace kvcache::kernels {
namespace {

using gguf::TensorType;

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Sub-block sb of a Q4_K / Q5_K block b whose d and dmin are already decoded.
void k_sub_block(bool five, const uint8_t* b, int sb, float d, float dmin,
                 detail::IntBlock& o) {
  const gguf::ScaleMin sm = gguf::unpack_k_scale(b + 4, sb);
  o.s[0] = o.s[1] = d * sm.scale;
  o.c = -dmin * sm.min;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five ? 48 : 16) + 32 * (sb / 2);
  for (int l = 0; l < 32; ++l) {
    int v = sb % 2 == 0 ? (q[l] & 0x0F) : (q[l] >> 4);
    if (five) v |= ((qh[l] >> sb) & 1) << 4;
    o.w[l] = static_cast<int8_t>(v);
  }
}

// Sub-block sb of a Q6_K block b whose d is already decoded.
void q6_sub_block(const uint8_t* b, int sb, float d, detail::IntBlock& o) {
  const int h = sb / 4, g = sb % 4;
  const uint8_t* ql = b + 64 * h + 32 * (g % 2);
  const uint8_t* qh = b + 128 + 32 * h;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  o.c = 0.0f;
  o.s[0] = d * sc[2 * sb];
  o.s[1] = d * sc[2 * sb + 1];
  for (int l = 0; l < 32; ++l) {
    const int lo = g < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
    o.w[l] = static_cast<int8_t>((lo | (((qh[l] >> (2 * g)) & 3) << 4)) - 32);
  }
}

}  // namespace

void detail::int_blocks(TensorType type, const uint8_t* b, IntBlock* out) {
  switch (type) {
    case TensorType::kQ4_K: case TensorType::kQ5_K: {
      const float d = half_at(b), dmin = half_at(b + 2);  // once for the 8 sub-blocks
      const bool five = type == TensorType::kQ5_K;
      for (int sb = 0; sb < 8; ++sb) k_sub_block(five, b, sb, d, dmin, out[sb]);
      return;
    }
    case TensorType::kQ6_K: {
      const float d = half_at(b + 208);
      for (int sb = 0; sb < 8; ++sb) q6_sub_block(b, sb, d, out[sb]);
      return;
    }
    default:
      int_block(type, b, 0, out[0]);  // one sub-block per block
  }
}

void detail::int_block(TensorType type, const uint8_t* b, int sb, IntBlock& o) {
  o.c = 0.0f;
  switch (type) {
    case TensorType::kQ8_0:
      o.s[0] = o.s[1] = half_at(b);
      std::memcpy(o.w, b + 2, 32);
      return;
    case TensorType::kQ4_0: case TensorType::kQ4_1:
    case TensorType::kQ5_0: case TensorType::kQ5_1: {
      const bool has_min = type == TensorType::kQ4_1 || type == TensorType::kQ5_1;
      const bool five = type == TensorType::kQ5_0 || type == TensorType::kQ5_1;
      o.s[0] = o.s[1] = half_at(b);
      if (has_min) o.c = half_at(b + 2);
      const uint8_t* p = b + (has_min ? 4 : 2);
      uint32_t qh = 0;
      if (five) {
        std::memcpy(&qh, p, 4);
        p += 4;
      }
      const int offset = has_min ? 0 : (five ? 16 : 8);
      for (int j = 0; j < 16; ++j) {
        const int hi5 = five ? static_cast<int>((qh >> (j + 16)) & 1u) << 4 : 0;
        const int lo5 = five ? static_cast<int>((qh >> j) & 1u) << 4 : 0;
        o.w[j] = static_cast<int8_t>(((p[j] & 0x0F) | lo5) - offset);
        o.w[j + 16] = static_cast<int8_t>(((p[j] >> 4) | hi5) - offset);
      }
      return;
    }
    case TensorType::kQ4_K: case TensorType::kQ5_K:
      k_sub_block(type == TensorType::kQ5_K, b, sb, half_at(b), half_at(b + 2), o);
      return;
    case TensorType::kQ6_K:
      q6_sub_block(b, sb, half_at(b + 208), o);
      return;
    case TensorType::kMXFP4:  // the doubled E2M1 table, so half the block's scale
      o.s[0] = o.s[1] = gguf::mxfp4_half_scale(b[0]);
      for (int j = 0; j < 16; ++j) {
        o.w[j] = gguf::kMxfp4Doubled[b[1 + j] & 0x0F];
        o.w[j + 16] = gguf::kMxfp4Doubled[b[1 + j] >> 4];
      }
      return;
    default: return;
  }
}

namespace {

using detail::IntBlock;
using detail::int_block;

void scalar_blocks(const Weight& w, int64_t r0, int64_t r1, const Q8Activations& a,
                   const float*, float* y, bool accumulate) {
  const gguf::BlockGeometry g = *gguf::block_geometry(w.type);
  const int64_t per_block = g.elements / 32;
  IntBlock ib;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.row_data(r);
    float acc = 0.0f;
    for (int64_t xb = 0; xb < a.blocks; ++xb) {
      int_block(w.type, row + (xb / per_block) * g.bytes, static_cast<int>(xb % per_block), ib);
      const int8_t* q = a.q.data() + 32 * xb;
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 16; ++l) lo += int32_t{ib.w[l]} * q[l];
      for (int l = 16; l < 32; ++l) hi += int32_t{ib.w[l]} * q[l];
      const int32_t sum = a.sum16[2 * xb] + a.sum16[2 * xb + 1];
      acc += a.d[xb] * (ib.s[0] * static_cast<float>(lo) + ib.s[1] * static_cast<float>(hi) +
                        ib.c * static_cast<float>(sum));
    }
    y[r - r0] = accumulate ? y[r - r0] + acc : acc;
  }
}

template <bool kBf16>
void scalar_halves(const Weight& w, int64_t r0, int64_t r1, const Q8Activations&, const float* x,
                   float* y, bool accumulate) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.row_data(r);
    float acc = 0.0f;
    for (int64_t c = 0; c < w.cols; ++c) {
      uint16_t h;
      std::memcpy(&h, row + 2 * c, 2);
      acc += (kBf16 ? bf16_to_f32(h) : f16_to_f32(h)) * x[c];
    }
    y[r - r0] = accumulate ? y[r - r0] + acc : acc;
  }
}

bool is_block_type(TensorType t) {
  return t != TensorType::kF32 && t != TensorType::kF16 && t != TensorType::kBF16;
}

// Rows per task when a product's rows are shared out on a pool of `threads`, claimed
// dynamically: 1 to 4 tasks per thread, as many as keep each task at least kShareTaskBytes of
// weight rows (a multiple of 4 rows). Several tasks per thread let the others take a parked
// thread's rest on a shared machine; each task is a new stream for the prefetcher (the
// measurements are at kShareTaskBytes). Every row is computed by one call whatever the split,
// so results do not depend on it.
int64_t rows_per_task(int64_t rows, int64_t row_bytes, int threads) {
  const int64_t per_thread =
      std::clamp<int64_t>(rows * row_bytes / (threads * kShareTaskBytes), 1, 4);
  const int64_t n = threads * per_thread;
  return std::max<int64_t>(4, ((rows + n - 1) / n + 3) & ~int64_t{3});
}

// Whether a product of t rows against a [rows, cols] weight is too small to share out.
constexpr int64_t kMinShareRows = 64;
bool small_product(int64_t t, int64_t rows, int64_t cols) {
  return t * rows * cols < (int64_t{1} << 15) || rows < 2 * kMinShareRows;
}

// One chunk of a matmul_shared call: rows [r0, r1) of product p.
struct SharedTask {
  int32_t p;
  int64_t r0, r1;
};

// Every product's rows in chunks of rows_per_task (a product too small to share: one chunk).
void shared_tasks(std::span<const SharedProduct> products, int64_t t, int threads,
                  std::vector<SharedTask>& tasks) {
  tasks.clear();
  for (size_t i = 0; i < products.size(); ++i) {
    const Weight& w = *products[i].w;
    assert(static_cast<int64_t>(products[i].y.size()) >= t * w.rows);
    const int64_t per = threads == 1 || small_product(t, w.rows, w.cols)
                            ? w.rows
                            : rows_per_task(w.rows, w.row_bytes(), threads);
    for (int64_t r0 = 0; r0 < w.rows; r0 += per)
      tasks.push_back({static_cast<int32_t>(i), r0, std::min(w.rows, r0 + per)});
  }
}

// The products (none F32, all of width cols) of x[t, cols] at level `isa`: x quantized once
// when any weight is a block type, then every product's rows in one pool dispatch (on the
// calling thread when the work is small): matvec_batch's one product and matmul_shared's
// several.
void share_products(const float* x, int64_t t, int64_t cols,
                    std::span<const SharedProduct> products, cpu::Isa isa) {
  bool quantize = false;
  int64_t macs = 0;
  for (const SharedProduct& p : products) {
    quantize = quantize || is_block_type(p.w->type);
    macs += t * p.w->rows * cols;
  }
  thread_local ProductInput in;
  in.set(x, t, cols, quantize);
  cpu::ThreadPool& pool = cpu::global_pool();
  thread_local std::vector<SharedTask> tasks;
  shared_tasks(products, t, pool.size(), tasks);
  const ProductInput& shared = in;  // the workers read the caller's thread_locals
  const std::vector<SharedTask>& work = tasks;
  const auto run = [&](int64_t k) {
    const SharedTask& task = work[static_cast<size_t>(k)];
    const SharedProduct& p = products[static_cast<size_t>(task.p)];
    detail::product_rows(*p.w, shared, task.r0, task.r1, p.y.data(), p.accumulate, isa);
  };
  if (pool.size() == 1 || work.size() < 2 || macs < (int64_t{1} << 15)) {
    for (size_t k = 0; k < work.size(); ++k) run(static_cast<int64_t>(k));
    return;
  }
  pool.run_tasks(static_cast<int64_t>(work.size()), run);
}

}  // namespace

void detail::quantize_activations_scalar(const float* x, int64_t cols,
                                         Q8Activations& out) {
  out.blocks = cols / 32;
  out.q.resize(static_cast<size_t>(cols));
  out.d.resize(static_cast<size_t>(out.blocks));
  out.sum16.resize(static_cast<size_t>(2 * out.blocks));
  out.dsum16.resize(static_cast<size_t>(2 * out.blocks));
  out.dsum.resize(static_cast<size_t>(out.blocks));
  out.sum4.assign(static_cast<size_t>(8 * out.blocks), 0);
  for (int64_t b = 0; b < out.blocks; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(xb[l]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    out.d[b] = d;
    int32_t s[2] = {0, 0};
    for (int l = 0; l < 32; ++l) {
      const auto q = static_cast<int8_t>(std::lrintf(xb[l] * inv));
      out.q[32 * b + l] = q;
      s[l / 16] += q;
      out.sum4[8 * b + l / 4] += q;
    }
    out.sum16[2 * b] = s[0];
    out.sum16[2 * b + 1] = s[1];
    out.dsum16[2 * b] = d * static_cast<float>(s[0]);
    out.dsum16[2 * b + 1] = d * static_cast<float>(s[1]);
    out.dsum[b] = d * static_cast<float>(s[0] + s[1]);
  }
  pair_activations(out);
}

void detail::pair_activations(Q8Activations& out) {
  const int64_t groups = out.blocks / 8;
  out.q_pairs.resize(static_cast<size_t>(256 * groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int k = 0; k < 4; ++k)
      for (int half = 0; half < 2; ++half)
        for (int blk = 0; blk < 2; ++blk)  // block k, then k + 4
          std::memcpy(out.q_pairs.data() + 256 * g + 64 * k + 32 * half + 16 * blk,
                      out.q.data() + 32 * (8 * g + k + 4 * blk) + 16 * half, 16);
}

void quantize_activations(const float* x, int64_t cols, Q8Activations& out) {
  const detail::QuantizeFn simd =
      matvec_isa() != cpu::Isa::kScalar ? detail::avx2_quantize() : nullptr;
  (simd != nullptr ? simd : detail::quantize_activations_scalar)(x, cols, out);
}

namespace detail {
RowKernel scalar_kernel(TensorType type) {
  if (type == TensorType::kF16) return scalar_halves<false>;
  if (type == TensorType::kBF16) return scalar_halves<true>;
  return scalar_blocks;
}
}  // namespace detail

bool product_quantizes(gguf::TensorType type) { return is_block_type(type); }

ProductInput::ProductInput() = default;
ProductInput::~ProductInput() = default;
ProductInput::ProductInput(ProductInput&&) noexcept = default;
ProductInput& ProductInput::operator=(ProductInput&&) noexcept = default;

void ProductInput::set(const float* x_rows, int64_t rows, int64_t width, bool quantize) {
  x = x_rows;
  t = rows;
  cols = width;
  quantized = quantize;
  if (!quantize) return;
  if (static_cast<int64_t>(q.size()) < t) q.resize(static_cast<size_t>(t));
  for (int64_t j = 0; j < t; ++j)
    quantize_activations(x + j * cols, cols, q[static_cast<size_t>(j)]);
}

void detail::product_rows(const Weight& w, const ProductInput& in, int64_t r0, int64_t r1,
                          float* y, bool accumulate, cpu::Isa isa) {
  assert(in.cols == w.cols && (in.quantized || !is_block_type(w.type)));
  if (r1 <= r0 || in.t <= 0) return;
  isa = matvec_isa(isa);
  const RowKernel fn = isa == cpu::Isa::kAvx512 ? avx512_kernel(w.type)
                       : isa == cpu::Isa::kAvx2 ? avx2_kernel(w.type)
                                                : scalar_kernel(w.type);
  static const Q8Activations kNone;  // F16/BF16 kernels read x, not this
  auto acts = [&](int64_t j) -> const Q8Activations& {
    return in.quantized ? in.q[static_cast<size_t>(j)] : kNone;
  };
  if (in.t == 1) return fn(w, r0, r1, acts(0), in.x, y + r0, accumulate);
  // F16/BF16: one pass over each weight row for every activation row.
  const HalfBatchKernel hb = isa == cpu::Isa::kAvx512 ? avx512_half_batch(w.type)
                             : isa == cpu::Isa::kAvx2 ? avx2_half_batch(w.type)
                                                      : nullptr;
  if (hb != nullptr) return hb(w, r0, r1, in.x, in.t, y + r0, w.rows, accumulate);
  // Chunks of about kRowChunkBytes of weight rows stay in L2 while every activation row
  // passes, four or two at a time where the type has group kernels.
  auto group = [&](int n) -> RowGroupKernel {
    return isa == cpu::Isa::kAvx512 ? avx512_group_kernel(w.type, n)
           : isa == cpu::Isa::kAvx2 ? avx2_group_kernel(w.type, n)
                                    : nullptr;
  };
  const RowGroupKernel quad = group(4), pair = group(2);
  const int64_t chunk = std::max<int64_t>(4, kRowChunkBytes / std::max<int64_t>(1, w.row_bytes()));
  for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
    const int64_t c1 = std::min(r1, c0 + chunk);
    for (int64_t j = 0; j < in.t;) {
      const int n = in.t - j >= 4 && quad != nullptr ? 4 : in.t - j >= 2 && pair != nullptr ? 2 : 1;
      if (n == 1) {
        fn(w, c0, c1, acts(j), in.x + j * w.cols, y + j * w.rows + c0, accumulate);
      } else {
        const Q8Activations* a[4];
        float* ys[4];
        for (int i = 0; i < n; ++i) {
          a[i] = &acts(j + i);
          ys[i] = y + (j + i) * w.rows + c0;
        }
        (n == 4 ? quad : pair)(w, c0, c1, a, ys, accumulate);
      }
      j += n;
    }
  }
}

void matmul_rows(const Weight& w, const ProductInput& x, int64_t r0, int64_t r1, float* y,
                 bool accumulate) {
  if (w.type == gguf::TensorType::kF32)
    return matmul_f32_rows(x.x, w.f32(), y, x.t, w.cols, w.rows, r0, r1, accumulate);
  detail::product_rows(w, x, r0, r1, y, accumulate, cpu::Isa::kAuto);
}

int64_t row_chunk(const Weight& w) {
  return std::max<int64_t>(4, kShareTaskBytes / std::max<int64_t>(1, w.row_bytes())) & ~int64_t{3};
}

void matvec_batch(const Weight& w, const float* x, float* y, int64_t t, bool accumulate,
                  cpu::Isa isa) {
  if (w.rows == 0 || t <= 0) return;
  isa = matvec_isa(isa);  // one level for every range
  const SharedProduct one[] = {{&w, std::span<float>(y, static_cast<size_t>(t * w.rows)),
                                accumulate}};
  share_products(x, t, w.cols, one, isa);
}

void matmul_shared(std::span<const float> x, int64_t t, std::span<const SharedProduct> products) {
  const auto fusable = [&](const SharedProduct& p) {
    return p.w->type != TensorType::kF32 && p.w->cols == products[0].w->cols && p.w->rows > 0;
  };
  if (t < 1 || t > kSmallBatch || products.empty() ||
      !std::all_of(products.begin(), products.end(), fusable)) {
    for (const SharedProduct& p : products) matmul(x, *p.w, p.y, t, p.accumulate);
    return;
  }
  assert(static_cast<int64_t>(x.size()) >= t * products[0].w->cols);
  share_products(x.data(), t, products[0].w->cols, products, matvec_isa());
}

void matvec(const Weight& w, const float* x, float* y, bool accumulate, cpu::Isa isa) {
  matvec_batch(w, x, y, 1, accumulate, isa);
}

void matvec_reference(const Weight& w, const float* x, float* y, bool accumulate) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    w.row(r, row);
    double acc = accumulate ? y[r] : 0.0;
    for (int64_t c = 0; c < w.cols; ++c) acc += double{row[c]} * x[c];
    y[r] = static_cast<float>(acc);
  }
}

}  // namespace kvcache::kernels
