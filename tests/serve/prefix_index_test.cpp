// The prefix index: chained block keys, longest held run, removal.
#include <gtest/gtest.h>

#include "serve/prefix_index.h"

namespace kvcache::serve {
namespace {

std::vector<int32_t> range(int32_t n, int32_t base = 0) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = base + i;
  return v;
}

TEST(PrefixIndex, KeysChainSoEqualBlocksAfterDifferentParentsDiffer) {
  PrefixIndex idx(4);
  std::vector<int32_t> a = {1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<int32_t> b = {5, 6, 7, 8, 9, 9, 9, 9};
  const auto ka = idx.keys(a), kb = idx.keys(b);
  ASSERT_EQ(ka.size(), 2u);
  EXPECT_NE(ka[1], kb[1]);  // same tokens, different parent
  EXPECT_EQ(idx.keys(std::vector<int32_t>{1, 2, 3, 4, 0, 0})[0], ka[0]);  // a partial block has no key
  EXPECT_EQ(idx.keys(std::vector<int32_t>{1, 2, 3}).size(), 0u);
  // Seeds namespace the keys.
  EXPECT_NE(PrefixIndex(4, 7).keys(a)[0], ka[0]);
}

TEST(PrefixIndex, LongestFindsTheLongestHeldRunOfFullBlocks) {
  PrefixIndex idx(4);
  idx.add(3, range(10));                      // blocks [0,4) [4,8)
  idx.add(5, range(6));                       // block [0,4)
  EXPECT_EQ(idx.registered_tokens(3), 8);
  auto m = idx.longest(range(12));
  EXPECT_EQ(m.seq, 3);
  EXPECT_EQ(m.tokens, 8);
  std::vector<int32_t> other = range(12);
  other[5] = 99;                              // differs in the second block
  m = idx.longest(other);
  EXPECT_EQ(m.tokens, 4);
  EXPECT_TRUE(m.seq == 3 || m.seq == 5);
  EXPECT_EQ(idx.longest(range(3)).seq, -1);   // no full block
  EXPECT_EQ(idx.longest(range(8, 1)).seq, -1);
}

TEST(PrefixIndex, AddExtendsAndRemoveForgets) {
  PrefixIndex idx(4);
  idx.add(1, range(4));
  idx.add(1, range(13));                      // grows to 3 blocks
  EXPECT_EQ(idx.registered_tokens(1), 12);
  EXPECT_EQ(idx.blocks(), 3);
  idx.add(2, range(8));
  EXPECT_EQ(idx.blocks(), 3);                 // shared keys
  idx.remove(1);
  EXPECT_EQ(idx.blocks(), 2);
  EXPECT_EQ(idx.longest(range(12)).tokens, 8);
  EXPECT_EQ(idx.longest(range(12)).seq, 2);
  idx.remove(2);
  EXPECT_EQ(idx.blocks(), 0);
  EXPECT_EQ(idx.longest(range(12)).seq, -1);
  idx.remove(7);                              // unknown: nothing happens
}

}  // namespace
}  // namespace kvcache::serve
