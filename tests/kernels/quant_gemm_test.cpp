// The Q8_0 integer GEMM of prefill products: the AVX-512 VNNI kernel against the scalar
// reference, bitwise, over shapes that leave partial row vectors, partial token tiles and odd
// block counts, 1 and 2 threads; the reference against the exact product within the
// activation's rounding; and matmul's dispatch of T > kSmallBatch to it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "random_values.h"

namespace kvcache::engine {
namespace {

using testing::rnd;

Weight q8_weight(int64_t rows, int64_t cols, uint64_t seed) {
  const std::vector<float> dense = rnd(static_cast<size_t>(rows * cols), seed);
  const int64_t row_bytes = *gguf::row_bytes(gguf::TensorType::kQ8_0, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
  EXPECT_TRUE(gguf::quantize(gguf::TensorType::kQ8_0, dense, bytes));
  return Weight::from_bytes(gguf::TensorType::kQ8_0, rows, cols, std::move(bytes));
}

std::string shape(int64_t rows, int64_t cols, int64_t t) {
  return std::to_string(t) + "x" + std::to_string(cols) + " * (" + std::to_string(rows) + "x" +
         std::to_string(cols) + ")^T";
}

// Rows 1..100 leave the last 16-row vector partial or pair an odd vector out; t covers the
// 6-token tile and every tail (1..5); cols 1, 3 and 10 blocks. Both sum block by block with
// the same fma, so the results are equal bit for bit.
TEST(QuantGemm, Avx512KernelEqualsTheReferenceBitwise) {
  if (!q8_gemm_available(q8_weight(1, 32, 1), cpu::Isa::kAvx512))
    GTEST_SKIP() << "no AVX-512 VNNI here (CPU or KVCACHE_ISA)";
  for (int64_t cols : {32, 96, 320})
    for (int64_t rows : {1, 15, 16, 17, 33, 100})
      for (int64_t t : {1, 5, 6, 7, 17, 40, 100}) {
        const Weight w = q8_weight(rows, cols, 10 + rows);
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 20 + t);
        const std::vector<float> y0 = rnd(static_cast<size_t>(t * rows), 30);
        for (bool acc : {false, true}) {
          std::vector<float> want = y0;
          q8_gemm_reference(w, x.data(), want.data(), t, acc);
          for (int threads : {1, 2}) {
            cpu::set_global_threads(threads);
            std::vector<float> got = y0;
            q8_gemm(w, x.data(), got.data(), t, acc, cpu::Isa::kAvx512);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_EQ(got[i], want[i]) << shape(rows, cols, t) << " at " << i << " acc "
                                         << acc << " threads " << threads;
          }
        }
      }
  cpu::set_global_threads(2);
}

// The integer product differs from the exact one only by the activation's rounding: each x
// moves by at most half its block's step amax_b / 127, so |y - exact| <= sum_b amax_b / 254 *
// sum_{i in b} |w_i| (plus f32 summation noise).
TEST(QuantGemm, ReferenceIsWithinTheActivationRoundingOfTheExactProduct) {
  const int64_t rows = 7, cols = 320, t = 3;
  const Weight w = q8_weight(rows, cols, 5);
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

// matmul's route for Q8_0 by row count and the ISA in force. At most kSmallBatch rows: the
// batched matvec (bitwise its result) at every level. More: the integer GEMM where the matvec
// level is AVX-512 VNNI (bitwise q8_gemm_reference), else the f32 tile GEMM (bitwise sgemm on
// the dequantized rows: 40 rows are one tile, and on one thread one sgemm call either way).
TEST(QuantGemm, MatmulSendsLongQ8ProductsToTheIntegerGemmWhereVnniRuns) {
  const int64_t rows = 40, cols = 96;
  const Weight w = q8_weight(rows, cols, 8);
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    w.row(r, std::span<float>(dense).subspan(static_cast<size_t>(r * cols), cols));
  const cpu::Isa level = matvec_isa();
  const bool vnni = level == cpu::Isa::kAvx512;
  EXPECT_EQ(q8_gemm_available(w), vnni) << cpu::to_string(level);
  const int threads = cpu::global_pool().size();
  cpu::set_global_threads(1);
  for (int64_t t : {kSmallBatch, kSmallBatch + 1, int64_t{64}}) {
    const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 9);
    std::vector<float> got(static_cast<size_t>(t * rows)), want(got.size());
    matmul(x, w, got, t);
    if (t <= kSmallBatch) {
      matvec_batch(w, x.data(), want.data(), t, false);
    } else if (vnni) {
      q8_gemm_reference(w, x.data(), want.data(), t, false);
    } else {
      matmul(x, dense, want, t, cols, rows, false);
    }
    EXPECT_EQ(got, want) << "t " << t << " at " << cpu::to_string(level);
  }
  cpu::set_global_threads(threads);
  EXPECT_FALSE(q8_gemm_available(w, cpu::Isa::kScalar));
  EXPECT_FALSE(q8_gemm_available(w, cpu::Isa::kAvx2));
  const Weight f32 = Weight::from_f32(2, 32, std::vector<float>(64, 1.0f));
  EXPECT_FALSE(q8_gemm_available(f32));
}

}  // namespace
}  // namespace kvcache::engine
