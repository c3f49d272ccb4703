// The main() of every Google Benchmark binary that runs kernels: KVCACHE_ISA is applied as
// the process ISA ceiling (cpu/isa.h) before any benchmark runs, as tools/main.cpp does for
// the CLI, and the JSON context names the ceiling ("isa_ceiling"). Layer: bench. A value
// cpu::parse_isa_ceiling refuses ends the binary with its message and exit 2.
#pragma once

#include <benchmark/benchmark.h>

namespace kvcache::bench {

// Reads KVCACHE_ISA (unset = no cap) and sets the ceiling; false after printing the error.
bool apply_isa_ceiling_from_env();

}  // namespace kvcache::bench

#define KVCACHE_BENCHMARK_MAIN()                                        \
  int main(int argc, char** argv) {                                     \
    if (!::kvcache::bench::apply_isa_ceiling_from_env()) return 2;      \
    ::benchmark::Initialize(&argc, argv);                               \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    ::benchmark::RunSpecifiedBenchmarks();                              \
    ::benchmark::Shutdown();                                            \
    return 0;                                                           \
  }                                                                     \
  int main(int, char**)
