// BitTree: a growable set of integers [0, size) with O(log64 n) insert, erase, lowest and
// highest member. Layer: core (internal helper of the cell layout: lowest free cell, highest
// occupied cell, lowest free sequence id). No K/V bytes; not part of the cache interface.
// Level 0 holds the members; bit j of level k+1 says word j of level k is non-zero.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvcache {

// Costs: resize O(n/64); test O(1); set, reset, first, last O(log64 n).
// Thread-safety: not thread-safe. Indices passed to test/set/reset must be in [0, size()).
class BitTree {
 public:
  int64_t size() const { return n_; }

  // Grows (or shrinks) to n bits, keeping members below n; new bits are clear.
  void resize(int64_t n) {
    std::vector<uint64_t> leaves = levels_.empty() ? std::vector<uint64_t>() : levels_[0];
    leaves.resize(static_cast<size_t>((n + 63) / 64), 0);
    if (n % 64 != 0 && !leaves.empty()) leaves.back() &= (uint64_t{1} << (n % 64)) - 1;
    n_ = n;
    levels_.clear();
    levels_.push_back(std::move(leaves));
    while (levels_.back().size() > 1) {
      const std::vector<uint64_t>& below = levels_.back();
      std::vector<uint64_t> up((below.size() + 63) / 64, 0);
      for (size_t j = 0; j < below.size(); ++j)
        if (below[j] != 0) up[j / 64] |= uint64_t{1} << (j % 64);
      levels_.push_back(std::move(up));
    }
  }

  bool empty() const {
    return levels_.empty() || levels_.back().empty() || levels_.back()[0] == 0;
  }

  bool test(int64_t i) const { return (levels_[0][i / 64] >> (i % 64)) & 1; }

  void set(int64_t i) {
    for (auto& level : levels_) {
      uint64_t& w = level[i / 64];
      const bool was_empty = w == 0;
      w |= uint64_t{1} << (i % 64);
      if (!was_empty) return;
      i /= 64;
    }
  }

  void reset(int64_t i) {
    for (auto& level : levels_) {
      uint64_t& w = level[i / 64];
      w &= ~(uint64_t{1} << (i % 64));
      if (w != 0) return;
      i /= 64;
    }
  }

  // Lowest member, -1 when empty.
  int64_t first() const {
    if (empty()) return -1;
    int64_t i = 0;
    for (size_t k = levels_.size(); k-- > 0;) i = i * 64 + std::countr_zero(levels_[k][i]);
    return i;
  }

  // Highest member, -1 when empty.
  int64_t last() const {
    if (empty()) return -1;
    int64_t i = 0;
    for (size_t k = levels_.size(); k-- > 0;) i = i * 64 + 63 - std::countl_zero(levels_[k][i]);
    return i;
  }

 private:
  int64_t n_ = 0;
  std::vector<std::vector<uint64_t>> levels_;  // [0] = members; top level is one word
};

}  // namespace kvcache
