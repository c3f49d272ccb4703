// The BLAS matmul against its double reference; RoPE pairings and norm preservation; the
// element-wise kernels the same on one thread and two.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/isa.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "random_values.h"

namespace kvcache::kernels {
namespace {

using testing::rnd;

TEST(Kernels, MatmulMatchesReferenceOverShapes) {
  for (int64_t t : {1, 2, 7})
    for (int64_t in : {1, 16, 37})
      for (int64_t out : {1, 5, 64})
        for (bool acc : {false, true}) {
          std::vector<float> x = rnd(t * in, 1), w = rnd(out * in, 2);
          std::vector<float> y = rnd(t * out, 3), want = y;
          matmul(x, w, y, t, in, out, acc);
          matmul_reference(x, w, want, t, in, out, acc);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + std::abs(want[i])))
                << t << "x" << in << "x" << out << " acc " << acc;
        }
}

// f16 weights: the dispatched gemv (T = 1, threaded), the batched rows (T <= 16) and the
// tile-converting sgemm (T = 17: tiles of at most 256 rows, as many per thread) against the
// double reference on the same half values.
// in = 128 makes the gemv cross the row-sharing threshold (300 x 128 >= 2^15 elements, >= 128
// rows); smaller products run on one thread whatever the pool.
TEST(Kernels, F16MatmulMatchesReferenceOverShapesAndThreads) {
  for (int threads : {1, 2})
    for (int64_t t : {1, 4, 7, 16, 17})
      for (int64_t in : {1, 17, 64, 128})
        for (int64_t out : {3, 300, 768})  // 768 rows on 2 threads: 4 tiles of 192
          for (bool acc : {false, true}) {
            cpu::set_global_threads(threads);
            std::vector<float> dense = rnd(out * in, 8);
            std::vector<uint8_t> half(dense.size() * 2);
            for (size_t i = 0; i < dense.size(); ++i) {
              const uint16_t h = kvcache::f32_to_f16(dense[i]);
              std::memcpy(half.data() + 2 * i, &h, 2);
              dense[i] = kvcache::f16_to_f32(h);
            }
            Weight w = Weight::from_bytes(gguf::TensorType::kF16, out, in, std::move(half));
            std::vector<float> x = rnd(t * in, 9), y = rnd(t * out, 10), want = y;
            matmul(x, w, y, t, acc);
            matmul_reference(x, dense, want, t, in, out, acc);
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + std::abs(want[i])))
                  << threads << " threads " << t << "x" << in << "x" << out << " acc " << acc;
          }
  cpu::set_global_threads(2);
}

// A batched decode step must give each row exactly what decoding it alone gives: for up to
// kSmallBatch rows an f16 product runs the single-row kernel over shared chunks of rows.
TEST(Kernels, F16ProductOfEachRowIsBitwiseIndependentOfTheBatch) {
  for (int threads : {1, 2}) {
    cpu::set_global_threads(threads);
    constexpr int64_t kRows = 300, kCols = 203;  // 12 steps of 16 columns and a tail of 11
    std::vector<uint8_t> half(kRows * kCols * 2);
    std::vector<float> dense = rnd(kRows * kCols, 21);
    for (size_t i = 0; i < dense.size(); ++i) {
      const uint16_t h = kvcache::f32_to_f16(dense[i]);
      std::memcpy(half.data() + 2 * i, &h, 2);
    }
    const Weight w = Weight::from_bytes(gguf::TensorType::kF16, kRows, kCols, std::move(half));
    for (int64_t t : {int64_t{2}, int64_t{5}, kSmallBatch}) {
      std::vector<float> x = rnd(t * w.cols, 22), y(static_cast<size_t>(t * w.rows));
      matmul(x, w, y, t);
      for (int64_t j = 0; j < t; ++j) {
        std::vector<float> one(static_cast<size_t>(w.rows));
        matmul(std::span<const float>(x).subspan(j * w.cols, w.cols), w, one, 1);
        for (int64_t r = 0; r < w.rows; ++r)
          ASSERT_EQ(y[j * w.rows + r], one[r]) << "row " << j << " of " << t << ", output " << r;
      }
    }
  }
  cpu::set_global_threads(2);
}

