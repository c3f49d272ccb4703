// The byte format of one prefix block in a shared store (docs/executor.md, "Store blocks"): a
// fixed header (magic, version, its own key, parent key, key namespace, model fingerprint,
// block index and size, key and value types, layer count, payload size), an XXH3-64
// checksum, the block's token ids, then per cache layer the K and V rows the block holds. Layer: serve. It encodes
// and validates bytes only; it does not talk to a store or touch a cache.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"

namespace kvcache::serve {

inline constexpr char kBlockMagic[8] = {'k', 'v', 'c', 'b', 'l', 'o', 'c', 'k'};
// Version 2: the type field holds the key type (bits 0..7), the value type (8..15) and the
// rotation (bit 16), so a q8_0 block is never read as f16 nor a rotated one as unrotated; a
// version-1 block is refused (a miss: recompute).
inline constexpr uint32_t kBlockVersion = 2;
inline constexpr size_t kBlockHeaderBytes = 80;  // before the token ids

// What the blocks of one executor are: the same for every block it writes or reads.
struct BlockFormat {
  uint64_t ns = 0;           // block_namespace(): seeds the keys
  uint64_t fingerprint = 0;  // engine::Model::fingerprint()
  CacheGeometry geometry;
  DType k_dtype = DType::kF32;  // the cache's key type
  DType v_dtype = DType::kF32;  // the cache's value type
  bool rotated = false;         // K/V stored Hadamard-rotated
  int32_t block_tokens = 0;  // B > 0

  // Positions [first, end) block `index` holds for cache layer `layer`: all B of them on a
  // full layer; on a Sliding(W) layer only those a query at the block's end can still see,
  // [max(index·B, (index+1)·B - (W-1)), (index+1)·B).
  int64_t rows_first(int32_t layer, int64_t index) const;
  int64_t rows(int32_t layer) const;  // that count: B, or min(B, W - 1)
  int64_t k_row_bytes(int32_t layer) const;  // kv_heads × row_bytes(k_dtype, head_dim)
  int64_t v_row_bytes(int32_t layer) const;  // kv_heads × row_bytes(v_dtype, value_dim)
  int64_t payload_bytes() const;             // sum over layers of rows × (k + v row bytes)
  int64_t layer_offset(int32_t layer) const; // where the layer's K rows start in a value
  int64_t value_bytes() const;               // header + checksum + ids + payload
};

// One cache layer's rows of a block: rows(layer) rows, oldest position first, each row
// kv_heads rows of dim values (head-major) in the format's key / value type as stored.
struct BlockLayerRows {
  std::vector<uint8_t> k, v;
};

// Which block a reader asked for: a value is accepted only if it says exactly this.
struct BlockId {
  uint64_t key = 0;
  uint64_t parent = 0;   // the previous block's key; 0 for block 0
  int64_t index = 0;     // positions [index·B, (index+1)·B)
  std::span<const int32_t> tokens;  // the B token ids
};

// The value bytes. InvalidArgument when the rows do not have the format's sizes or the token
// count is not B.
Result<std::string> encode_block(const BlockFormat& format, const BlockId& id,
                                 std::span<const BlockLayerRows> layers);

// Why a value was refused (a store counts them apart).
enum class BlockFault { kNone, kChecksum, kMismatch };

struct DecodedBlock {
  BlockFault fault = BlockFault::kNone;
  std::string reason;                   // set with a fault: names the field and the values
  std::vector<BlockLayerRows> layers;   // per cache layer, when accepted
};

// Validates everything before returning rows: size, magic, version (a hint names both), the
// checksum (kChecksum), then key, parent, namespace, fingerprint, index, block size, types,
// layer count, payload size and token ids against `format` and `id` (kMismatch). With
// copy_rows false an accepted block's layers stay empty (read them at layer_offset()).
DecodedBlock decode_block(const BlockFormat& format, const BlockId& id, std::string_view value,
                          bool copy_rows = true);

// The store key of a block: "kvcache:blk:" then the key as 16 lowercase hex digits.
std::string block_store_key(uint64_t key);

}  // namespace kvcache::serve
