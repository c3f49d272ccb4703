// The matrix-vector kernels of weights kept in their file format: every ISA this machine has
// and 1/2 threads against the scalar kernel, the scalar integer kernel against the double
// reference within the activation-quantization bound, T > 1 products against the reference,
// engine logits of quantized tiny models against the same model decoded to f32, and
// malformed or unsupported quantized tensors refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "engine_test_util.h"
#include "program/gguf_quant.h"
#include "test_model.h"
#include "random_values.h"

namespace kvcache::kernels {
namespace {

using gguf::TensorType;

using testing::rnd;

Weight quantized(TensorType type, int64_t rows, int64_t cols, uint64_t seed) {
  Weight w = testing::random_weight(type, rows, cols, seed);
  EXPECT_EQ(w.rows, rows) << gguf::to_string(type) << " cannot encode " << cols << " columns";
  return w;
}

const TensorType kTypes[] = {TensorType::kF16,  TensorType::kBF16, TensorType::kQ4_0,
                             TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1,
                             TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ5_K,
                             TensorType::kQ6_K, TensorType::kMXFP4};

std::vector<int64_t> col_grid(TensorType t) {
  const int64_t block = gguf::block_geometry(t)->elements;
  if (block == 1) return {1, 17, 64, 100};
  if (block == 32) return {32, 96, 320};  // 1, 3 and 10 blocks
  return {256, 768};                      // 1 and 3 super-blocks
}

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v = {cpu::Isa::kScalar};
  for (cpu::Isa i : {cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (matvec_isa_supported(i)) v.push_back(i);
  return v;
}

// Every ISA computes the scalar kernel's integer sums: only the f32 summation order differs.
TEST(QuantMatvec, EveryIsaAndThreadCountMatchesTheScalarKernel) {
  for (TensorType type : kTypes)
    for (int64_t cols : col_grid(type))
      for (int64_t rows : {1, 7, 130, 301}) {
        const Weight w = quantized(type, rows, cols, 100 + rows);
        const std::vector<float> x = rnd(static_cast<size_t>(cols), 7);
        const std::vector<float> y0 = rnd(static_cast<size_t>(rows), 8);
        std::vector<float> want = y0;
        cpu::set_global_threads(1);
        matvec(w, x.data(), want.data(), /*accumulate=*/true, cpu::Isa::kScalar);
        for (int threads : {1, 2})
          for (cpu::Isa isa : isas())
            for (bool acc : {false, true}) {
              cpu::set_global_threads(threads);
              std::vector<float> y = y0;
              matvec(w, x.data(), y.data(), acc, isa);
              for (int64_t r = 0; r < rows; ++r) {
                const double expect = acc ? want[r] : want[r] - y0[r];
                ASSERT_NEAR(y[r], expect, 2e-5 * (std::sqrt(double(cols)) + std::fabs(expect)))
                    << gguf::to_string(type) << " " << rows << "x" << cols << " row " << r
                    << " isa " << cpu::to_string(isa) << " threads " << threads << " acc " << acc;
              }
            }
      }
  cpu::set_global_threads(2);
}

// The integer path differs from the exact product only by the activation's rounding: each x
// moves by at most half its block's step d_b, so |y - ref| <= sum_b d_b / 2 * sum_{i in b} |w_i|
// (plus f32 summation noise). F16/BF16 use x as is: only summation noise.
TEST(QuantMatvec, ScalarKernelIsWithinTheActivationRoundingOfTheDoubleReference) {
  for (TensorType type : kTypes)
    for (int64_t cols : col_grid(type)) {
      const int64_t rows = 9;
      const Weight w = quantized(type, rows, cols, 3);
      const std::vector<float> x = rnd(static_cast<size_t>(cols), 4);
      std::vector<float> y(rows), ref(rows), row(static_cast<size_t>(cols));
      matvec(w, x.data(), y.data(), false, cpu::Isa::kScalar);
      matvec_reference(w, x.data(), ref.data(), false);
      const bool blocks = gguf::block_geometry(type)->elements > 1;
      for (int64_t r = 0; r < rows; ++r) {
        w.row(r, row);
        double bound = 1e-5 * std::sqrt(double(cols));
        for (int64_t b = 0; blocks && b < cols / 32; ++b) {
          double amax = 0.0, wsum = 0.0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
            amax = std::max(amax, std::fabs(double{x[i]}));
            wsum += std::fabs(double{row[i]});
          }
          bound += amax / 127.0 / 2.0 * wsum * 1.001;
        }
        ASSERT_NEAR(y[r], ref[r], bound) << gguf::to_string(type) << " cols " << cols;
        if (blocks) {
          EXPECT_NE(y[r], ref[r]);  // the activation really was quantized
        }
      }
    }
}

// T > 1 decodes tiles of rows to f32 and runs sgemm: the double reference on decoded rows.
// (A type the integer GEMM takes at the level in force — every block type at AVX2, Q8_0 at
// AVX-512 VNNI — is tested there: quant_gemm_test.cpp; the scalar ceiling runs them all here.)
TEST(QuantMatvec, PrefillProductsMatchTheReferenceOverTilesAndThreads) {
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K,
                          TensorType::kBF16, TensorType::kQ5_1, TensorType::kMXFP4})
    for (int threads : {1, 2})
      for (int64_t t : {kSmallBatch + 1, kSmallBatch + 4}) {  // above: decoded tiles + sgemm
        cpu::set_global_threads(threads);
        const int64_t rows = 300, cols = 256;  // two tiles of 256 rows, the second partial
        const Weight w = quantized(type, rows, cols, 11);
        if (q8_gemm_available(w)) continue;
        std::vector<float> dense(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
          w.row(r, std::span<float>(dense).subspan(static_cast<size_t>(r * cols), cols));
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 12);
        std::vector<float> y = rnd(static_cast<size_t>(t * rows), 13), want = y;
        matmul(x, w, y, t, /*accumulate=*/true);
        matmul_reference(x, dense, want, t, cols, rows, true);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + std::fabs(want[i])))
              << gguf::to_string(type) << " threads " << threads << " t " << t;
      }
  cpu::set_global_threads(2);
}