TEST(Kernels, F16ScalarGemvMatchesReference) {
  std::vector<float> dense = rnd(5 * 9, 11), x = rnd(9, 12), y(5), want(5);
  std::vector<uint16_t> h;
  for (float& v : dense) {
    h.push_back(kvcache::f32_to_f16(v));
    v = kvcache::f16_to_f32(h.back());
  }
  gemv_f16_scalar(h.data(), x.data(), y.data(), 5, 9, false);
  matmul_reference(x, dense, want, 1, 9, 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[i], want[i], 1e-5);
}

TEST(Kernels, RopeAtPositionZeroIsIdentityAndPreservesNorms) {
  RopeParams p{8, 8, 10000.0f, 1.0f, true};
  std::vector<float> x = rnd(2 * 3 * 8, 4), y = x;
  std::vector<int64_t> pos = {0, 5};
  rope(y, pos, 3, p);
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
  for (int h = 0; h < 3; ++h) {
    double a = 0, b = 0;
    for (int i = 0; i < 8; ++i) {
      a += x[24 + h * 8 + i] * x[24 + h * 8 + i];
      b += y[24 + h * 8 + i] * y[24 + h * 8 + i];
    }
    EXPECT_NEAR(a, b, 1e-4 * a);
  }
}

TEST(Kernels, RotateHalfEqualsInterleavedOnPermutedDims) {
  // Interleaved pairs (2j, 2j+1) are rotate-half pairs (j, j+4) after the permutation
  // perm[2j] = j, perm[2j+1] = j + 4.
  std::vector<float> x = rnd(8, 5), xi(8);
  for (int j = 0; j < 4; ++j) {
    xi[2 * j] = x[j];
    xi[2 * j + 1] = x[j + 4];
  }
  std::vector<int64_t> pos = {7};
  rope(x, pos, 1, RopeParams{8, 8, 10000.0f, 1.0f, false});
  rope(xi, pos, 1, RopeParams{8, 8, 10000.0f, 1.0f, true});
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(xi[2 * j], x[j], 1e-6);
    EXPECT_NEAR(xi[2 * j + 1], x[j + 4], 1e-6);
  }
}

TEST(Kernels, PartialRopeLeavesTailAndLinearScalingDividesPosition) {
  std::vector<float> x = rnd(8, 6), a = x, b = x;
  std::vector<int64_t> p6 = {6}, p3 = {3};
  rope(a, p6, 1, RopeParams{8, 4, 10000.0f, 2.0f, true});
  rope(b, p3, 1, RopeParams{8, 4, 10000.0f, 1.0f, true});
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(a[i], x[i]);
}

TEST(Kernels, RmsnormAndSwiglu) {
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, out(2);
  rmsnorm_rows(x, w, out, 1, 2, 0.0f);
  // rms = sqrt((9 + 16) / 2) = 3.5355
  EXPECT_NEAR(out[0], 3.0 / 3.5355339, 1e-5);
  EXPECT_NEAR(out[1], 2 * 4.0 / 3.5355339, 1e-5);
  std::vector<float> g = {0.0f, 1.0f}, u = {5.0f, 2.0f};
  swiglu(g, u);
  EXPECT_FLOAT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Kernels, RopeFrequencyFactorsDivideEachPairsAngle) {
  // Pair j turns by pos * base^(-2j/8) / f[j]: with every f = 2 that is position 6 at half
  // speed, i.e. position 3 without factors; distinct factors turn each pair as its own
  // position pos / f[j] would.
  std::vector<float> x = rnd(8, 7), a = x, b = x;
  std::vector<int64_t> p6 = {6}, p3 = {3};
  const std::vector<float> twos = {2.0f, 2.0f, 2.0f, 2.0f};
  rope(a, p6, 1, RopeParams{8, 8, 10000.0f, 1.0f, true, twos});
  rope(b, p3, 1, RopeParams{8, 8, 10000.0f, 1.0f, true});
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  const std::vector<float> f = {1.0f, 2.0f, 4.0f, 8.0f};
  std::vector<float> c = x;
  rope(c, p6, 1, RopeParams{8, 8, 10000.0f, 1.0f, true, f});
  for (int j = 0; j < 4; ++j) {
    const double angle = 6.0 * std::pow(10000.0, -2.0 * j / 8.0) / f[j];
    EXPECT_NEAR(c[2 * j], x[2 * j] * std::cos(angle) - x[2 * j + 1] * std::sin(angle), 1e-6);
    EXPECT_NEAR(c[2 * j + 1], x[2 * j] * std::sin(angle) + x[2 * j + 1] * std::cos(angle), 1e-6);
  }
}

