// The feature probe, each level's requirements and the test ceiling. See isa.h.
#include "cpu/isa.h"

#include <atomic>

namespace kvcache::cpu {
namespace {

CpuFeatures probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

std::atomic<Isa> g_ceiling{Isa::kAuto};  // kAuto = no cap

// Levels in order; kAuto is not a level.
int rank(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return 3;
    case Isa::kScalar: return 0;
    case Isa::kAvx2: return 1;
    case Isa::kAvx512: return 2;
  }
  return 0;
}

bool cpu_has(Isa isa, KernelFamily family) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kAuto:
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512:
      return avx2 && f.avx512f && f.avx512bw && f.avx512vl &&
             (family != KernelFamily::kInt8Dot || f.avx512vnni);
  }
  return false;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

bool isa_supported(Isa isa, KernelFamily family) {
  if (isa == Isa::kAuto) return true;
  return rank(isa) <= rank(g_ceiling.load(std::memory_order_relaxed)) && cpu_has(isa, family);
}

// The widest level wins: measured here (2-core Xeon VM, f16, 32/8 heads, dim 128, one decode
// step, one thread, K/V resident in L2) the AVX-512 attention worker reads 15-16 GB/s of K/V,
// the AVX2 one 9.5-10 GB/s (bound by 256-bit FMAs).
Isa best_isa(KernelFamily family) {
  if (isa_supported(Isa::kAvx512, family)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2, family)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa resolve_isa(Isa isa, KernelFamily family) {
  return isa != Isa::kAuto && isa_supported(isa, family) ? isa : best_isa(family);
}

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

ScopedIsaCeiling::ScopedIsaCeiling(Isa ceiling) : previous_(g_ceiling.exchange(ceiling)) {}
ScopedIsaCeiling::~ScopedIsaCeiling() { g_ceiling.store(previous_); }

}  // namespace kvcache::cpu
