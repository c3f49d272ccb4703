#include "core/factory.h"

#include <gtest/gtest.h>

namespace kvcache {
namespace {
TEST(FactoryPlaceholder, EmptyFactoryDescribesNone) {
  CacheFactory f;
  EXPECT_EQ(f.describe(), "(none)");
}
}  // namespace
}  // namespace kvcache