TEST(Kernels, SwigluOaiClampsGateAboveAndUpBothWays) {
  // out = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1).
  std::vector<float> g = {0.0f, 1.0f, 10.0f, -3.0f}, u = {5.0f, 2.0f, 9.0f, -10.0f};
  swiglu_oai(g, u);
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], 1.0 * sig(1.702) * 3.0, 1e-6);
  EXPECT_NEAR(g[2], 7.0 * sig(1.702 * 7.0) * 8.0, 1e-5);      // both clamped at 7
  EXPECT_NEAR(g[3], -3.0 * sig(-1.702 * 3.0) * -6.0, 1e-6);   // up clamped at -7
}

TEST(Kernels, GeluTanhGateMatchesPublishedValues) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) at x = 1, -1, 3, 0.
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411920, 1e-6);
  EXPECT_NEAR(gelu_tanh(-1.0f), -0.1588080, 1e-6);
  EXPECT_NEAR(gelu_tanh(3.0f), 2.9963627, 1e-6);
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  std::vector<float> g = {1.0f, -1.0f}, u = {2.0f, 3.0f};
  gelu_tanh_gated(g, u);
  EXPECT_NEAR(g[0], 2 * 0.8411920, 1e-6);
  EXPECT_NEAR(g[1], 3 * -0.1588080, 1e-6);
}

TEST(Kernels, SoftcapBendsTowardTheCapAndZeroCapIsIdentity) {
  std::vector<float> x = {2.0f, -100.0f, 0.5f};
  softcap(x, 2.0f);
  EXPECT_NEAR(x[0], 2.0 * std::tanh(1.0), 1e-6);  // 1.5231884
  EXPECT_NEAR(x[1], -2.0, 1e-6);                   // saturates at -cap
  EXPECT_NEAR(x[2], 2.0 * std::tanh(0.25), 1e-6);
  std::vector<float> y = {7.0f, -3.0f};
  softcap(y, 0.0f);
  EXPECT_EQ(y, (std::vector<float>{7.0f, -3.0f}));
}

// A prefill chunk's element-wise kernels are shared over the pool: every element is computed
// as alone, so two threads give bitwise what one gives (sizes above the parallel threshold of
// 2^14 elements; the first entry also checks the value itself).
TEST(Kernels, ElementwiseKernelsSplitOverThreadsAreBitwiseTheSame) {
  const int64_t t = 300, heads = 4, dim = 64, d_ff = 160;
  std::vector<int64_t> pos(t);
  for (int64_t i = 0; i < t; ++i) pos[i] = 7 * i;
  const std::vector<float> x = rnd(t * heads * dim, 4), u = rnd(t * d_ff, 5);
  const std::vector<float> g = rnd(t * d_ff, 6), norm_w = rnd(heads * dim, 7);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2}) {
    cpu::set_global_threads(threads);
    std::vector<float> r = x, s = g, gl = g, n(x.size());
    rope(r, pos, static_cast<int32_t>(heads), RopeParams{64, 64, 10000.0f, 1.0f, false});
    swiglu(s, u);
    gelu_tanh_gated(gl, u);
    rmsnorm_rows(x, norm_w, n, t, heads * dim, 1e-5f);
    r.insert(r.end(), s.begin(), s.end());
    r.insert(r.end(), gl.begin(), gl.end());
    r.insert(r.end(), n.begin(), n.end());
    outs.push_back(std::move(r));
  }
  cpu::set_global_threads(2);
  EXPECT_EQ(outs[0], outs[1]);
  const double silu = g[0] / (1.0 + std::exp(-double{g[0]})) * u[0];
  EXPECT_NEAR(outs[0][static_cast<size_t>(t * heads * dim)], silu, 1e-6 * std::fabs(silu));
}

std::vector<float> swiglu_inputs() {
  std::vector<float> g0;
  for (float v : {0.0f, -0.0f, 1e-6f, -1e-3f, 0.5f, -2.0f, 7.5f, -15.0f, 40.0f, -80.0f, 87.0f,
                  -88.5f, 95.0f, -100.0f})
    g0.push_back(v);
  for (float v : rnd(70, 11)) g0.push_back(4.0f * v);
  return g0;
}