// Rows whose every product sits at the largest magnitude the type holds, against activations
// that all quantize to +127 or -127: the SIMD kernels sum each block's products in 16-bit
// lanes before widening (up to 8 x 2 x 15 x 127 = 30480 for Q4_K nibbles, 2 x 63 x 127 =
// 16002 for Q6_K, 2 x 128 x 127 = 32512 for Q8_0's -128, 8 x 2 x 15 x 127 = 30480 for Q4_0's
// and Q4_1's nibble pairs, 2 x 2 x 31 x 127 = 15748 for Q5_K's), where a wrap
// would move a row's sum by 65536 (more than the sub-block's whole sum). The scalar kernel
// (int32 sums) gives the exact dot product of the decoded row with x (within the f32 rounding
// of the activation's block scale 1/127); every ISA must give the scalar kernel's result
// (summation order aside).
std::vector<uint8_t> extreme_row(TensorType type, int64_t cols, int variant) {
  std::vector<uint8_t> row(static_cast<size_t>(*gguf::row_bytes(type, cols)));
  const int64_t bytes = gguf::block_geometry(type)->bytes;
  for (size_t b = 0; b < row.size(); b += static_cast<size_t>(bytes)) {
    uint8_t* p = row.data() + b;
    switch (type) {
      case TensorType::kQ8_0:  // scale 1, then 32 values of 127 or -128
        store_f16(p, 1.0f);
        std::memset(p + 2, variant == 0 ? 0x7F : 0x80, 32);
        break;
      case TensorType::kQ4_1:  // scale 1, min -8 (variant 1: -1 / 2), then 32 values of 15
        store_f16(p, 1.0f);
        store_f16(p + 2, variant == 0 ? -8.0f : -0.5f);
        std::memset(p + 4, 0xFF, 16);
        break;
      case TensorType::kQ4_K:  // d 1, dmin 1 / 2 (variant 1: 0); scales, mins, nibbles at max
        store_f16(p, 1.0f);
        store_f16(p + 2, variant == 0 ? 0.5f : 0.0f);
        std::memset(p + 4, 0xFF, 140);
        break;
      case TensorType::kQ5_K:  // as Q4_K, with every fifth bit set: every value 31
        store_f16(p, 1.0f);
        store_f16(p + 2, variant == 0 ? 0.5f : 0.0f);
        std::memset(p + 4, 0xFF, 172);
        break;
      case TensorType::kQ6_K:  // every value 63 - 32 = 31; scales 127 (variant 1: -128); d 1
        std::memset(p, 0xFF, 192);
        std::memset(p + 192, variant == 0 ? 0x7F : 0x80, 16);
        store_f16(p + 208, 1.0f);
        break;
      case TensorType::kQ4_0:  // scale 1, then 32 values of 15 - 8 = 7 (variant 1: 0 - 8)
        store_f16(p, 1.0f);
        std::memset(p + 2, variant == 0 ? 0xFF : 0x00, 16);
        break;
      case TensorType::kMXFP4:  // step 1 (e = 127); every code 6 (variant 1: -6), 12 doubled
        p[0] = 127;
        std::memset(p + 1, variant == 0 ? 0x77 : 0xFF, 16);
        break;
      default: ADD_FAILURE() << "no extreme row for " << gguf::to_string(type);
    }
  }
  return row;
}

