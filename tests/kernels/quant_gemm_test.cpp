// The integer GEMM of prefill products: the AVX-512 VNNI (Q8_0) and AVX2 (every block type)
// kernels against the scalar reference, bitwise, over shapes that leave partial row vectors,
// partial token tiles and odd block counts, 1 and 2 threads, and at the int16 bound of AVX2's
// vpmaddubsw; the reference against the exact product within the activation's rounding, per
// type; and matmul's dispatch of T > kSmallBatch to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "random_values.h"

namespace kvcache::kernels {
namespace {

using testing::rnd;

using gguf::TensorType;

// Every block type the integer GEMM takes at AVX2.
constexpr TensorType kBlockTypes[] = {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                                      TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
                                      TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kMXFP4};

Weight block_weight(TensorType type, int64_t rows, int64_t cols, uint64_t seed) {
  Weight w = testing::random_weight(type, rows, cols, seed);
  EXPECT_EQ(w.rows, rows) << gguf::to_string(type) << " cannot encode " << cols << " columns";
  return w;
}

Weight q8_weight(int64_t rows, int64_t cols, uint64_t seed) {
  return block_weight(TensorType::kQ8_0, rows, cols, seed);
}

std::string shape(int64_t rows, int64_t cols, int64_t t) {
  return std::to_string(t) + "x" + std::to_string(cols) + " * (" + std::to_string(rows) + "x" +
         std::to_string(cols) + ")^T";
}

// q8_gemm at `isa` against q8_gemm_reference, bitwise, with and without accumulate, on 1 and
// 2 threads; restores 2 threads.
void expect_kernel_equals_reference(const Weight& w, const std::vector<float>& x, int64_t t,
                                    cpu::Isa isa) {
  const std::vector<float> y0 = rnd(static_cast<size_t>(t * w.rows), 30);
  for (bool acc : {false, true}) {
    std::vector<float> want = y0;
    q8_gemm_reference(w, x.data(), want.data(), t, acc);
    for (int threads : {1, 2}) {
      cpu::set_global_threads(threads);
      std::vector<float> got = y0;
      q8_gemm(w, x.data(), got.data(), t, acc, isa);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << shape(w.rows, w.cols, t) << " at " << i << " acc " << acc
                                   << " threads " << threads << " " << cpu::to_string(isa);
    }
  }
  cpu::set_global_threads(2);
}

// Q8_0 and MXFP4 (its doubled E2M1 values as int8, half its scale): rows 1..100 leave the
// last 16-row vector partial or pair an odd vector out; t covers the 6-token tile and every
// tail (1..5); cols 1, 3 and 10 blocks. Both sum block by block with
// the same fma, so the results are equal bit for bit.
TEST(QuantGemm, Avx512KernelEqualsTheReferenceBitwise) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx512))
    GTEST_SKIP() << "no AVX-512 VNNI here (CPU or KVCACHE_ISA)";
  for (TensorType type : {TensorType::kQ8_0, TensorType::kMXFP4})
  for (int64_t cols : {32, 96, 320})
    for (int64_t rows : {1, 15, 16, 17, 33, 100})
      for (int64_t t : {1, 5, 6, 7, 17, 40, 100}) {
        const Weight w = block_weight(type, rows, cols, 10 + rows);
        ASSERT_TRUE(q8_gemm_available(w, cpu::Isa::kAvx512)) << gguf::to_string(type);
        SCOPED_TRACE(gguf::to_string(type));
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 20 + t);
        expect_kernel_equals_reference(w, x, t, cpu::Isa::kAvx512);
        if (HasFatalFailure()) return;
      }
}