// SwiGLU's AVX-512 path (a polynomial exp) against the std::exp form: within 1e-6 relative
// (a few ulp) from tiny to saturating inputs, any length (masked tails), and 0 stays 0.
TEST(Kernels, SwigluMatchesItsReferenceWithinAFewUlp) {
  if (!cpu::isa_supported(cpu::Isa::kAvx512))
    GTEST_SKIP() << "no AVX-512 here (CPU or KVCACHE_ISA): swiglu runs swiglu_reference "
                    "itself, which SwigluBelowAvx512IsItsReferenceBitwise checks";
  const std::vector<float> g0 = swiglu_inputs();
  const std::vector<float> u0 = rnd(g0.size(), 12);
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, g0.size()}) {
    std::vector<float> g(g0.begin(), g0.begin() + n), want = g;
    const std::vector<float> u(u0.begin(), u0.begin() + n);
    swiglu(g, u);
    swiglu_reference(want, u);
    for (size_t i = 0; i < n; ++i)
      EXPECT_NEAR(g[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30)
          << "g = " << g0[i] << " u = " << u[i] << " n = " << n;
  }
  std::vector<float> zero = {0.0f}, one = {1.0f};
  swiglu(zero, one);
  EXPECT_EQ(zero[0], 0.0f);
}

// Below AVX-512 (a cap, or a CPU without it) swiglu is swiglu_reference, bitwise; with
// AVX-512 in force it is the polynomial, which differs in the last bits somewhere on these
// inputs — so the dispatch is decided on each call, not once per process.
TEST(Kernels, SwigluBelowAvx512IsItsReferenceBitwise) {
  const std::vector<float> g0 = swiglu_inputs();
  const std::vector<float> u = rnd(g0.size(), 12);
  std::vector<float> want = g0;
  swiglu_reference(want, u);
  const bool avx512 = cpu::isa_supported(cpu::Isa::kAvx512);
  std::vector<float> wide = g0;
  swiglu(wide, u);  // whatever the ceilings in force allow
  {
    cpu::ScopedIsaCeiling cap(cpu::Isa::kAvx2);
    std::vector<float> g = g0;
    swiglu(g, u);
    EXPECT_EQ(std::memcmp(g.data(), want.data(), g.size() * sizeof(float)), 0);
  }
  // Without AVX-512 in force `wide` ran the reference too; nothing else to tell apart.
  if (avx512) {
    EXPECT_NE(std::memcmp(wide.data(), want.data(), wide.size() * sizeof(float)), 0);
  }
}

// F16 weight rows decode exactly whichever level runs (F16C from AVX2 on, the portable
// conversion below): 11 values per row cross one 8-value step and leave a tail of 3.
TEST(Kernels, F16RowsDecodeToTheSameExactValuesAtEveryLevel) {
  // 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), -0, +inf,
  // 0.333251953125 (0x3555), 1/1024 + 1 (0x3C01), -65504, 0.5.
  const uint16_t halves[11] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x8000,
                               0x7C00, 0x3555, 0x3C01, 0xFBFF, 0x3800};
  const float want[11] = {1.0f,  -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, -0.0f, INFINITY,
                          0.333251953125f, 1.0f + 0x1p-10f, -65504.0f, 0.5f};
  std::vector<uint8_t> bytes(2 * sizeof(halves));
  std::memcpy(bytes.data(), halves, sizeof(halves));
  std::memcpy(bytes.data() + sizeof(halves), halves, sizeof(halves));
  const Weight w = Weight::from_bytes(gguf::TensorType::kF16, 2, 11, std::move(bytes));
  for (cpu::Isa cap : {cpu::Isa::kAuto, cpu::Isa::kAvx2, cpu::Isa::kScalar}) {
    cpu::ScopedIsaCeiling scoped(cap);
    for (int64_t r = 0; r < 2; ++r) {
      std::vector<float> got(11, 7.0f);
      w.row(r, got);
      EXPECT_EQ(std::memcmp(got.data(), want, sizeof(want)), 0)
          << "row " << r << " under " << cpu::to_string(cap) << ": " << got[0] << " "
          << got[3] << " " << got[5] << " " << got[10];
    }
  }
}

}  // namespace
}  // namespace kvcache::kernels
