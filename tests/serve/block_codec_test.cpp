// Store blocks: the key namespace and chain as docs/executor.md specifies them (the record is
// rebuilt here byte by byte from the document), and the block value format — round trip, and
// every kind of damage refused with its fault: flipped, truncated, another key, other tokens,
// another model.
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "serve/block_codec.h"
#include "serve/kv_store.h"
#include "serve/prefix_index.h"

namespace kvcache::serve {
namespace {

CacheGeometry geometry() {
  CacheGeometry g;
  g.layers = {{2, 8, 8, 0}, {1, 8, 4, 3}, {2, 4, 4, 0}};  // full, sliding(3), full
  return g;
}

void le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

TEST(BlockKeys, NamespaceIsTheDocumentedRecord) {
  const CacheGeometry g = geometry();
  std::vector<uint8_t> rec;
  const std::string tag = "kvcache.blocks.v1";
  le(rec, tag.size(), 8);
  rec.insert(rec.end(), tag.begin(), tag.end());
  le(rec, 0x1122334455667788ull, 8);  // fingerprint
  le(rec, 16, 4);                      // block tokens
  le(rec, 3, 8);
  rec.insert(rec.end(), {'f', '1', '6'});
  le(rec, 3, 4);                       // cache layers
  for (const LayerGeometry& l : g.layers) {
    le(rec, l.kv_heads, 4);
    le(rec, l.head_dim, 4);
    le(rec, l.value_dim, 4);
    le(rec, l.window, 4);
  }
  const uint64_t ns = block_namespace(0x1122334455667788ull, g, DType::kF16, 16);
  EXPECT_EQ(ns, XXH3_64bits(rec.data(), rec.size()));
  // With attention sinks on layer 1 the record gains str("sinks") and a byte per layer.
  CacheGeometry sinks = g;
  sinks.layers[1].sinks = true;
  std::vector<uint8_t> with = rec;
  le(with, 5, 8);
  with.insert(with.end(), {'s', 'i', 'n', 'k', 's', 0, 1, 0});
  EXPECT_EQ(block_namespace(0x1122334455667788ull, sinks, DType::kF16, 16),
            XXH3_64bits(with.data(), with.size()));
  // Block key: XXH3-64 with the namespace as seed over LE64(parent) then LE32 ids.
  std::vector<int32_t> ids(16);
  for (int32_t i = 0; i < 16; ++i) ids[i] = 1000 + i;
  std::vector<uint8_t> blk;
  le(blk, 0, 8);
  for (int32_t t : ids) le(blk, static_cast<uint32_t>(t), 4);
  const uint64_t k0 = XXH3_64bits_withSeed(blk.data(), blk.size(), ns);
  EXPECT_EQ(PrefixIndex(16, ns).keys(ids).at(0), k0);
  EXPECT_EQ(block_store_key(0x00ab00000000cd01ull), "kvcache:blk:00ab00000000cd01");
}

TEST(BlockKeys, AnotherModelGeometryDtypeOrBlockSizeGivesAnotherNamespace) {
  const CacheGeometry g = geometry();
  const uint64_t base = block_namespace(7, g, DType::kF32, 16);
  EXPECT_NE(block_namespace(8, g, DType::kF32, 16), base);
  EXPECT_NE(block_namespace(7, g, DType::kBF16, 16), base);
  EXPECT_NE(block_namespace(7, g, DType::kF32, 32), base);
  CacheGeometry w = g;
  w.layers[1].window = 4;
  EXPECT_NE(block_namespace(7, w, DType::kF32, 16), base);
  CacheGeometry h = g;
  h.layers[2].kv_heads = 1;
  EXPECT_NE(block_namespace(7, h, DType::kF32, 16), base);
  CacheGeometry s0 = g, s2 = g;
  s0.layers[0].sinks = true;
  s2.layers[2].sinks = true;
  EXPECT_NE(block_namespace(7, s0, DType::kF32, 16), base);
  EXPECT_NE(block_namespace(7, s2, DType::kF32, 16), block_namespace(7, s0, DType::kF32, 16));
  EXPECT_EQ(block_namespace(7, geometry(), DType::kF32, 16), base);  // deterministic
}

struct Fixture {
  BlockFormat f;
  std::vector<int32_t> tokens;
  BlockId id;
  std::vector<BlockLayerRows> rows;
  Fixture() {
    f.ns = 99;
    f.fingerprint = 1234;
    f.geometry = geometry();
    f.k_dtype = f.v_dtype = DType::kF16;
    f.block_tokens = 4;
    tokens = {5, 6, 7, 8};
    id.key = 0xabc;
    id.parent = 0xdef;
    id.index = 3;
    id.tokens = tokens;
    uint8_t x = 1;
    for (int32_t l = 0; l < 3; ++l) {
      BlockLayerRows r;
      r.k.resize(static_cast<size_t>(f.rows(l) * f.k_row_bytes(l)));
      r.v.resize(static_cast<size_t>(f.rows(l) * f.v_row_bytes(l)));
      for (uint8_t& b : r.k) b = x++;
      for (uint8_t& b : r.v) b = x++;
      rows.push_back(std::move(r));
    }
  }
};

TEST(BlockCodec, SizesFollowTheLayerPolicies) {
  Fixture fx;
  // Full layers keep B = 4 rows; sliding(3) keeps W - 1 = 2: positions [14, 16) of block 3.
  EXPECT_EQ(fx.f.rows(0), 4);
  EXPECT_EQ(fx.f.rows(1), 2);
  EXPECT_EQ(fx.f.rows_first(1, 3), 14);
  EXPECT_EQ(fx.f.rows_first(0, 3), 12);
  // 4·(2·8 + 2·8)·2 + 2·(1·8 + 1·4)·2 + 4·(2·4 + 2·4)·2 = 256 + 48 + 128
  EXPECT_EQ(fx.f.payload_bytes(), 432);
  EXPECT_EQ(fx.f.value_bytes(), 80 + 16 + 432);
}

TEST(BlockCodec, RoundTripsTheRows) {
  Fixture fx;
  Result<std::string> v = encode_block(fx.f, fx.id, fx.rows);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(static_cast<int64_t>(v->size()), fx.f.value_bytes());
  EXPECT_EQ(v->substr(0, 8), "kvcblock");
  DecodedBlock d = decode_block(fx.f, fx.id, *v);
  ASSERT_EQ(d.fault, BlockFault::kNone) << d.reason;
  ASSERT_EQ(d.layers.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(d.layers[l].k, fx.rows[l].k);
    EXPECT_EQ(d.layers[l].v, fx.rows[l].v);
  }
}

TEST(BlockCodec, EveryFlippedByteIsRefused) {
  Fixture fx;
  const std::string v = *encode_block(fx.f, fx.id, fx.rows);
  for (size_t i = 0; i < v.size(); ++i) {
    std::string bad = v;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    const DecodedBlock d = decode_block(fx.f, fx.id, bad);
    EXPECT_NE(d.fault, BlockFault::kNone) << "byte " << i;
    EXPECT_TRUE(d.layers.empty());
  }
}

TEST(BlockCodec, TruncatedOrPaddedIsAChecksumFault) {
  Fixture fx;
  const std::string v = *encode_block(fx.f, fx.id, fx.rows);
  for (size_t n : {size_t{0}, size_t{7}, size_t{79}, size_t{80}, v.size() - 1}) {
    const DecodedBlock d = decode_block(fx.f, fx.id, v.substr(0, n));
    EXPECT_EQ(d.fault, BlockFault::kChecksum) << n;
  }
  EXPECT_EQ(decode_block(fx.f, fx.id, v + "x").fault, BlockFault::kChecksum);
}

TEST(BlockCodec, AnIntactBlockOfAnotherKeyModelOrTokensIsAMismatch) {
  Fixture fx;
  const std::string v = *encode_block(fx.f, fx.id, fx.rows);
  BlockId other = fx.id;
  other.key = 0xabd;  // a value stored under another key (swapped)
  DecodedBlock d = decode_block(fx.f, other, v);
  EXPECT_EQ(d.fault, BlockFault::kMismatch);
  EXPECT_NE(d.reason.find("key 0000000000000abc, expected 0000000000000abd"), std::string::npos)
      << d.reason;
  other = fx.id;
  other.parent = 1;
  EXPECT_EQ(decode_block(fx.f, other, v).fault, BlockFault::kMismatch);
  const std::vector<int32_t> toks = {5, 6, 7, 9};
  other = fx.id;
  other.tokens = toks;
  EXPECT_EQ(decode_block(fx.f, other, v).fault, BlockFault::kMismatch);
  BlockFormat model = fx.f;
  model.fingerprint = 1235;
  EXPECT_EQ(decode_block(model, fx.id, v).fault, BlockFault::kMismatch);
}

TEST(BlockCodec, AnotherVersionNamesBoth) {
  Fixture fx;
  std::string v = *encode_block(fx.f, fx.id, fx.rows);
  v[8] = 1;  // before K and V had types of their own
  const DecodedBlock d = decode_block(fx.f, fx.id, v);
  EXPECT_EQ(d.fault, BlockFault::kMismatch);
  EXPECT_NE(d.reason.find("version 1, expected 2"), std::string::npos) << d.reason;
}

// A block written with q8_0 keys is never read by a reader of another type: the namespace
// (so every key) differs, and a value found under a reader's key anyway is refused by its type
// field, naming both pairs.
TEST(BlockCodec, QuantizedBlocksCarryTheirTypesAndSizes) {
  const CacheGeometry g{{LayerGeometry{2, 64, 32, 0}}};
  EXPECT_NE(block_namespace(7, g, DType::kQ8_0, DType::kF16, 4),
            block_namespace(7, g, DType::kF16, 4));
  EXPECT_NE(block_namespace(7, g, DType::kQ8_0, DType::kF16, 4),
            block_namespace(7, g, DType::kF16, DType::kQ8_0, 4));
  EXPECT_EQ(block_namespace(7, g, DType::kQ8_0, DType::kQ8_0, 4),
            block_namespace(7, g, DType::kQ8_0, 4));
  BlockFormat f;
  f.geometry = g;
  f.k_dtype = DType::kQ8_0;
  f.v_dtype = DType::kQ4_0;
  f.block_tokens = 4;
  f.ns = block_namespace(5, g, f.k_dtype, f.v_dtype, 4);
  // Rows: 2 heads x 2 blocks of 34 bytes = 136 for K, 2 x 1 block of 18 = 36 for V.
  EXPECT_EQ(f.k_row_bytes(0), 136);
  EXPECT_EQ(f.v_row_bytes(0), 36);
  std::vector<BlockLayerRows> rows(1);
  rows[0].k.assign(4 * 136, 0x11);
  rows[0].v.assign(4 * 36, 0x22);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  BlockId id;
  id.key = 99;
  id.tokens = toks;
  const std::string v = *encode_block(f, id, rows);
  const DecodedBlock ok = decode_block(f, id, v);
  ASSERT_EQ(ok.fault, BlockFault::kNone) << ok.reason;
  EXPECT_EQ(ok.layers[0].k, rows[0].k);
  EXPECT_EQ(ok.layers[0].v, rows[0].v);
  // A reader of other types whose rows happen to total the same bytes (K q4_0 32 wide, V
  // q8_0 64 wide: 2 x (18 + 68) = 172 a position, as 2 x (68 + 18)), namespace forced equal:
  // the type field still refuses it by name.
  BlockFormat reader = f;
  reader.geometry = CacheGeometry{{LayerGeometry{2, 32, 64, 0}}};
  reader.k_dtype = DType::kQ4_0;
  reader.v_dtype = DType::kQ8_0;
  ASSERT_EQ(reader.payload_bytes(), f.payload_bytes());
  const DecodedBlock d = decode_block(reader, id, v);
  EXPECT_EQ(d.fault, BlockFault::kMismatch);
  EXPECT_EQ(d.reason, "store block: K/V types k q8_0, v q4_0, expected k q4_0, v q8_0");
}

TEST(BlockCodec, RowsOfTheWrongSizeAreNotEncoded) {
  Fixture fx;
  fx.rows[1].k.pop_back();
  Result<std::string> v = encode_block(fx.f, fx.id, fx.rows);
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> three = {1, 2, 3};
  Fixture fy;
  fy.id.tokens = three;
  EXPECT_EQ(encode_block(fy.f, fy.id, fy.rows).status().code(), StatusCode::kInvalidArgument);
}

// A store in memory that records its calls (read after StoreWorker::flush()).
class FakeStore final : public BlockStore {
 public:
  Result<std::vector<std::optional<std::string>>> get(
      std::span<const std::string> keys) override {
    batches.push_back(keys.size());
    std::vector<std::optional<std::string>> out;
    for (const std::string& k : keys) {
      auto it = kv.find(k);
      out.push_back(it == kv.end() ? std::nullopt : std::optional<std::string>(it->second));
    }
    return out;
  }
  Result<bool> put_if_absent(const std::string& key, std::string_view value) override {
    return kv.emplace(key, std::string(value)).second;
  }
  Status remove(const std::string& key) override {
    kv.erase(key);
    return ok_status();
  }
  std::map<std::string, std::string> kv;
  std::vector<size_t> batches;  // keys per get()
};

TEST(StoreWorker, FetchesInBoundedBatchesAndStopsAtTheFirstMiss) {
  BlockFormat f;
  f.geometry.layers = {{8, 128, 128, 0}};
  f.k_dtype = f.v_dtype = DType::kF32;
  f.block_tokens = 256;  // 256 rows x 8 KiB: 2 MiB a block, so 3 blocks per 8 MiB batch
  f.ns = block_namespace(5, f.geometry, f.k_dtype, f.block_tokens);
  f.fingerprint = 5;
  auto fake = std::make_unique<FakeStore>();
  FakeStore& store = *fake;
  StoreWorker worker(std::move(fake), f);
  std::vector<int32_t> tokens(7 * 256);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 1000);
  const std::vector<uint64_t> keys = PrefixIndex(256, f.ns).keys(tokens);
  for (int64_t i = 0; i < 7; ++i) {
    PutJob p;
    p.key = keys[static_cast<size_t>(i)];
    p.parent = i == 0 ? 0 : keys[static_cast<size_t>(i - 1)];
    p.index = i;
    p.tokens.assign(tokens.begin() + i * 256, tokens.begin() + (i + 1) * 256);
    p.layers.resize(1);
    p.layers[0].k.assign(static_cast<size_t>(f.rows(0) * f.k_row_bytes(0)), static_cast<uint8_t>(i));
    p.layers[0].v.assign(static_cast<size_t>(f.rows(0) * f.v_row_bytes(0)), 7);
    worker.put(std::move(p));
  }
  // Lookups go before queued writes (a request may wait for one), so let the writes finish.
  ASSERT_TRUE(worker.flush(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  auto lookup = [&](int64_t ticket) {
    LookupJob j;
    j.ticket = ticket;
    j.keys = keys;
    j.tokens = tokens;
    worker.lookup(std::move(j));
    EXPECT_TRUE(worker.flush(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
    std::vector<LookupAnswer> a = worker.take_answers();
    EXPECT_EQ(a.size(), 1u);
    return a.empty() ? LookupAnswer{} : std::move(a[0]);
  };
  LookupAnswer a = lookup(1);
  EXPECT_EQ(a.ticket, 1);
  EXPECT_EQ(a.blocks, 7);
  EXPECT_EQ(a.from, 0);
  EXPECT_EQ(a.to, 7 * 256);
  ASSERT_EQ(a.rows.size(), 1u);
  EXPECT_EQ(a.rows[0].first, 0);
  ASSERT_EQ(a.rows[0].n, 7 * 256);  // ready for write_rows: one run of rows per layer
  const size_t kb = static_cast<size_t>(f.k_row_bytes(0));
  for (size_t blk = 0; blk < 7; ++blk)  // each block's own rows, in chain order
    EXPECT_EQ(a.rows[0].k.at(blk * 256 * kb), blk);
  EXPECT_EQ(a.rows[0].v.size(), a.rows[0].k.size());
  EXPECT_EQ(store.batches, (std::vector<size_t>{3, 3, 1}));
  // Block 4 gone: the second batch finds the miss and the third is never asked for.
  store.kv.erase(block_store_key(keys[4]));
  store.batches.clear();
  a = lookup(2);
  EXPECT_EQ(a.blocks, 4);
  EXPECT_EQ(a.to, 4 * 256);
  EXPECT_EQ(store.batches, (std::vector<size_t>{3, 3}));
  const StoreStats s = worker.stats();
  EXPECT_EQ(s.puts, 7);
  EXPECT_EQ(s.lookups, 2);
  EXPECT_EQ(s.hit_blocks, 11);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.bytes_in, 12 * f.value_bytes());  // 7, then 3 + 2 (the miss is not a byte)
  // A ticket forgotten before its answer is taken never comes back.
  LookupJob j;
  j.ticket = 3;
  j.keys = keys;
  j.tokens = tokens;
  worker.lookup(std::move(j));
  worker.forget(3);
  worker.flush(std::chrono::steady_clock::now() + std::chrono::seconds(30));
  EXPECT_TRUE(worker.take_answers().empty());
}

TEST(StoreUrl, ParsesHostPortAndDatabase) {
  Result<StoreAddress> a = parse_store_url("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  a = parse_store_url("redis://cache.local:6379");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->db, 0);
  for (const char* bad : {"http://x:1", "redis://x", "redis://:1", "redis://x:0",
                          "redis://x:70000", "redis://x:1/16", "redis://x:1/a", "redis://x:1x"}) {
    Result<StoreAddress> r = parse_store_url(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kvcache::serve
