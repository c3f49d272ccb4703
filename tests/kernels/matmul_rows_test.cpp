// The row-range product (weight.h matmul_rows) against the whole matmul for every weight type
// experts come in: ranges of odd sizes, computed in any order, put together are bitwise the
// matmul of 1 to kSmallBatch rows at every ISA (F32, through BLAS, within rounding); the input
// is quantized once for every range; row_chunk's split depends on the shape alone.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/isa.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "program/gguf_quant.h"
#include "random_values.h"

namespace kvcache::kernels {
namespace {

using gguf::TensorType;

const TensorType kExpertTypes[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ4_0,
    TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0,
    TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kMXFP4};

// Rows [0, 301) in pieces of 1, 69, 131 and 100 rows (not multiples of 4), last piece first.
const int64_t kCuts[][2] = {{201, 301}, {0, 1}, {70, 201}, {1, 70}};

std::vector<float> by_ranges(const Weight& w, const std::vector<float>& x, int64_t t,
                             std::vector<float> y, bool accumulate) {
  ProductInput in;
  in.set(x.data(), t, w.cols, product_quantizes(w.type));
  for (const auto& c : kCuts) matmul_rows(w, in, c[0], c[1], y.data(), accumulate);
  return y;
}

TEST(MatmulRows, RangesPutTogetherEqualTheWholeProductForEveryExpertType) {
  cpu::set_global_threads(2);
  const int64_t rows = 301, cols = 256;  // 256: one super-block of the K types
  for (TensorType type : kExpertTypes)
    for (cpu::Isa ceiling : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (!cpu::isa_supported(ceiling)) continue;
      cpu::ScopedIsaCeiling scoped(ceiling);
      const Weight w = testing::random_weight(type, rows, cols, 41);
      ASSERT_EQ(w.rows, rows) << gguf::to_string(type);
      for (int64_t t : {int64_t{1}, int64_t{5}, kSmallBatch})
        for (bool acc : {false, true}) {
          const std::vector<float> x = testing::rnd(static_cast<size_t>(t * cols), 42);
          const std::vector<float> y0 = testing::rnd(static_cast<size_t>(t * rows), 43);
          std::vector<float> want = y0;
          matmul(x, w, want, t, acc);
          const std::vector<float> got = by_ranges(w, x, t, y0, acc);
          for (size_t i = 0; i < want.size(); ++i) {
            if (type == TensorType::kF32) {  // BLAS blocks a range its own way: rounding
              ASSERT_NEAR(got[i], want[i], 2e-5 * (std::sqrt(double(cols)) + std::fabs(want[i])))
                  << "t " << t << " acc " << acc << " at " << i;
            } else {
              ASSERT_EQ(got[i], want[i]) << gguf::to_string(type) << " t " << t << " acc "
                                         << acc << " isa " << cpu::to_string(ceiling)
                                         << " at " << i;
            }
          }
        }
    }
}

// One set() serves products with several weights of the same width (a layer's experts): each
// equals its own matmul bitwise.
TEST(MatmulRows, OneQuantizedInputServesSeveralWeightsOfTheSameWidth) {
  const Weight a = testing::random_weight(TensorType::kQ4_K, 64, 512, 1);
  const Weight b = testing::random_weight(TensorType::kQ8_0, 96, 512, 2);
  const std::vector<float> x = testing::rnd(3 * 512, 3);
  ProductInput in;
  in.set(x.data(), 3, 512, true);
  ASSERT_TRUE(in.quantized);
  for (const Weight* w : {&a, &b}) {
    std::vector<float> want(static_cast<size_t>(3 * w->rows)), got(want.size());
    matmul(x, *w, want, 3);
    matmul_rows(*w, in, 0, w->rows, got.data());
    EXPECT_EQ(got, want) << gguf::to_string(w->type);
  }
}

TEST(MatmulRows, RowChunkIsAboutAQuarterMibOfRowsInMultiplesOfFour) {
  // Q8_0 at 2048 columns: 64 blocks of 34 bytes = 2176 bytes a row; 262144 / 2176 = 120.
  EXPECT_EQ(row_chunk(testing::random_weight(TensorType::kQ8_0, 8, 2048, 1)), 120);
  // Q4_0 at 2048: 64 x 18 = 1152 bytes; 262144 / 1152 = 227 -> 224.
  EXPECT_EQ(row_chunk(testing::random_weight(TensorType::kQ4_0, 8, 2048, 1)), 224);
  // F32 rows of 131072 values (512 KiB) are wider than the chunk: at least 4 rows.
  EXPECT_EQ(row_chunk(testing::random_weight(TensorType::kF32, 4, 131072, 1)), 4);
}

}  // namespace
}  // namespace kvcache::kernels