TEST(QuantMatvec, ExtremeBlocksKeepEveryIsasIntegerSumsExact) {
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                          TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                          TensorType::kMXFP4})
    for (int64_t cols : {int64_t{256}, int64_t{768}})
      for (float sign : {1.0f, -1.0f}) {
        const int64_t rows = 3;  // two extreme rows and a random one between them
        std::vector<uint8_t> bytes = extreme_row(type, cols, 0);
        const std::vector<uint8_t> other = extreme_row(type, cols, 1);
        const Weight rnd_row = quantized(type, 1, cols, 61);
        bytes.insert(bytes.end(), rnd_row.bytes.begin(), rnd_row.bytes.end());
        bytes.insert(bytes.end(), other.begin(), other.end());
        const Weight w = Weight::from_bytes(type, rows, cols, std::move(bytes));
        const std::vector<float> x(static_cast<size_t>(cols), sign);  // each q = sign * 127
        std::vector<float> want(rows), dense(static_cast<size_t>(cols));
        cpu::set_global_threads(1);
        matvec(w, x.data(), want.data(), false, cpu::Isa::kScalar);
        for (int64_t r : {int64_t{0}, int64_t{2}}) {  // the exact value of the extreme rows
          w.row(r, dense);
          double exact = 0.0;
          for (float v : dense) exact += double{v} * sign;
          ASSERT_NEAR(want[r], exact, 1e-5 * std::fabs(exact))
              << gguf::to_string(type) << " row " << r;
        }
        for (cpu::Isa isa : isas())
          for (int threads : {1, 2}) {
            cpu::set_global_threads(threads);
            std::vector<float> y(rows);
            matvec(w, x.data(), y.data(), false, isa);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_NEAR(y[r], want[r], 2e-5 * (std::sqrt(double(cols)) + std::fabs(want[r])))
                  << gguf::to_string(type) << " cols " << cols << " sign " << sign << " row "
                  << r << " isa " << cpu::to_string(isa) << " threads " << threads;
          }
      }
  cpu::set_global_threads(2);
}

// MXFP4's block scale 2^(e - 128) times the doubled codes, over the exponent range (the SIMD
// kernels build the scale from the exponent's bits, subnormal below e = 2): the scalar kernel
// against the double reference within the activation's rounding, and every ISA against the
// scalar kernel within f32 summation noise of sum |w x|. A row's blocks take exponents 0, 1,
// 2, 60, 127, 128, 190 in turn (scales 2^-128 .. 2^62); 21 blocks: two of eight and a tail.
TEST(QuantMatvec, Mxfp4ExponentsAcrossTheRangeGiveTheSameProductsOnEveryIsa) {
  const uint8_t exps[] = {0, 1, 2, 60, 127, 128, 190};
  const int64_t rows = 5, cols = 32 * 21;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 32 * 17));
  for (size_t b = 0; b < bytes.size() / 17; ++b) {
    uint8_t* p = bytes.data() + 17 * b;
    p[0] = exps[(b * 3) % 7];
    for (int j = 0; j < 16; ++j) p[1 + j] = static_cast<uint8_t>(((j + b) % 16) | ((15 - j) << 4));
  }
  const Weight w = Weight::from_bytes(TensorType::kMXFP4, rows, cols, std::move(bytes));
  const std::vector<float> x = rnd(static_cast<size_t>(cols), 91);
  std::vector<float> dense(static_cast<size_t>(cols)), want(rows), ref(rows);
  matvec(w, x.data(), want.data(), false, cpu::Isa::kScalar);
  matvec_reference(w, x.data(), ref.data(), false);
  for (int64_t r = 0; r < rows; ++r) {
    w.row(r, dense);
    double bound = 0.0, abs_sum = 0.0;
    for (int64_t b = 0; b < cols / 32; ++b) {
      double amax = 0.0, wsum = 0.0;
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
        amax = std::max(amax, std::fabs(double{x[i]}));
        wsum += std::fabs(double{dense[i]});
        abs_sum += std::fabs(double{dense[i]} * x[i]);
      }
      bound += amax / 127.0 / 2.0 * wsum * 1.001;
    }
    ASSERT_NEAR(want[r], ref[r], bound) << "row " << r;
    for (cpu::Isa isa : isas()) {
      std::vector<float> y(rows);
      matvec(w, x.data(), y.data(), false, isa);
      ASSERT_NEAR(y[r], want[r], 1e-5 * abs_sum) << "row " << r << " isa " << cpu::to_string(isa);
    }
  }
  EXPECT_GT(std::fabs(ref[0]), 1e12);  // the 2^62 blocks count: the large scales were applied
}

