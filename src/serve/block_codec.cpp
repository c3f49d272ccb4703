// Store block bytes: encode and validate. See block_codec.h; the layout is in docs/executor.md.
#include "serve/block_codec.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

#include "core/str_cat.h"

namespace kvcache::serve {
namespace {

// Header offsets (all little-endian).
constexpr size_t kOffVersion = 8, kOffDtype = 12, kOffKey = 16, kOffParent = 24, kOffNs = 32,
                 kOffFingerprint = 40, kOffIndex = 48, kOffBlock = 56, kOffLayers = 60,
                 kOffPayload = 64, kOffChecksum = 72;

void put(std::string& out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}

uint64_t get(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  return v;
}

// XXH3-64 of the value without its checksum field.
uint64_t checksum(std::string_view v) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, v.data(), kOffChecksum);
  XXH3_64bits_update(st, v.data() + kBlockHeaderBytes, v.size() - kBlockHeaderBytes);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string hex(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}

DecodedBlock refuse(BlockFault f, std::string why) {
  DecodedBlock d;
  d.fault = f;
  d.reason = "store block: " + std::move(why);
  return d;
}

}  // namespace

namespace {
// The header's type field: key type in bits 0..7, value type in 8..15, rotation in bit 16.
uint32_t type_field(const BlockFormat& f) {
  return static_cast<uint32_t>(f.k_dtype) | static_cast<uint32_t>(f.v_dtype) << 8 |
         (f.rotated ? 1u : 0u) << 16;
}
std::string type_name(uint64_t n) {
  const auto d = static_cast<DType>(n);
  return known_dtype(d) ? std::string(to_string(d)) : str_cat("type ", n);
}
// "" when the stored field names the format's types; else both pairs by name.
std::string types_differ(uint64_t stored, const BlockFormat& f) {
  if (stored == type_field(f)) return {};
  return str_cat("K/V types k ", type_name(stored & 0xFF), ", v ", type_name(stored >> 8 & 0xFF),
                 (stored >> 16 & 1) ? " rotated" : "", ", expected k ", to_string(f.k_dtype),
                 ", v ", to_string(f.v_dtype), f.rotated ? " rotated" : "");
}
}  // namespace

int64_t BlockFormat::rows(int32_t layer) const {
  const int32_t w = geometry.layers[static_cast<size_t>(layer)].window;
  return block_tokens - first_visible(w, block_tokens);
}

int64_t BlockFormat::rows_first(int32_t layer, int64_t index) const {
  return (index + 1) * block_tokens - rows(layer);
}

int64_t BlockFormat::k_row_bytes(int32_t layer) const {
  const LayerGeometry& l = geometry.layers[static_cast<size_t>(layer)];
  return int64_t{l.kv_heads} * row_bytes(k_dtype, l.head_dim).value_or(0);
}

int64_t BlockFormat::v_row_bytes(int32_t layer) const {
  const LayerGeometry& l = geometry.layers[static_cast<size_t>(layer)];
  return int64_t{l.kv_heads} * row_bytes(v_dtype, l.value_dim).value_or(0);
}

int64_t BlockFormat::payload_bytes() const {
  int64_t n = 0;
  for (int32_t l = 0; l < static_cast<int32_t>(geometry.layers.size()); ++l)
    n += rows(l) * (k_row_bytes(l) + v_row_bytes(l));
  return n;
}

int64_t BlockFormat::layer_offset(int32_t layer) const {
  int64_t at = static_cast<int64_t>(kBlockHeaderBytes) + 4 * int64_t{block_tokens};
  for (int32_t l = 0; l < layer; ++l) at += rows(l) * (k_row_bytes(l) + v_row_bytes(l));
  return at;
}

int64_t BlockFormat::value_bytes() const {
  return static_cast<int64_t>(kBlockHeaderBytes) + 4 * int64_t{block_tokens} + payload_bytes();
}

std::string block_store_key(uint64_t key) { return "kvcache:blk:" + hex(key); }

