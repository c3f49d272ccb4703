// The one ISA selection (cpu/isa.h): what each level needs, the widest level chosen, the test
// ceiling honoured by isa_supported/best_isa/resolve_isa and by attend()'s dispatch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/isa.h"
#include "cpu/kv_pool.h"
#include "test_util.h"

namespace kvcache::cpu {
namespace {

TEST(Isa, NamesAreTheOnesBenchmarksAndMessagesPrint) {
  EXPECT_EQ(to_string(Isa::kAuto), "auto");
  EXPECT_EQ(to_string(Isa::kScalar), "scalar");
  EXPECT_EQ(to_string(Isa::kAvx2), "avx2");
  EXPECT_EQ(to_string(Isa::kAvx512), "avx512");
}

TEST(Isa, EachLevelNeedsExactlyItsFeatures) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
  for (KernelFamily family : {KernelFamily::kFloat, KernelFamily::kInt8Dot}) {
    EXPECT_TRUE(isa_supported(Isa::kAuto, family));
    EXPECT_TRUE(isa_supported(Isa::kScalar, family));
    EXPECT_EQ(isa_supported(Isa::kAvx2, family), avx2);
  }
  EXPECT_EQ(isa_supported(Isa::kAvx512, KernelFamily::kFloat), avx512);
  // The int8 dot products' AVX-512 kernels use VNNI instructions.
  EXPECT_EQ(isa_supported(Isa::kAvx512, KernelFamily::kInt8Dot), avx512 && f.avx512vnni);
}

TEST(Isa, BestIsTheWidestSupportedAndResolveKeepsASupportedRequest) {
  for (KernelFamily family : {KernelFamily::kFloat, KernelFamily::kInt8Dot}) {
    const Isa best = best_isa(family);
    const Isa want = isa_supported(Isa::kAvx512, family) ? Isa::kAvx512
                     : isa_supported(Isa::kAvx2, family) ? Isa::kAvx2
                                                         : Isa::kScalar;
    EXPECT_EQ(best, want);
    EXPECT_EQ(resolve_isa(Isa::kAuto, family), best);
    EXPECT_EQ(resolve_isa(Isa::kScalar, family), Isa::kScalar);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
      EXPECT_EQ(resolve_isa(isa, family), isa_supported(isa, family) ? isa : best);
  }
}

TEST(Isa, CeilingCapsEveryAnswerAndIsRestored) {
  const Isa before = best_isa();
  {
    ScopedIsaCeiling scalar(Isa::kScalar);
    EXPECT_EQ(best_isa(), Isa::kScalar);
    EXPECT_EQ(best_isa(KernelFamily::kInt8Dot), Isa::kScalar);
    EXPECT_FALSE(isa_supported(Isa::kAvx2));
    EXPECT_FALSE(isa_supported(Isa::kAvx512));
    EXPECT_EQ(resolve_isa(Isa::kAvx512), Isa::kScalar);
    {
      ScopedIsaCeiling avx2(Isa::kAvx2);
      EXPECT_FALSE(isa_supported(Isa::kAvx512));
      EXPECT_EQ(best_isa(), cpu_features().avx2 && cpu_features().fma && cpu_features().f16c
                                ? Isa::kAvx2
                                : Isa::kScalar);
    }
    EXPECT_EQ(best_isa(), Isa::kScalar);  // the inner scope restored the outer ceiling
  }
  EXPECT_EQ(best_isa(), before);
}

// attend(kAuto) under a scalar ceiling runs the portable worker: bitwise its output.
TEST(Isa, AttendHonoursTheCeiling) {
  std::mt19937 rng(5);
  const int32_t T = 3, hq = 4, hkv = 2, dim = 40, rows = 70;
  LayerPool pool(LayerGeometry{hkv, dim, dim, 0}, DType::kF16, rows);
  ASSERT_TRUE(pool.reserve(rows).ok());
  for (int64_t r = 0; r < rows; ++r) {
    auto k = testing::random_floats(rng, size_t(hkv) * dim);
    auto v = testing::random_floats(rng, size_t(hkv) * dim);
    pool.write(r, k.data(), v.data());
  }
  std::vector<KeySet> keys(T);
  for (int32_t t = 0; t < T; ++t) {
    keys[t].n_runs = 1;
    keys[t].run_size[0] = rows - T + 1 + t;
  }
  auto q = testing::random_floats(rng, size_t(T) * hq * dim, -2.0f, 2.0f);
  AttentionProblem p;
  p.n_tokens = T;
  p.q_heads = hq;
  p.q = q.data();
  p.scale = 1.0f / std::sqrt(float(dim));
  p.kv = pool.view();
  p.keys = keys;
  ThreadPool one(1);
  std::vector<float> scalar(size_t(T) * hq * dim), capped(scalar.size(), -9.0f);
  p.out = scalar.data();
  attend(p, one, Isa::kScalar);
  {
    ScopedIsaCeiling cap(Isa::kScalar);
    p.out = capped.data();
    attend(p, one, Isa::kAuto);
  }
  EXPECT_EQ(std::memcmp(scalar.data(), capped.data(), scalar.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvcache::cpu