// The AVX2 activation quantizer (what matvec runs above the scalar ceiling) gives the scalar
// one's q, d and sums bit for bit: blocks of mixed scales, an all-zero block, values on the
// rounding ties of x / d, and a NaN (skipped by the maximum, its q the int's low byte: 0).
TEST(QuantMatvec, Avx2ActivationQuantizationEqualsTheScalarOneBitwise) {
  const detail::QuantizeFn simd = detail::avx2_quantize();
  if (simd == nullptr || !matvec_isa_supported(cpu::Isa::kAvx2))
    GTEST_SKIP() << "no AVX2+FMA+F16C here (CPU or KVCACHE_ISA)";
  std::vector<float> x = rnd(32 * 12, 71);
  for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] *= 1e4f;   // block 1: large
  for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(64 + i)] = 0.0f;    // block 2: zero
  for (int64_t i = 0; i < 32; ++i)  // block 3: amax 127, so x / d = x: ties at k + 0.5
    x[static_cast<size_t>(96 + i)] = i == 0 ? 127.0f : static_cast<float>(i) - 16.5f;
  x[static_cast<size_t>(130)] = std::nanf("");  // block 4
  Q8Activations want, got;
  detail::quantize_activations_scalar(x.data(), static_cast<int64_t>(x.size()), want);
  simd(x.data(), static_cast<int64_t>(x.size()), got);
  EXPECT_EQ(got.blocks, want.blocks);
  EXPECT_EQ(got.q, want.q);
  EXPECT_EQ(got.sum16, want.sum16);
  EXPECT_EQ(got.sum4, want.sum4);
  ASSERT_EQ(got.d.size(), want.d.size());
  EXPECT_EQ(std::memcmp(got.d.data(), want.d.data(), 4 * want.d.size()), 0);
  EXPECT_EQ(std::memcmp(got.dsum16.data(), want.dsum16.data(), 4 * want.dsum16.size()), 0);
  EXPECT_EQ(std::memcmp(got.dsum.data(), want.dsum.data(), 4 * want.dsum.size()), 0);
  EXPECT_EQ(got.q_pairs, want.q_pairs);
  EXPECT_EQ(want.q[96 + 1], -16);  // -15.5 rounds to the even -16
  EXPECT_EQ(want.q[96 + 2], -14);  // -14.5 to -14
  EXPECT_EQ(want.q[130], 0);
}

