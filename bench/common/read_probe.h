// The read-bandwidth probe every benchmark reports its ratios against: a SIMD sum streaming a
// buffer far above the last-level cache with the same thread count; and a multiply-add probe
// for the steps that arithmetic bounds. Layer: bench (shared by the cpu, engine and serve
// benchmarks).
#pragma once

#include <cstdint>

namespace kvcache::bench {

inline constexpr int64_t kProbeBytes = int64_t{768} << 20;  // well above a laptop LLC

// Bytes per second the probe streams with `threads` threads (best of `passes`).
double measure_probe(int threads, int passes);

// f32 multiply-adds per second `threads` threads sustain (best of `passes`): independent
// chains of the widest fused multiply-add this CPU has (AVX-512, AVX2, else scalar). A step
// whose multiply-adds take longer than its bytes is bound by this, not by the read probe.
double measure_fma_probe(int threads, int passes);

// The probe right before a benchmark and again right after it; the better of the two is the
// reference, so a machine whose bandwidth drifts (a shared VM) is compared with what it gave
// at that time, never with a quieter moment.
class ProbeAround {
 public:
  explicit ProbeAround(int threads) : threads_(threads), before_(measure_probe(threads, 3)) {}
  double best() const;

 private:
  int threads_;
  double before_;
};

}  // namespace kvcache::bench
