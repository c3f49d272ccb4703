// The one CPU-feature probe and instruction-set choice every SIMD kernel dispatches on: the
// attention workers here, the matvec kernels and F16 row decoding in engine. Layer: cpu.
// Features are probed once per process; what each Isa level requires lives in isa.cpp only.
// It does not pick kernels: each dispatcher maps the resolved Isa to its own functions.
#pragma once

#include <string_view>

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
// the test ceiling (below) never.
bool isa_supported(Isa isa, KernelFamily family = KernelFamily::kFloat);
// The widest supported level (never kAuto).
Isa best_isa(KernelFamily family = KernelFamily::kFloat);
// What a dispatcher runs for a requested `isa`: itself when supported, else best_isa(family).
Isa resolve_isa(Isa isa, KernelFamily family = KernelFamily::kFloat);
std::string_view to_string(Isa isa);  // "auto", "scalar", "avx2", "avx512"

// For tests and benchmarks: while alive, no level above `ceiling` counts as supported
// (kScalar forces the portable kernels everywhere; kAuto lifts the cap). Restores the previous
// ceiling on destruction. Process-wide: create it only while no kernel runs. Not nestable
// across threads.
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