// q_pairs regroups each whole group of eight blocks for the two-blocks-per-vector kernels
// (Q4_0, MXFP4): 64 bytes per pair k < 4, the first halves of blocks k and k + 4, then their
// second halves. 20 blocks: two whole groups (512 bytes); the last four blocks are left out.
// int_blocks (a whole block at once: the prefill panels' packing) gives every sub-block
// exactly what int_block gives it alone, in every block type.
TEST(QuantMatvec, IntBlocksEqualsIntBlockForEverySubBlock) {
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                          TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kMXFP4}) {
    SCOPED_TRACE(gguf::to_string(type));
    const Weight w = testing::random_weight(type, 3, 512, 17);
    ASSERT_EQ(w.rows, 3);
    const gguf::BlockGeometry g = *gguf::block_geometry(type);
    const int per_block = static_cast<int>(g.elements / 32);
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t blk = 0; blk < 512 / g.elements; ++blk) {
        const uint8_t* b = w.row_data(r) + blk * g.bytes;
        detail::IntBlock all[8];
        detail::int_blocks(type, b, all);
        for (int sb = 0; sb < per_block; ++sb) {
          detail::IntBlock one;
          detail::int_block(type, b, sb, one);
          ASSERT_EQ(std::memcmp(one.w, all[sb].w, 32), 0) << "block " << blk << " sub " << sb;
          ASSERT_EQ(one.s[0], all[sb].s[0]);
          ASSERT_EQ(one.s[1], all[sb].s[1]);
          ASSERT_EQ(one.c, all[sb].c);
        }
      }
  }
}

TEST(QuantMatvec, PairedActivationsHoldTheHalvesOfBlocksKAndKPlusFour) {
  Q8Activations a;
  std::vector<float> x(32 * 20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) - 48.0f;
  detail::quantize_activations_scalar(x.data(), static_cast<int64_t>(x.size()), a);
  ASSERT_EQ(a.q_pairs.size(), 512u);
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t j = 0; j < 16; ++j) {
        const int8_t* pair = a.q_pairs.data() + 256 * g + 64 * k;
        const int8_t* lo = a.q.data() + 32 * (8 * g + k);  // block 8 g + k
        const int8_t* hi = lo + 32 * 4;                      // block 8 g + k + 4
        ASSERT_EQ(pair[j], lo[j]) << g << " " << k << " " << j;
        ASSERT_EQ(pair[16 + j], hi[j]) << g << " " << k << " " << j;
        ASSERT_EQ(pair[32 + j], lo[16 + j]) << g << " " << k << " " << j;
        ASSERT_EQ(pair[48 + j], hi[16 + j]) << g << " " << k << " " << j;
      }
  // Pair 1 of group 1 opens with block 9's first value: x[288] = 288 % 97 - 48 = 46, in a block
  // whose amax is 48 (values 46..48, -48..): q = lrint(46 * 127 / 48) = 122.
  EXPECT_EQ(a.q_pairs[256 + 64], 122);
}

// A batched decode step (2..kSmallBatch rows) gives every row bitwise what its product alone
// gives, on every ISA: the same row sums over chunks of weight rows shared by the batch (Q8_0,
// the K types and MXFP4 four or two activation rows at a time, an odd count's last alone). F16 /
// BF16 also run column counts with a tail after the last 16 (100, 17) and a row count that is
// not a multiple of the 4-row tiles (301); 32-value block types a row of 10 blocks (the SIMD
// kernels take 8 at a time, then the last 2), K types one and three super-blocks.
TEST(QuantMatvec, BatchedDecodeRowsEqualTheirSingleRowProducts) {
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ5_K,
                          TensorType::kQ6_K, TensorType::kBF16, TensorType::kQ5_1,
                          TensorType::kF16, TensorType::kMXFP4})
    for (int64_t cols : gguf::block_geometry(type)->elements == 1
                            ? std::vector<int64_t>{256, 100, 17}
                            : std::vector<int64_t>{256, gguf::block_geometry(type)->elements == 32
                                                            ? int64_t{320}
                                                            : int64_t{768}})
      for (int threads : {1, 2})
        for (cpu::Isa isa : isas()) {
          cpu::set_global_threads(threads);
          const int64_t rows = 301;
          const Weight w = quantized(type, rows, cols, 21);
          for (int64_t t : {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{7}, kSmallBatch}) {
            const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 22);
            std::vector<float> y(static_cast<size_t>(t * rows));
            matvec_batch(w, x.data(), y.data(), t, /*accumulate=*/false, isa);
            for (int64_t j = 0; j < t; ++j) {
              std::vector<float> one(static_cast<size_t>(rows));
              matvec(w, x.data() + j * cols, one.data(), /*accumulate=*/false, isa);
              for (int64_t r = 0; r < rows; ++r)
                ASSERT_EQ(y[static_cast<size_t>(j * rows + r)], one[static_cast<size_t>(r)])
                    << gguf::to_string(type) << " cols " << cols << " threads " << threads
                    << " isa " << cpu::to_string(isa) << " row " << j << " of " << t;
            }
          }
        }
  cpu::set_global_threads(2);
}