// The AVX2 kernel packs 8 rows to a vector and takes 6 tokens a micro-tile: rows 1..100 leave
// a partial vector (or none), t covers the token tails 1..5 and prefill lengths 17..300, cols
// 1 to 128 blocks. Same block order and fma: bitwise equal.
TEST(QuantGemm, Avx2KernelEqualsTheReferenceBitwise) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx2))
    GTEST_SKIP() << "no AVX2+FMA+F16C here (CPU or KVCACHE_ISA=scalar)";
  for (int64_t cols : {32, 96, 320})
    for (int64_t rows : {1, 7, 8, 9, 17, 33, 100})
      for (int64_t t : {1, 2, 5, 6, 17, 45, 100}) {
        const Weight w = q8_weight(rows, cols, 10 + rows);
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 20 + t);
        expect_kernel_equals_reference(w, x, t, cpu::Isa::kAvx2);
        if (HasFatalFailure()) return;
      }
  const int64_t wide[][3] = {{37, 4096, 17}, {23, 2048, 300}, {70, 768, 130}};  // rows cols t
  for (const auto& [rows, cols, t] : wide) {
    const Weight w = q8_weight(rows, cols, 40 + rows);
    const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 50 + t);
    expect_kernel_equals_reference(w, x, t, cpu::Isa::kAvx2);
    if (HasFatalFailure()) return;
  }
}

// vpmaddubsw's worst case: every weight -128 (|w| = 128 as an unsigned byte) against
// activations at |q| = 127, so each int16 pair sum is 2 x 128 x 127 = 32512, the largest the
// AVX2 kernel meets (< 32767: no saturation). x = +1 everywhere: d_x = 1 / 127, q = 127, so
// row r's dot per block is 32 x (-128) x 127 and y = sum over blocks of -4096 d_w = -4096 x
// (cols / 32) with d_w = 1. x = +-1 alternating: each pair cancels, y = 0.
TEST(QuantGemm, Avx2KernelReachesTheInt16BoundWithoutSaturating) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx2))
    GTEST_SKIP() << "no AVX2+FMA+F16C here (CPU or KVCACHE_ISA=scalar)";
  const int64_t rows = 9, cols = 256, t = 18;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 32 * 34));
  for (size_t b = 0; b < bytes.size(); b += 34) {
    bytes[b] = 0x00, bytes[b + 1] = 0x3c;  // f16 1.0
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(b + 2),
              bytes.begin() + static_cast<std::ptrdiff_t>(b + 34), uint8_t{0x80});  // -128
  }
  const Weight w = Weight::from_bytes(gguf::TensorType::kQ8_0, rows, cols, std::move(bytes));
  std::vector<float> same(static_cast<size_t>(t * cols), 1.0f), alternating = same;
  for (size_t i = 1; i < alternating.size(); i += 2) alternating[i] = -1.0f;
  std::vector<float> y(static_cast<size_t>(t * rows));
  q8_gemm(w, same.data(), y.data(), t, false, cpu::Isa::kAvx2);
  for (float v : y) ASSERT_NEAR(v, -4096.0f * (cols / 32), 1e-2f);
  expect_kernel_equals_reference(w, same, t, cpu::Isa::kAvx2);
  q8_gemm(w, alternating.data(), y.data(), t, false, cpu::Isa::kAvx2);
  for (float v : y) ASSERT_EQ(v, 0.0f);
  expect_kernel_equals_reference(w, alternating, t, cpu::Isa::kAvx2);
}

