// An allocation the machine cannot satisfy is a ResourceExhausted error naming the bytes asked
// for, through the factory too (never nullptr, never an abort).
#include <gtest/gtest.h>

#include <string>

#include "core/factory.h"
#include "cpu/cpu_cache.h"

#if defined(__SANITIZE_ADDRESS__)
// Under ASan an impossible malloc must return null (as libc does) rather than abort.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace kvcache {
namespace {

TEST(CacheAllocation, FailureNamesTheBytesAskedFor) {
  // 1024 heads x (4096 + 4096) dims x 4 B = 32 MiB a cell; all 2^31 - 1 cells up front.
  const CacheGeometry g{{{1024, 4096, 4096, 0}}};
  CacheConfig c;
  c.capacity = 2147483647;
  c.initial_capacity = c.capacity;
  const int64_t bytes = int64_t{1024} * c.capacity * (4096 + 4096) * 4;
  for (std::string_view kind : {kSequenceKind, kCellKind}) {
    auto r = cpu::make_cpu_cache(kind, g, c);
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << kind;
    EXPECT_NE(r.status().message().find("allocating " + std::to_string(bytes) +
                                        " bytes (2147483647 rows of K and V) failed"),
              std::string::npos) << r.status().message();
  }
  ASSERT_TRUE(cpu::register_builders().ok());
  auto f = CacheFactory::global().build(kCpuBackend, kCellKind, g, c);
  EXPECT_EQ(f.status().code(), StatusCode::kResourceExhausted);  // not "returned no cache"
  EXPECT_NE(f.status().message().find(std::to_string(bytes) + " bytes"), std::string::npos);
}

}  // namespace
}  // namespace kvcache
