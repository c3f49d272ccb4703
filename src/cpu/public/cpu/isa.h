// The one CPU-feature probe and instruction-set choice every SIMD kernel dispatches on: the
// attention workers here, the matvec kernels and F16 row decoding in kernels. Layer: cpu.
// Features are probed once per process; what each Isa level requires lives in isa.cpp only.
// It does not pick kernels (each dispatcher maps the resolved Isa to its own functions) and
// does not read the environment: the tools and test mains pass KVCACHE_ISA in.
#pragma once

#include <string_view>

#include "core/status.h"

namespace kvcache::cpu {

// Instruction-set levels of the optimized kernels; kAuto picks the best the CPU supports.
enum class Isa { kAuto, kScalar, kAvx2, kAvx512 };

// What a family of kernels needs beyond a level's base features. kFloat: AVX2 = AVX2+FMA+F16C,
// AVX-512 = that plus AVX-512 F/BW/VL (attention, F16/BF16 rows). kInt8Dot: the AVX-512 level
// also needs VNNI (the quantized matvec kernels).
enum class KernelFamily { kFloat, kInt8Dot };

// The CPU's features, probed on first use. All false off x86.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
};
const CpuFeatures& cpu_features();

// Whether `family`'s kernels of `isa` may run here: kAuto and kScalar always; a level above
// the process ceiling or a test ceiling (below) never. Every dispatcher asks on each call (two
// relaxed atomic loads), so no decision outlives a change of ceiling.
bool isa_supported(Isa isa, KernelFamily family = KernelFamily::kFloat);
// The widest supported level (never kAuto): widest_isa for this CPU under the ceilings.
Isa best_isa(KernelFamily family = KernelFamily::kFloat);
// The widest level a CPU with features `f` runs `family`'s kernels at, no level above
// `ceiling` (kAuto = none); kScalar when nothing wider fits. Pure: tests feed it feature sets.
Isa widest_isa(const CpuFeatures& f, KernelFamily family, Isa ceiling = Isa::kAuto);
// What a dispatcher runs for a requested `isa`: itself when supported, else best_isa(family).
Isa resolve_isa(Isa isa, KernelFamily family = KernelFamily::kFloat);
std::string_view to_string(Isa isa);  // "auto", "scalar", "avx2", "avx512"

// The process ceiling, what KVCACHE_ISA asks for: no level above it counts as supported,
// whatever the CPU has, so it only ever lowers the choice (avx512 on an AVX2 CPU runs AVX2).
// kAuto = no cap, the default. Set it once, before any kernel runs (tools/main.cpp, and each
// test binary's global environment); thread-safe, but a kernel already running keeps its level.
void set_isa_ceiling(Isa ceiling);
Isa isa_ceiling();
// A KVCACHE_ISA value: "auto" or "" = kAuto, "scalar", "avx2", "avx512" (exact, lower case);
// anything else is invalid_argument naming KVCACHE_ISA, the value and the accepted ones.
Result<Isa> parse_isa_ceiling(std::string_view value);

// For tests and benchmarks: while alive, no level above `ceiling` counts as supported
// (kScalar forces the portable kernels everywhere; kAuto lifts this cap). It only lowers: the
// process ceiling still applies above it. Restores the previous cap on destruction.
// Process-wide: create it only while no kernel runs. Not nestable across threads.
class ScopedIsaCeiling {
 public:
  explicit ScopedIsaCeiling(Isa ceiling);
  ~ScopedIsaCeiling();
  ScopedIsaCeiling(const ScopedIsaCeiling&) = delete;
  ScopedIsaCeiling& operator=(const ScopedIsaCeiling&) = delete;

 private:
  Isa previous_;
};

}  // namespace kvcache::cpu
