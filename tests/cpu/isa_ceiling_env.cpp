// Linked into every test binary by kvcache_add_test (cmake/kvcache_options.cmake): applies
// KVCACHE_ISA as the process ISA ceiling before the first test runs, as tools/main.cpp does
// for the CLI, so `KVCACHE_ISA=avx2 ctest ...` runs the whole suite on the AVX2 kernels. A
// value cpu::parse_isa_ceiling refuses fails every test of the binary with its message.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cpu/isa.h"

namespace kvcache::cpu {
namespace {

class IsaCeilingFromEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* value = std::getenv("KVCACHE_ISA");
    if (value == nullptr) return;
    const Result<Isa> ceiling = parse_isa_ceiling(value);
    ASSERT_TRUE(ceiling.ok()) << ceiling.status().message();
    set_isa_ceiling(*ceiling);
  }
};

[[maybe_unused]] ::testing::Environment* const kIsaCeiling =
    ::testing::AddGlobalTestEnvironment(new IsaCeilingFromEnvironment);

}  // namespace
}  // namespace kvcache::cpu
