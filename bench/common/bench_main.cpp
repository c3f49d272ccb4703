// KVCACHE_ISA for the benchmark binaries. See bench_main.h.
#include "bench_main.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/isa.h"

namespace kvcache::bench {

bool apply_isa_ceiling_from_env() {
  const char* value = std::getenv("KVCACHE_ISA");
  if (value != nullptr) {
    const Result<cpu::Isa> ceiling = cpu::parse_isa_ceiling(value);
    if (!ceiling.ok()) {
      std::fprintf(stderr, "benchmark: %s\n", ceiling.status().message().c_str());
      return false;
    }
    cpu::set_isa_ceiling(*ceiling);
  }
  benchmark::AddCustomContext("isa_ceiling", std::string(cpu::to_string(cpu::isa_ceiling())));
  return true;
}

}  // namespace kvcache::bench
