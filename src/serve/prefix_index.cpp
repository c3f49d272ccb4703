// Block hash chain over token prefixes. See prefix_index.h.
#include "serve/prefix_index.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include <xxhash.h>

#include "core/str_cat.h"

namespace kvcache::serve {
namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

uint64_t block_namespace(uint64_t fingerprint, const CacheGeometry& geometry, DType k_dtype,
                         DType v_dtype, int32_t block_tokens, bool rotated) {
  std::vector<uint8_t> rec;
  put_str(rec, "kvcache.blocks.v1");
  put_u64(rec, fingerprint);
  put_u32(rec, static_cast<uint32_t>(block_tokens));
  // One type: its name, as before K and V could differ (the keys of such blocks stay put).
  const std::string types = k_dtype == v_dtype
                                ? std::string(to_string(k_dtype))
                                : str_cat("k=", to_string(k_dtype), ",v=", to_string(v_dtype));
  put_str(rec, rotated ? types + ",rotated" : types);
  put_u32(rec, static_cast<uint32_t>(geometry.layers.size()));
  for (const LayerGeometry& l : geometry.layers) {
    put_u32(rec, static_cast<uint32_t>(l.kv_heads));
    put_u32(rec, static_cast<uint32_t>(l.head_dim));
    put_u32(rec, static_cast<uint32_t>(l.value_dim));
    put_u32(rec, static_cast<uint32_t>(l.window));
  }
  // Attention sinks change what a layer's K/V means to the model; geometries without any keep
  // their earlier namespace (no trailing part).
  if (std::any_of(geometry.layers.begin(), geometry.layers.end(),
                  [](const LayerGeometry& l) { return l.sinks; })) {
    put_str(rec, "sinks");
    for (const LayerGeometry& l : geometry.layers) rec.push_back(l.sinks ? 1 : 0);
  }
  return XXH3_64bits(rec.data(), rec.size());
}

uint64_t block_key(uint64_t seed, uint64_t parent, std::span<const int32_t> block) {
  // Bytes hashed: parent (8, little-endian) then each id (4, little-endian); the hosts we
  // build for are little-endian, so the in-memory bytes are the specified ones.
  std::vector<uint8_t> bytes(8 + 4 * block.size());
  std::memcpy(bytes.data(), &parent, 8);
  if (!block.empty()) std::memcpy(bytes.data() + 8, block.data(), 4 * block.size());
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

PrefixIndex::PrefixIndex(int32_t block_tokens, uint64_t seed)
    : block_(std::max(1, block_tokens)), seed_(seed) {}

std::vector<uint64_t> PrefixIndex::keys(std::span<const int32_t> tokens) const {
  std::vector<uint64_t> out;
  const size_t n = tokens.size() / static_cast<size_t>(block_);
  out.reserve(n);
  uint64_t parent = 0;
  for (size_t i = 0; i < n; ++i) {
    parent = block_key(seed_, parent, tokens.subspan(i * block_, block_));
    out.push_back(parent);
  }
  return out;
}

void PrefixIndex::add(int32_t seq, std::span<const int32_t> tokens) {
  std::vector<uint64_t>& chain = chain_[seq];
  const size_t n = tokens.size() / static_cast<size_t>(block_);
  uint64_t parent = chain.empty() ? 0 : chain.back();
  for (size_t i = chain.size(); i < n; ++i) {
    parent = block_key(seed_, parent, tokens.subspan(i * block_, block_));
    chain.push_back(parent);
    holders_[parent].push_back(seq);
  }
}

void PrefixIndex::remove(int32_t seq) {
  auto it = chain_.find(seq);
  if (it == chain_.end()) return;
  for (uint64_t key : it->second) {
    auto h = holders_.find(key);
    if (h == holders_.end()) continue;
    std::vector<int32_t>& v = h->second;
    v.erase(std::remove(v.begin(), v.end(), seq), v.end());
    if (v.empty()) holders_.erase(h);
  }
  chain_.erase(it);
}

void PrefixIndex::clear() {
  holders_.clear();
  chain_.clear();
}

PrefixIndex::Match PrefixIndex::longest(std::span<const int32_t> tokens) const {
  Match best;
  const size_t n = tokens.size() / static_cast<size_t>(block_);
  uint64_t parent = 0;
  for (size_t i = 0; i < n; ++i) {
    parent = block_key(seed_, parent, tokens.subspan(i * block_, block_));
    auto h = holders_.find(parent);
    if (h == holders_.end()) break;
    // The most recently registered holder: the likeliest to stay (older ones are evicted
    // first), and any holder of block i holds blocks 0..i-1 too.
    best.seq = h->second.back();
    best.seqs.assign(h->second.rbegin(), h->second.rend());
    best.tokens = static_cast<int64_t>(i + 1) * block_;
  }
  return best;
}

int64_t PrefixIndex::registered_tokens(int32_t seq) const {
  auto it = chain_.find(seq);
  return it == chain_.end() ? 0 : static_cast<int64_t>(it->second.size()) * block_;
}

}  // namespace kvcache::serve