Result<std::string> encode_block(const BlockFormat& f, const BlockId& id,
                                 std::span<const BlockLayerRows> layers) {
  if (static_cast<int64_t>(id.tokens.size()) != f.block_tokens)
    return invalid_argument(str_cat("encode_block: ", id.tokens.size(),
                                    " token ids, expected ", f.block_tokens));
  if (layers.size() != f.geometry.layers.size())
    return invalid_argument(str_cat("encode_block: ", layers.size(),
                                    " layers, expected ", f.geometry.layers.size()));
  for (int32_t l = 0; l < static_cast<int32_t>(layers.size()); ++l) {
    const BlockLayerRows& r = layers[static_cast<size_t>(l)];
    if (static_cast<int64_t>(r.k.size()) != f.rows(l) * f.k_row_bytes(l) ||
        static_cast<int64_t>(r.v.size()) != f.rows(l) * f.v_row_bytes(l))
      return invalid_argument(str_cat("encode_block: layer ", l, " holds ",
                                      r.k.size(), " + ", r.v.size(),
                                      " bytes, expected ", f.rows(l), " rows"));
  }
  std::string out(static_cast<size_t>(f.value_bytes()), '\0');
  std::memcpy(out.data(), kBlockMagic, 8);
  put(out, kOffVersion, kBlockVersion, 4);
  put(out, kOffDtype, type_field(f), 4);
  put(out, kOffKey, id.key, 8);
  put(out, kOffParent, id.parent, 8);
  put(out, kOffNs, f.ns, 8);
  put(out, kOffFingerprint, f.fingerprint, 8);
  put(out, kOffIndex, static_cast<uint64_t>(id.index), 8);
  put(out, kOffBlock, static_cast<uint32_t>(f.block_tokens), 4);
  put(out, kOffLayers, static_cast<uint32_t>(f.geometry.layers.size()), 4);
  put(out, kOffPayload, static_cast<uint64_t>(f.payload_bytes()), 8);
  size_t at = kBlockHeaderBytes;
  for (int32_t t : id.tokens) {
    put(out, at, static_cast<uint32_t>(t), 4);
    at += 4;
  }
  for (const BlockLayerRows& r : layers) {
    if (!r.k.empty()) std::memcpy(out.data() + at, r.k.data(), r.k.size());
    at += r.k.size();
    if (!r.v.empty()) std::memcpy(out.data() + at, r.v.data(), r.v.size());
    at += r.v.size();
  }
  put(out, kOffChecksum, checksum(out), 8);
  return out;
}

DecodedBlock decode_block(const BlockFormat& f, const BlockId& id, std::string_view v,
                          bool copy_rows) {
  const int64_t want = f.value_bytes();
  if (v.size() < kBlockHeaderBytes)
    return refuse(BlockFault::kChecksum, str_cat(v.size(), " bytes, shorter than the ",
                                                 kBlockHeaderBytes, "-byte header"));
  if (std::memcmp(v.data(), kBlockMagic, 8) != 0)
    return refuse(BlockFault::kChecksum, "bad magic (not a kvcache block)");
  const uint64_t version = get(v, kOffVersion, 4);
  if (version != kBlockVersion)
    return refuse(BlockFault::kMismatch, str_cat("version ", version, ", expected ",
                                                 kBlockVersion,
                                                 " (written by another kvcache release)"));
  if (static_cast<int64_t>(v.size()) != want)
    return refuse(BlockFault::kChecksum, str_cat(v.size(), " bytes, expected ",
                                                 want, " (truncated or padded)"));
  const uint64_t sum = get(v, kOffChecksum, 8);
  if (sum != checksum(v))
    return refuse(BlockFault::kChecksum, "checksum mismatch for key " + hex(id.key));
  auto field = [&](const char* name, uint64_t got, uint64_t expect) -> std::string {
    return got == expect ? std::string()
                         : std::string(name) + " " + hex(got) + ", expected " + hex(expect);
  };
  for (std::string why : {field("key", get(v, kOffKey, 8), id.key),
                          field("parent key", get(v, kOffParent, 8), id.parent),
                          field("namespace", get(v, kOffNs, 8), f.ns),
                          field("model fingerprint", get(v, kOffFingerprint, 8), f.fingerprint),
                          field("block index", get(v, kOffIndex, 8),
                                static_cast<uint64_t>(id.index)),
                          field("block tokens", get(v, kOffBlock, 4),
                                static_cast<uint32_t>(f.block_tokens)),
                          types_differ(get(v, kOffDtype, 4), f),
                          field("cache layers", get(v, kOffLayers, 4), f.geometry.layers.size()),
                          field("payload bytes", get(v, kOffPayload, 8),
                                static_cast<uint64_t>(f.payload_bytes()))})
    if (!why.empty()) return refuse(BlockFault::kMismatch, why);
  if (static_cast<int64_t>(id.tokens.size()) != f.block_tokens)
    return refuse(BlockFault::kMismatch, str_cat("the reader asked with ",
                                                 id.tokens.size(), " token ids"));
  size_t at = kBlockHeaderBytes;
  for (size_t i = 0; i < id.tokens.size(); ++i, at += 4)
    if (static_cast<int32_t>(get(v, at, 4)) != id.tokens[i])
      return refuse(BlockFault::kMismatch, str_cat("token ", i, " differs"));
  DecodedBlock d;
  if (!copy_rows) return d;
  d.layers.resize(f.geometry.layers.size());
  for (int32_t l = 0; l < static_cast<int32_t>(d.layers.size()); ++l) {
    BlockLayerRows& r = d.layers[static_cast<size_t>(l)];
    const auto kb = static_cast<size_t>(f.rows(l) * f.k_row_bytes(l));
    const auto vb = static_cast<size_t>(f.rows(l) * f.v_row_bytes(l));
    r.k.assign(v.data() + at, v.data() + at + kb);
    at += kb;
    r.v.assign(v.data() + at, v.data() + at + vb);
    at += vb;
  }
  return d;
}

}  // namespace kvcache::serve
