// BitTree against std::set: random inserts, erases, lowest/highest queries and growth, over
// sizes that need one, two and three summary levels.
#include "core/bit_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace kvcache {
namespace {

void expect_same(const BitTree& t, const std::set<int64_t>& ref) {
  ASSERT_EQ(t.empty(), ref.empty());
  ASSERT_EQ(t.first(), ref.empty() ? -1 : *ref.begin());
  ASSERT_EQ(t.last(), ref.empty() ? -1 : *ref.rbegin());
}

TEST(BitTree, EmptyTreeHasNoMembers) {
  BitTree t;
  EXPECT_EQ(t.size(), 0);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.first(), -1);
  EXPECT_EQ(t.last(), -1);
  t.resize(0);
  EXPECT_EQ(t.first(), -1);
}

TEST(BitTree, LowestAndHighestAcrossLevelBoundaries) {
  BitTree t;
  t.resize(262145);  // 4097 leaf words -> 65 -> 2 -> 1: four levels
  t.set(262144);
  t.set(4096);
  EXPECT_EQ(t.first(), 4096);
  EXPECT_EQ(t.last(), 262144);
  t.reset(4096);
  EXPECT_EQ(t.first(), 262144);
  t.set(63);
  t.set(64);
  EXPECT_EQ(t.first(), 63);
  t.reset(63);
  EXPECT_EQ(t.first(), 64);
  t.reset(262144);
  EXPECT_EQ(t.last(), 64);
  EXPECT_TRUE(t.test(64));
  EXPECT_FALSE(t.test(63));
}

TEST(BitTree, GrowingAndShrinkingKeepMembersBelowTheNewSize) {
  BitTree t;
  t.resize(100);
  t.set(5);
  t.set(99);
  t.resize(5000);
  EXPECT_EQ(t.first(), 5);
  EXPECT_EQ(t.last(), 99);
  t.set(4999);
  t.resize(64);
  EXPECT_EQ(t.first(), 5);
  EXPECT_EQ(t.last(), 5);
}

TEST(BitTree, MatchesASetUnderRandomOperations) {
  std::mt19937_64 rng(7);
  for (int64_t n : {1, 63, 64, 65, 4095, 4096, 4097, 300000}) {
    BitTree t;
    t.resize(n);
    std::set<int64_t> ref;
    std::uniform_int_distribution<int64_t> any(0, n - 1);
    for (int i = 0; i < 3000; ++i) {
      // Cluster half the operations near the ends, where the summary words matter most.
      int64_t x = any(rng);
      if (i % 4 == 1) x = std::min<int64_t>(n - 1, x % 130);
      if (i % 4 == 3) x = std::max<int64_t>(0, n - 1 - x % 130);
      if (rng() % 3 == 0) {
        t.reset(x);
        ref.erase(x);
      } else {
        t.set(x);
        ref.insert(x);
      }
      ASSERT_EQ(t.test(x), ref.count(x) == 1);
      expect_same(t, ref);
      if (i == 1500) {  // growth in the middle keeps every member
        const int64_t grown = n + 70;
        t.resize(grown);
        expect_same(t, ref);
        any = std::uniform_int_distribution<int64_t>(0, grown - 1);
        n = grown;
      }
    }
    while (!ref.empty()) {  // drain from the low end
      t.reset(*ref.begin());
      ref.erase(ref.begin());
      expect_same(t, ref);
    }
  }
}

}  // namespace
}  // namespace kvcache