// A layer's q/k/v or gate/up products through matmul_shared: each output bitwise what matmul
// gives that weight alone, with weights of different types and row counts in one dispatch
// (one of them too small to share out alone), accumulation kept per product, for t from 1 to
// past kSmallBatch (where each product goes through matmul: the GEMM) and with an F32 weight
// (BLAS: matmul per product); 1 and 2 threads.
TEST(QuantMatvec, SharedInputProductsEqualEachProductAlone) {
  const int64_t cols = 256;
  const std::vector<std::vector<std::pair<TensorType, int64_t>>> groups = {
      {{TensorType::kQ8_0, 300}, {TensorType::kQ6_K, 76}, {TensorType::kQ4_K, 140}},
      {{TensorType::kF16, 200}, {TensorType::kMXFP4, 64}},
      {{TensorType::kQ8_0, 96}, {TensorType::kF32, 130}}};
  for (int threads : {1, 2})
    for (const auto& group : groups)
      for (int64_t t : {int64_t{1}, int64_t{3}, kSmallBatch, kSmallBatch + 3}) {
        cpu::set_global_threads(threads);
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 31);
        std::vector<Weight> ws;
        std::vector<std::vector<float>> shared, alone;
        for (size_t i = 0; i < group.size(); ++i) {
          ws.push_back(quantized(group[i].first, group[i].second, cols, 40 + i));
          const std::vector<float> start = rnd(static_cast<size_t>(t * group[i].second), 50 + i);
          shared.push_back(start);
          alone.push_back(start);
        }
        std::vector<SharedProduct> products;
        for (size_t i = 0; i < ws.size(); ++i) {
          const bool accumulate = i == 1;
          products.push_back({&ws[i], shared[i], accumulate});
          matmul(x, ws[i], alone[i], t, accumulate);
        }
        matmul_shared(x, t, products);
        for (size_t i = 0; i < ws.size(); ++i)
          for (size_t k = 0; k < alone[i].size(); ++k)
            ASSERT_EQ(shared[i][k], alone[i][k])
                << gguf::to_string(group[i].first) << " t " << t << " threads " << threads
                << " value " << k;
      }
  cpu::set_global_threads(2);
}

