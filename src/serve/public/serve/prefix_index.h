// The executor's token-prefix index: full blocks of B tokens keyed by a hash chain, mapped to
// the cache sequences whose leading positions hold them. Layer: serve. It knows token ids and
// sequence ids only — no cells, no bytes; the executor verifies a match against the holder's
// own tokens before it clones, so a hash collision costs a miss, never a wrong prefix.
// Why blocks and a chain rather than a radix tree: the key of block i names all tokens [0,
// (i+1)·B), so the same keys can later address blocks in a store shared by replicas.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/geometry.h"

namespace kvcache::serve {

// The namespace of a model's block keys (docs/executor.md, "Block keys"): XXH3-64 (seed 0) over
// str("kvcache.blocks.v1"), u64 fingerprint, u32 block_tokens, str(dtype name), u32 cache layer
// count and per cache layer u32 kv_heads, head_dim, value_dim, window — all little-endian, a
// str being a u64 byte length then the bytes. It seeds block_key(): keys of another model,
// geometry, kv dtype or block size never meet.
// With K and V of different types, str(dtype name) is "k=<key type>,v=<value type>"; rotated
// K/V append ",rotated".
uint64_t block_namespace(uint64_t fingerprint, const CacheGeometry& geometry, DType k_dtype,
                         DType v_dtype, int32_t block_tokens, bool rotated = false);
inline uint64_t block_namespace(uint64_t fingerprint, const CacheGeometry& geometry,
                                DType kv_dtype, int32_t block_tokens) {
  return block_namespace(fingerprint, geometry, kv_dtype, kv_dtype, block_tokens);
}

// Key of a block: XXH3-64 over (parent key, the block's token ids as little-endian int32),
// seeded with `seed`; the first block's parent key is 0.
uint64_t block_key(uint64_t seed, uint64_t parent, std::span<const int32_t> block);

// Thread-safety: not thread-safe (the executor's thread owns it).
class PrefixIndex {
 public:
  // block_tokens > 0 (the caller validates). `seed` namespaces the keys (e.g. a model
  // fingerprint), so keys of different models never meet.
  explicit PrefixIndex(int32_t block_tokens, uint64_t seed = 0);

  int32_t block_tokens() const { return block_; }
  uint64_t seed() const { return seed_; }
  // Chained keys of the full blocks of `tokens` (tokens.size() / B of them).
  std::vector<uint64_t> keys(std::span<const int32_t> tokens) const;

  // Records that `seq` holds `tokens` at positions [0, tokens.size()): registers its full
  // blocks not registered yet. The tokens must extend what was registered for seq before
  // (the executor calls it as a sequence grows; call remove() first after a rewind).
  void add(int32_t seq, std::span<const int32_t> tokens);
  // Forgets every block of seq. O(its blocks).
  void remove(int32_t seq);
  void clear();

  struct Match {
    int32_t seq = -1;           // a holder of the longest run of leading blocks; -1 = none
    int64_t tokens = 0;         // block-aligned length of that run
    std::vector<int32_t> seqs;  // every holder of that run, most recently registered first
  };
  // The longest run of leading blocks of `tokens` that some sequence holds. O(blocks).
  Match longest(std::span<const int32_t> tokens) const;

  int64_t blocks() const { return static_cast<int64_t>(holders_.size()); }  // distinct keys
  int64_t registered_tokens(int32_t seq) const;  // full-block tokens registered for seq

 private:
  int32_t block_;
  uint64_t seed_;
  std::unordered_map<uint64_t, std::vector<int32_t>> holders_;  // key -> sequences
  std::unordered_map<int32_t, std::vector<uint64_t>> chain_;    // seq -> its keys, in order
};

}  // namespace kvcache::serve
