// An allocation the machine cannot satisfy is a ResourceExhausted error naming the bytes asked
// for, through the factory too (never nullptr, never an abort).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/factory.h"
#include "cpu/cpu_cache.h"
#include "cpu/kv_pool.h"

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

// Buffers of 2 MiB or more start on a 2 MiB boundary (so whole huge pages can back them);
// smaller ones on 64 bytes; every byte asked for is zeroed and writable, whatever the size.
TEST(CacheAllocation, BigBuffersStartOnAHugePageAndEveryByteIsZeroed) {
  constexpr int64_t kHuge = int64_t{2} << 20;
  for (const int64_t n : {int64_t{1}, int64_t{100}, kHuge - 1, kHuge, 3 * kHuge + 12345}) {
    SCOPED_TRACE(n);
    cpu::AlignedBytes b = cpu::aligned_alloc_bytes(n);
    ASSERT_NE(b, nullptr);
    const auto at = reinterpret_cast<uintptr_t>(b.get());
    EXPECT_EQ(at % (n >= kHuge ? kHuge : 64), 0u);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) nonzero += b[i] != std::byte{0};
    EXPECT_EQ(nonzero, 0);
    b[n - 1] = std::byte{7};
    EXPECT_EQ(b[n - 1], std::byte{7});
  }
  EXPECT_EQ(cpu::aligned_alloc_bytes(0), nullptr);
}

}  // namespace
}  // namespace kvcache