// The AVX2 kernel adds up to eight vpmaddubsw results in int16 before widening, as many as
// the panel's largest |code| allows (and skips the sign step when no code is negative). Rows
// at each type's largest code (one weight in 32 is 0, so the offset types span a range)
// against activations all +1 (q = 127 everywhere) put the grouped sums at their bound:
// Q5_K/Q5_1's codes of 31 give 4 x 2 x 31 x 127 = 31496, Q6_K's -32 gives 4 x 8128 = 32512,
// the 4-bit types' 8 x 2 x 15 x 127 = 30480 (Q4_0's -8: 8 x 2032).
// A wrapped int16 would be off by 65536 in a dot: bitwise equality with the reference catches it.
TEST(QuantGemm, Avx2GroupedInt16SumsReachTheirBoundWithoutWrapping) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx2))
    GTEST_SKIP() << "no AVX2+FMA+F16C here (CPU or KVCACHE_ISA=scalar)";
  struct Case {
    TensorType type;
    float value;   // every weight but one in 32, which is 0
    int largest;   // the |code| the quantizer gives it
  };
  const Case cases[] = {{TensorType::kQ4_0, -1.0f, 8},  {TensorType::kQ4_1, 1.0f, 15},
                        {TensorType::kQ5_0, -1.0f, 16}, {TensorType::kQ5_1, 1.0f, 31},
                        {TensorType::kQ8_0, -1.0f, 127}, {TensorType::kQ4_K, 1.0f, 15},
                        {TensorType::kQ5_K, 1.0f, 31},  {TensorType::kQ6_K, -1.0f, 32},
                        {TensorType::kMXFP4, -1.5f, 12}};
  const int64_t rows = 9, cols = 512, t = 13;
  for (const Case& c : cases) {
    SCOPED_TRACE(gguf::to_string(c.type));
    const int64_t row_bytes = *gguf::row_bytes(c.type, cols);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
    std::vector<float> dense(static_cast<size_t>(rows * cols), c.value);
    for (size_t i = 0; i < dense.size(); i += 32) dense[i] = 0.0f;
    ASSERT_TRUE(gguf::quantize(c.type, dense, bytes));
    const Weight w = Weight::from_bytes(c.type, rows, cols, std::move(bytes));
    const gguf::BlockGeometry g = *gguf::block_geometry(c.type);
    detail::IntBlock ib;
    int largest = 0;
    for (int sb = 0; sb < g.elements / 32; ++sb) {
      detail::int_block(c.type, w.row_data(0), sb, ib);
      for (int8_t q : ib.w) largest = std::max(largest, std::abs(int{q}));
    }
    ASSERT_EQ(largest, c.largest);
    expect_kernel_equals_reference(w, std::vector<float>(size_t(t * cols), 1.0f), t,
                                   cpu::Isa::kAvx2);
    if (HasFatalFailure()) return;
  }
}

// Every other block type through the same AVX2 kernel, from its integer form (IntBlock):
// Q6_K scales its halves apart, Q4_1/Q5_1/Q4_K/Q5_K add the offset term; K types need cols
// in whole 256-blocks. Rows leave a partial vector, t a token tail.
TEST(QuantGemm, Avx2KernelEqualsTheReferenceBitwiseForEveryBlockType) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx2))
    GTEST_SKIP() << "no AVX2+FMA+F16C here (CPU or KVCACHE_ISA=scalar)";
  for (TensorType type : kBlockTypes)
    for (int64_t cols : {256, 768})
      for (int64_t rows : {3, 17})
        for (int64_t t : {5, 23}) {
          const Weight w = block_weight(type, rows, cols, 60 + rows);
          ASSERT_TRUE(q8_gemm_available(w, cpu::Isa::kAvx2)) << gguf::to_string(type);
          const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 70 + t);
          SCOPED_TRACE(gguf::to_string(type));
          expect_kernel_equals_reference(w, x, t, cpu::Isa::kAvx2);
          if (HasFatalFailure()) return;
        }
}

// The integer product differs from the exact one only by the activation's rounding: each x
// moves by at most half its block's step amax_b / 127, so |y - exact| <= sum_b amax_b / 254 *
// sum_{i in b} |w_i| (plus f32 summation noise).
TEST(QuantGemm, ReferenceIsWithinTheActivationRoundingOfTheExactProduct) {
  const int64_t rows = 7, cols = 512, t = 3;
  for (TensorType type : kBlockTypes) {
    SCOPED_TRACE(gguf::to_string(type));
    const Weight w = block_weight(type, rows, cols, 5);
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      w.row(r, std::span<float>(dense).subspan(static_cast<size_t>(r * cols), cols));
    const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 6);
    std::vector<float> y(static_cast<size_t>(t * rows)), exact(y.size());
    q8_gemm_reference(w, x.data(), y.data(), t, false);
    matmul_reference(x, dense, exact, t, cols, rows, false);
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = 0; r < rows; ++r) {
        double bound = 1e-5 * std::sqrt(double(cols));
        for (int64_t b = 0; b < cols / 32; ++b) {
          double amax = 0.0, wsum = 0.0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
            amax = std::max(amax, std::fabs(double{x[j * cols + i]}));
            wsum += std::fabs(double{dense[r * cols + i]});
          }
          bound += amax / 254.0 * wsum * 1.001;
        }
        const size_t i = static_cast<size_t>(j * rows + r);
        ASSERT_NEAR(y[i], exact[i], bound) << "token " << j << " row " << r;
        EXPECT_NE(y[i], exact[i]);  // the activation really was quantized
      }
  }
}

