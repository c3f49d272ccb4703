// The one ISA selection (cpu/isa.h): each level's requirements on hand-written feature sets,
// the probe against the kernel's own report (/proc/cpuinfo), the KVCACHE_ISA values, and the
// process ceiling and test cap honoured by isa_supported/best_isa/resolve_isa and attend().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_cache.h"
#include "cpu/isa.h"
#include "cpu/kv_pool.h"
#include "test_util.h"

namespace kvcache::cpu {
namespace {

constexpr KernelFamily kFloat = KernelFamily::kFloat;
constexpr KernelFamily kInt8 = KernelFamily::kInt8Dot;

// Sets the process ceiling for one test and puts back what KVCACHE_ISA had set.
class ProcessCeiling {
 public:
  explicit ProcessCeiling(Isa ceiling) : previous_(isa_ceiling()) { set_isa_ceiling(ceiling); }
  ~ProcessCeiling() { set_isa_ceiling(previous_); }

 private:
  Isa previous_;
};

CpuFeatures avx2_cpu() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}
CpuFeatures avx512_cpu(bool vnni) {
  CpuFeatures f = avx2_cpu();
  f.avx512f = f.avx512bw = f.avx512vl = true;
  f.avx512vnni = vnni;
  return f;
}

// The flags of the first processor in /proc/cpuinfo: the kernel's report, not our probe's.
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(Isa, NamesAreTheOnesBenchmarksAndMessagesPrint) {
  EXPECT_EQ(to_string(Isa::kAuto), "auto");
  EXPECT_EQ(to_string(Isa::kScalar), "scalar");
  EXPECT_EQ(to_string(Isa::kAvx2), "avx2");
  EXPECT_EQ(to_string(Isa::kAvx512), "avx512");
}

// Each case is a CPU someone owns: the level is the widest whose every feature is there.
TEST(Isa, TheWidestLevelIsTheOneWhoseEveryFeatureIsThere) {
  EXPECT_EQ(widest_isa(CpuFeatures{}, kFloat), Isa::kScalar);
  EXPECT_EQ(widest_isa(CpuFeatures{}, kInt8), Isa::kScalar);
  EXPECT_EQ(widest_isa(avx2_cpu(), kFloat), Isa::kAvx2);
  EXPECT_EQ(widest_isa(avx2_cpu(), kInt8), Isa::kAvx2);
  // AVX2 without F16C (or FMA): the AVX2 kernels use both, so scalar.
  CpuFeatures no_f16c = avx2_cpu();
  no_f16c.f16c = false;
  EXPECT_EQ(widest_isa(no_f16c, kFloat), Isa::kScalar);
  CpuFeatures no_fma = avx2_cpu();
  no_fma.fma = false;
  EXPECT_EQ(widest_isa(no_fma, kInt8), Isa::kScalar);
  // AVX-512 F/BW/VL without VNNI (Skylake-X): float kernels 512-bit, int8 dots AVX2.
  EXPECT_EQ(widest_isa(avx512_cpu(false), kFloat), Isa::kAvx512);
  EXPECT_EQ(widest_isa(avx512_cpu(false), kInt8), Isa::kAvx2);
  EXPECT_EQ(widest_isa(avx512_cpu(true), kFloat), Isa::kAvx512);
  EXPECT_EQ(widest_isa(avx512_cpu(true), kInt8), Isa::kAvx512);
  // AVX-512F without BW: the kernels use byte/word masks, so AVX2.
  CpuFeatures no_bw = avx512_cpu(true);
  no_bw.avx512bw = false;
  EXPECT_EQ(widest_isa(no_bw, kFloat), Isa::kAvx2);
  EXPECT_EQ(widest_isa(no_bw, kInt8), Isa::kAvx2);
}

// A ceiling only lowers: asking for avx512 on an AVX2 CPU gives AVX2, never an instruction
// the CPU lacks.
TEST(Isa, ACeilingOnlyEverLowersTheLevel) {
  EXPECT_EQ(widest_isa(avx512_cpu(true), kFloat, Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(widest_isa(avx512_cpu(true), kInt8, Isa::kScalar), Isa::kScalar);
  EXPECT_EQ(widest_isa(avx512_cpu(true), kInt8, Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(widest_isa(avx2_cpu(), kFloat, Isa::kAvx512), Isa::kAvx2);
  EXPECT_EQ(widest_isa(avx512_cpu(false), kInt8, Isa::kAvx512), Isa::kAvx2);
  EXPECT_EQ(widest_isa(CpuFeatures{}, kFloat, Isa::kAvx2), Isa::kScalar);
  EXPECT_EQ(widest_isa(avx2_cpu(), kFloat, Isa::kScalar), Isa::kScalar);
}

// The probe reads what the kernel reports for this CPU (cpuid through two different roads).
TEST(Isa, TheProbeAgreesWithProcCpuinfo) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "not x86-64: the probe reports no feature";
#endif
  const std::set<std::string> flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
}

TEST(Isa, KvcacheIsaAcceptsFourNamesAndRefusesEveryOtherValue) {
  const std::pair<const char*, Isa> good[] = {{"", Isa::kAuto},
                                              {"auto", Isa::kAuto},
                                              {"scalar", Isa::kScalar},
                                              {"avx2", Isa::kAvx2},
                                              {"avx512", Isa::kAvx512}};
  for (const auto& [value, isa] : good) {
    const Result<Isa> got = parse_isa_ceiling(value);
    ASSERT_TRUE(got.ok()) << value << ": " << got.status().message();
    EXPECT_EQ(*got, isa) << value;
  }
  for (const char* bad : {"AVX2", "avx", "avx512f", " avx2", "sse4", "none", "0"}) {
    const Result<Isa> got = parse_isa_ceiling(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(got.status().message(), "KVCACHE_ISA = '" + std::string(bad) +
                                          "', expected one of auto, scalar, avx2, avx512 "
                                          "(or unset)");
  }
}

// This binary's global environment (isa_ceiling_env.cpp) applied KVCACHE_ISA before any test.
TEST(Isa, TheProcessCeilingIsWhatKvcacheIsaSays) {
  const char* env = std::getenv("KVCACHE_ISA");
  const std::string value = env == nullptr ? "" : env;
  const Isa want = value == "scalar" ? Isa::kScalar
                   : value == "avx2" ? Isa::kAvx2
                   : value == "avx512" ? Isa::kAvx512
                                       : Isa::kAuto;
  EXPECT_EQ(isa_ceiling(), want) << "KVCACHE_ISA=" << value;
}

// With no cap, the answers are the widest level of this CPU's own features.
TEST(Isa, WithoutACapBestIsTheCpusWidestAndResolveKeepsASupportedRequest) {
  ProcessCeiling none(Isa::kAuto);
  const CpuFeatures& f = cpu_features();
  for (KernelFamily family : {kFloat, kInt8}) {
    const Isa best = best_isa(family);
    EXPECT_EQ(best, widest_isa(f, family));
    EXPECT_EQ(resolve_isa(Isa::kAuto, family), best);
    EXPECT_EQ(resolve_isa(Isa::kScalar, family), Isa::kScalar);
    EXPECT_TRUE(isa_supported(Isa::kAuto, family));
    EXPECT_TRUE(isa_supported(Isa::kScalar, family));
    EXPECT_TRUE(isa_supported(best, family));
    // A level the CPU lacks resolves to the best one, never to itself.
    if (best != Isa::kAvx512) {
      EXPECT_FALSE(isa_supported(Isa::kAvx512, family));
      EXPECT_EQ(resolve_isa(Isa::kAvx512, family), best);
    }
  }
}

// The scoped cap lowers under the process ceiling and never lifts it; both are restored.
TEST(Isa, ScopedCapAndProcessCeilingTakeTheLowerOfTheTwo) {
  ProcessCeiling none(Isa::kAuto);
  const bool avx2 = widest_isa(cpu_features(), kFloat) != Isa::kScalar;
  const Isa before = best_isa();
  {
    ScopedIsaCeiling scalar(Isa::kScalar);
    EXPECT_EQ(best_isa(), Isa::kScalar);
    EXPECT_EQ(best_isa(kInt8), Isa::kScalar);
    EXPECT_FALSE(isa_supported(Isa::kAvx2));
    EXPECT_FALSE(isa_supported(Isa::kAvx512));
    EXPECT_EQ(resolve_isa(Isa::kAvx512), Isa::kScalar);
    {
      ScopedIsaCeiling avx2_cap(Isa::kAvx2);
      EXPECT_FALSE(isa_supported(Isa::kAvx512));
      EXPECT_EQ(best_isa(), avx2 ? Isa::kAvx2 : Isa::kScalar);
    }
    EXPECT_EQ(best_isa(), Isa::kScalar);  // the inner scope restored the outer cap
  }
  EXPECT_EQ(best_isa(), before);
  {
    ProcessCeiling scalar(Isa::kScalar);
    ScopedIsaCeiling wide(Isa::kAvx512);  // asks for more than the process allows
    EXPECT_EQ(best_isa(), Isa::kScalar);
    EXPECT_EQ(best_isa(kInt8), Isa::kScalar);
    EXPECT_FALSE(isa_supported(Isa::kAvx2));
    ScopedIsaCeiling lift(Isa::kAuto);  // lifts only the scoped cap
    EXPECT_EQ(best_isa(), Isa::kScalar);
  }
  EXPECT_EQ(best_isa(), before);
}

// attend()'s own report of the level it runs, under each process ceiling.
TEST(Isa, AttentionDispatchRunsTheLevelTheProcessCeilingAllows) {
  {
    ProcessCeiling cap(Isa::kScalar);
    EXPECT_EQ(attend_isa(), Isa::kScalar);
    EXPECT_EQ(attend_isa(Isa::kAvx512), Isa::kScalar);
    EXPECT_EQ(attend_isa(Isa::kAvx2), Isa::kScalar);
  }
  if (widest_isa(cpu_features(), kFloat) == Isa::kScalar)
    GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C: only the scalar ceiling applies";
  {
    ProcessCeiling cap(Isa::kAvx2);
    EXPECT_EQ(attend_isa(), Isa::kAvx2);
    EXPECT_EQ(attend_isa(Isa::kAvx512), Isa::kAvx2);
    EXPECT_EQ(attend_isa(Isa::kScalar), Isa::kScalar);
  }
}

// A cache pinned to a level above the ceiling is refused at construction, naming the level.
TEST(Isa, ACachePinnedAboveTheCeilingIsRefused) {
  ProcessCeiling cap(Isa::kScalar);
  const CacheGeometry g{{LayerGeometry{1, 8, 8, 0}}};
  CacheConfig c;
  c.capacity = 4;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    CpuCacheOptions o;
    o.isa = isa;
    const auto r = make_cpu_cache(kSequenceKind, g, c, o);
    ASSERT_FALSE(r.ok()) << to_string(isa);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), "cpu cache: isa " + std::string(to_string(isa)) +
                                        " requested, above what this CPU and the ISA "
                                        "ceiling allow");
  }
  CpuCacheOptions scalar;
  scalar.isa = Isa::kScalar;
  EXPECT_TRUE(make_cpu_cache(kSequenceKind, g, c, scalar).ok());
}

// attend(kAuto) under a scalar ceiling (process-wide or scoped) runs the portable worker:
// bitwise its output.
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
  std::vector<float> process(scalar.size(), -9.0f);
  p.out = scalar.data();
  attend(p, one, Isa::kScalar);
  {
    ScopedIsaCeiling cap(Isa::kScalar);
    p.out = capped.data();
    attend(p, one, Isa::kAuto);
  }
  {
    ProcessCeiling cap(Isa::kScalar);
    p.out = process.data();
    attend(p, one, Isa::kAvx512);
  }
  EXPECT_EQ(std::memcmp(scalar.data(), capped.data(), scalar.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(scalar.data(), process.data(), scalar.size() * sizeof(float)), 0);
  // The comparison tells the workers apart: a SIMD worker sums in another order.
  ProcessCeiling none(Isa::kAuto);
  if (attend_isa() == Isa::kScalar) GTEST_SKIP() << "this CPU runs only the scalar worker";
  std::vector<float> wide(scalar.size(), -9.0f);
  p.out = wide.data();
  attend(p, one, Isa::kAuto);
  EXPECT_NE(std::memcmp(scalar.data(), wide.data(), scalar.size() * sizeof(float)), 0)
      << to_string(attend_isa());
}

}  // namespace
}  // namespace kvcache::cpu
