// The feature probe, each level's requirements, the process ceiling and the test cap. See
// isa.h.
#include "cpu/isa.h"

#include <atomic>
#include <string>

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

std::atomic<Isa> g_process_ceiling{Isa::kAuto};  // KVCACHE_ISA; kAuto = no cap
std::atomic<Isa> g_ceiling{Isa::kAuto};          // ScopedIsaCeiling's; kAuto = no cap

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

// Whether a CPU with features `f` runs `family`'s kernels of level `isa`.
bool fits(Isa isa, KernelFamily family, const CpuFeatures& f) {
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

// The lower of the process ceiling and the scoped cap.
Isa cap() {
  const Isa process = g_process_ceiling.load(std::memory_order_relaxed);
  const Isa scoped = g_ceiling.load(std::memory_order_relaxed);
  return rank(scoped) < rank(process) ? scoped : process;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

bool isa_supported(Isa isa, KernelFamily family) {
  if (isa == Isa::kAuto) return true;
  return rank(isa) <= rank(cap()) && fits(isa, family, cpu_features());
}

// The widest level wins: measured here (2-core Xeon VM, f16, 32/8 heads, dim 128, one decode
// step, one thread, K/V resident in L2) the AVX-512 attention worker reads 15-16 GB/s of K/V,
// the AVX2 one 9.5-10 GB/s (bound by 256-bit FMAs).
Isa widest_isa(const CpuFeatures& f, KernelFamily family, Isa ceiling) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2})
    if (rank(isa) <= rank(ceiling) && fits(isa, family, f)) return isa;
  return Isa::kScalar;
}

Isa best_isa(KernelFamily family) { return widest_isa(cpu_features(), family, cap()); }

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

void set_isa_ceiling(Isa ceiling) { g_process_ceiling.store(ceiling); }
Isa isa_ceiling() { return g_process_ceiling.load(); }

Result<Isa> parse_isa_ceiling(std::string_view value) {
  if (value.empty()) return Isa::kAuto;
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (value == to_string(isa)) return isa;
  return invalid_argument("KVCACHE_ISA = '" + std::string(value) +
                          "', expected one of auto, scalar, avx2, avx512 (or unset)");
}

ScopedIsaCeiling::ScopedIsaCeiling(Isa ceiling) : previous_(g_ceiling.exchange(ceiling)) {}
ScopedIsaCeiling::~ScopedIsaCeiling() { g_ceiling.store(previous_); }

}  // namespace kvcache::cpu