// The 512-bit F16/BF16 kernels hold the 256-bit kernel's two accumulators in the halves of one
// register and reduce them the same way: every product is bitwise the AVX2 one, alone or
// batched, so a session's numbers do not depend on which kernel ran them either.
TEST(QuantMatvec, HalfPrecisionAvx512ProductsEqualTheAvx2OnesBitwise) {
  if (!matvec_isa_supported(cpu::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (CPU or KVCACHE_ISA)";
  for (TensorType type : {TensorType::kF16, TensorType::kBF16})
    for (int64_t cols : {16, 100, 768})
      for (int64_t t : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{11}, kSmallBatch}) {
        const int64_t rows = 45;
        const Weight w = quantized(type, rows, cols, 31);
        const std::vector<float> x = rnd(static_cast<size_t>(t * cols), 32);
        const std::vector<float> y0 = rnd(static_cast<size_t>(t * rows), 33);
        std::vector<float> a = y0, b = y0;
        matvec_batch(w, x.data(), a.data(), t, /*accumulate=*/true, cpu::Isa::kAvx2);
        matvec_batch(w, x.data(), b.data(), t, /*accumulate=*/true, cpu::Isa::kAvx512);
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(a[i], b[i]) << gguf::to_string(type) << " cols " << cols << " t " << t
                                << " index " << i;
      }
}

// The kernels dispatch through cpu/isa.h: under a scalar ceiling kAuto runs the scalar
// kernel, bitwise, for every type.
TEST(QuantMatvec, AutoUnderAScalarCeilingRunsTheScalarKernel) {
  for (TensorType type : kTypes) {
    const int64_t rows = 37, cols = col_grid(type).back();
    const Weight w = quantized(type, rows, cols, 41);
    const std::vector<float> x = rnd(static_cast<size_t>(cols), 42);
    std::vector<float> scalar(static_cast<size_t>(rows)), capped(scalar.size(), -9.0f);
    matvec(w, x.data(), scalar.data(), false, cpu::Isa::kScalar);
    {
      cpu::ScopedIsaCeiling cap(cpu::Isa::kScalar);
      EXPECT_EQ(matvec_best_isa(), cpu::Isa::kScalar);
      matvec(w, x.data(), capped.data(), false, cpu::Isa::kAuto);
    }
    EXPECT_EQ(std::memcmp(scalar.data(), capped.data(), scalar.size() * sizeof(float)), 0)
        << gguf::to_string(type);
  }
}

// The matvec dispatch's own report of the level it runs, under each process ceiling (what
// KVCACHE_ISA sets); the integer GEMM runs at AVX2 and above, so the scalar ceiling alone
// leaves it.
TEST(QuantMatvec, DispatchRunsTheLevelTheProcessCeilingAllows) {
  const Weight w = quantized(TensorType::kQ8_0, 4, 64, 51);
  const cpu::Isa env = cpu::isa_ceiling();
  cpu::set_isa_ceiling(cpu::Isa::kScalar);
  EXPECT_EQ(matvec_isa(), cpu::Isa::kScalar);
  EXPECT_EQ(matvec_isa(cpu::Isa::kAvx512), cpu::Isa::kScalar);
  EXPECT_EQ(matvec_best_isa(), cpu::Isa::kScalar);
  EXPECT_FALSE(q8_gemm_available(w));
  const bool avx2 = cpu::widest_isa(cpu::cpu_features(), cpu::KernelFamily::kInt8Dot) !=
                    cpu::Isa::kScalar;
  cpu::set_isa_ceiling(cpu::Isa::kAvx2);
  const cpu::Isa at_avx2 = matvec_isa(), asked_wide = matvec_isa(cpu::Isa::kAvx512);
  const bool gemm_at_avx2 = q8_gemm_available(w);
  cpu::set_isa_ceiling(env);
  EXPECT_EQ(gemm_at_avx2, avx2);
  if (!avx2) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C: only the scalar ceiling applies";
  EXPECT_EQ(at_avx2, cpu::Isa::kAvx2);
  EXPECT_EQ(asked_wide, cpu::Isa::kAvx2);
}

// A tiny model stored as each type: the engine on the file's blocks against the same model
// decoded to f32 at load (keep_quantized = false). The only difference is the int8 rounding
// of the activations in the T = 1 products (block types), so the tolerance (max |diff| over
// the logit scale) is set by that rounding, not by the weight type: measured 1.6e-2 (Q4_K) to
// 2.1e-2 (Q5_K) on this model; BF16 keeps f32 activations (measured 4e-7).
struct LogitCase {
  TensorType type;
  double tol;
};

class QuantizedModel : public ::testing::TestWithParam<LogitCase> {};

TEST_P(QuantizedModel, LogitsMatchTheSameModelDecodedToF32) {
  engine::testing::TinySpec s;
  s.d_model = 256;  // every matrix's row is whole K-quant super-blocks
  s.d_ff = 512;
  s.q_heads = 4;
  s.head_dim = 64;
  s.store_as = GetParam().type;
  s.cache_windows = {0, 32, 0};  // a window wide enough for a 20-token prefill chunk
  s.max_step_tokens = 20;
  gguf::GgufFile f = engine::testing::tiny_file(s);
  engine::Model kept = engine::Model::load(f).value();
  engine::Model wide = engine::Model::load(f, engine::LoadOptions{true, false}).value();
  EXPECT_EQ(kept.layers()[0].wq.type, GetParam().type);
  EXPECT_EQ(kept.layers()[0].wq.bytes.data(), f.tensor("blk.0.attn_q.weight")->bytes.data());
  // BF16 is not a block type: it stays BF16 in both, with exact f32 activations.
  const bool block = GetParam().type != TensorType::kBF16;
  EXPECT_EQ(wide.layers()[0].wq.type, block ? TensorType::kF32 : TensorType::kBF16);
  const std::vector<int32_t> tokens = engine::testing::some_tokens(20, 260, 5);
  std::vector<double> want = engine::reference_logits(wide, tokens);
  engine::CacheOptions o;
  o.capacity = 32;
  o.max_step_tokens = 20;
  engine::testing::Built a = engine::testing::build(kept, o);
  engine::testing::Built b = engine::testing::build(wide, o);
  // Chunks of 1 (decode, integer kernels), of 4 (a small batch: the same kernels), then of 20
  // (above kSmallBatch: prefill through decoded tiles, exact but for f32 rounding; through the
  // integer GEMM where it has a kernel — block types at AVX2, Q8_0 at AVX-512 VNNI — within the
  // decode kernels' tolerance).
  EXPECT_LE(engine::testing::rel_diff(engine::testing::cached_logits(a, tokens, 1), want),
            GetParam().tol);
  EXPECT_LE(engine::testing::rel_diff(engine::testing::cached_logits(b, tokens, 1), want), 1e-4);
  engine::testing::Built c = engine::testing::build(kept, o);
  EXPECT_LE(engine::testing::rel_diff(engine::testing::cached_logits(c, tokens, 4), want),
            GetParam().tol);
  engine::testing::Built d = engine::testing::build(kept, o);
  const double prefill_tol = q8_gemm_available(kept.layers()[0].wq) ? GetParam().tol : 1e-4;
  EXPECT_LE(engine::testing::rel_diff(engine::testing::cached_logits(d, tokens, 20), want),
            prefill_tol);
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedModel,
                         ::testing::Values(LogitCase{TensorType::kQ8_0, 3e-2},
                                           LogitCase{TensorType::kQ4_0, 3e-2},
                                           LogitCase{TensorType::kQ4_1, 3e-2},
                                           LogitCase{TensorType::kQ5_0, 3e-2},
                                           LogitCase{TensorType::kQ5_1, 3e-2},
                                           LogitCase{TensorType::kQ4_K, 3e-2},
                                           LogitCase{TensorType::kQ5_K, 3e-2},
                                           LogitCase{TensorType::kQ6_K, 3e-2},
                                           LogitCase{TensorType::kMXFP4, 3e-2},
                                           LogitCase{TensorType::kBF16, 1e-4}),
                         [](const auto& case_info) {
                           return gguf::to_string(case_info.param.type);
                         });

std::string load_error(const std::vector<uint8_t>& bytes) {
  Result<gguf::GgufFile> f = gguf::GgufFile::parse(bytes);
  if (!f.ok()) return f.status().message();
  Result<engine::Model> m = engine::Model::load(*f);
  return m.ok() ? std::string("loaded") : m.status().message();
}

TEST(QuantizedModelErrors, UnsupportedTypesTruncatedDataAndPartialBlocksNameTheTensor) {
  engine::testing::TinySpec s;
  s.d_model = 256;
  s.d_ff = 512;
  s.head_dim = 64;
  s.store_as = TensorType::kQ4_K;
  const std::vector<uint8_t> good = engine::testing::tiny_model_bytes(s);
  ASSERT_EQ(load_error(good), "loaded");
  // Truncated: the last tensor's data ends past the file.
  std::vector<uint8_t> cut(good.begin(), good.end() - 100);
  Result<gguf::GgufFile> f = gguf::GgufFile::parse(cut);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("tensor 'output.weight': data"), std::string::npos)
      << f.status().message();
  // A type the engine cannot compute with (Q3_K: 110 bytes per 256 values) is refused by the
  // loader, naming tensor and type, while the reader accepts the file.
  s.skip_tensors = {"blk.0.attn_q.weight"};
  gguf::GgufWriter w;
  {
    Result<gguf::GgufFile> src = gguf::GgufFile::parse(engine::testing::tiny_model_bytes(s));
    ASSERT_TRUE(src.ok());
    for (const auto& [k, v] : src->metadata()) w.set(k, v);
    for (const gguf::TensorInfo& t : src->tensors())
      ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, {t.bytes.begin(), t.bytes.end()}).ok());
  }
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", TensorType::kQ3_K, {256, 256},
                           std::vector<uint8_t>(256 * 110)).ok());
  EXPECT_EQ(load_error(w.bytes()),
            "load model: tensor blk.0.attn_q.weight has type Q3_K, expected F32, F16, BF16, "
            "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K or MXFP4");
  // The writer refuses a quantized tensor of the wrong byte size, naming it.
  Status wrong = w.add_tensor("extra", TensorType::kQ8_0, {64, 2}, std::vector<uint8_t>(135));
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), "gguf writer: tensor 'extra': 135 data bytes, expected 136");
}

}  // namespace
}  // namespace kvcache::kernels