// matmul's route for Q8_0 by row count and the ISA in force. At most kSmallBatch rows: the
// batched matvec (bitwise its result) at every level. More: the integer GEMM where the matvec
// level is AVX-512 VNNI or AVX2 (bitwise q8_gemm_reference), else (scalar) the f32 tile GEMM
// (bitwise sgemm on the dequantized rows: 40 rows are one tile, and on one thread one sgemm
// call either way).
TEST(QuantGemm, MatmulSendsLongQ8ProductsToTheIntegerGemmAboveScalar) {
  const int64_t rows = 40, cols = 96;
  const Weight w = q8_weight(rows, cols, 8);
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    w.row(r, std::span<float>(dense).subspan(static_cast<size_t>(r * cols), cols));
  const cpu::Isa level = matvec_isa();
  const bool integer = level == cpu::Isa::kAvx512 || level == cpu::Isa::kAvx2;
  EXPECT_EQ(q8_gemm_available(w), integer) << cpu::to_string(level);
  const int threads = cpu::global_pool().size();
  cpu::set_global_threads(1);
  for (int64_t t : {kSmallBatch, kSmallBatch + 1, int64_t{64}}) {
    const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 9);
    std::vector<float> got(static_cast<size_t>(t * rows)), want(got.size());
    matmul(x, w, got, t);
    if (t <= kSmallBatch) {
      matvec_batch(w, x.data(), want.data(), t, false);
    } else if (integer) {
      q8_gemm_reference(w, x.data(), want.data(), t, false);
    } else {
      matmul(x, dense, want, t, cols, rows, false);
    }
    EXPECT_EQ(got, want) << "t " << t << " at " << cpu::to_string(level);
  }
  cpu::set_global_threads(threads);
  EXPECT_FALSE(q8_gemm_available(w, cpu::Isa::kScalar));
  EXPECT_EQ(q8_gemm_available(w, cpu::Isa::kAvx2), matvec_isa_supported(cpu::Isa::kAvx2));
  EXPECT_EQ(q8_gemm_available(w, cpu::Isa::kAvx512), matvec_isa_supported(cpu::Isa::kAvx512));
  const Weight f32 = Weight::from_f32(2, 32, std::vector<float>(64, 1.0f));
  EXPECT_FALSE(q8_gemm_available(f32));
  // Other block types: the AVX2 kernel, at the AVX-512 level too (its own is Q8_0's and
  // MXFP4's), so long Q4_K products are the integer GEMM's there as well.
  const Weight q4 = block_weight(TensorType::kQ4_K, 1, 256, 3);
  EXPECT_EQ(q8_gemm_available(q4, cpu::Isa::kAvx2), matvec_isa_supported(cpu::Isa::kAvx2));
  EXPECT_EQ(q8_gemm_available(q4, cpu::Isa::kAvx512), matvec_isa_supported(cpu::Isa::kAvx512));
  EXPECT_EQ(q8_gemm_available(q4), integer);
  if (integer) {
    const Weight q4big = block_weight(TensorType::kQ4_K, 40, 256, 5);
    const int64_t t = 24;
    const std::vector<float> x = rnd(static_cast<size_t>(t * 256), 11);
    std::vector<float> got(static_cast<size_t>(t * 40)), want(got.size());
    matmul(x, q4big, got, t);
    q8_gemm_reference(q4big, x.data(), want.data(), t, false);
    EXPECT_EQ(got, want) << "Q4_K, 24 rows at " << cpu::to_string(level);
  }
  const Weight f16 = block_weight(TensorType::kF16, 1, 32, 3);
  EXPECT_FALSE(q8_gemm_available(f16, cpu::Isa::kAvx2));
}

}  // namespace
}  // namespace kvcache::kernels
