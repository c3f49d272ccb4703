// Session snapshots: a conversation captured from one cache and restored into a fresh one of
// either layout and every kv dtype continues with exactly the greedy tokens of the original;
// truncated, bit-flipped and foreign (model, geometry, dtype) snapshots are refused with
// their specific codes before the cache is touched.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/snapshot.h"
#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The default tiny spec: cache layers full, sliding(4), full; step 4; model layer 3 shares
// cache layer 1.
CacheOptions options(const char* kind, DType dt, int64_t capacity = 64) {
  CacheOptions o;
  o.kind = kind;
  o.kv_dtype = dt;
  o.capacity = capacity;
  return o;
}

std::vector<int32_t> greedy_turn(Session& s, const std::vector<int32_t>& prompt, int n) {
  Sampler sampler(SamplerConfig{});
  Result<TurnStats> st = s.turn(prompt, n, sampler);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? st->generated : std::vector<int32_t>{};
}

// A conversation of 11 prompt tokens and 6 generated ones (16 positions: the sliding layer's
// ring of 4 + 8 - 1 = 11 slots has wrapped) and its snapshot.
struct Captured {
  Built built;
  std::unique_ptr<Session> session;
  Snapshot snapshot;
};

Captured converse(const Model& model, const CacheOptions& o) {
  Captured c{build(model, o), nullptr, {}};
  c.session = std::make_unique<Session>(*c.built.engine, c.built.setup.step_tokens, c.built.seq);
  greedy_turn(*c.session, some_tokens(11, 260, 5), 6);
  EXPECT_EQ(c.session->pos(), 16);
  Result<Snapshot> s = capture_snapshot(*c.built.cache, c.session->seq(), model.fingerprint(),
                                        c.session->conversation());
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (s.ok()) c.snapshot = std::move(*s);
  return c;
}

TEST(Snapshot, RestoredConversationContinuesWithTheOriginalsGreedyTokens) {
  Model model = tiny_model(TinySpec{});
  for (DType dt : kDtypes)
    for (const char* from : {"sequence", "cell"})
      for (const char* to : {"sequence", "cell"}) {
        SCOPED_TRACE(std::string(from) + " -> " + to + " " + std::string(to_string(dt)));
        Captured a = converse(model, options(from, dt));
        const std::vector<uint8_t> bytes = encode_snapshot(a.snapshot);
        EXPECT_EQ(static_cast<int64_t>(bytes.size()), encoded_snapshot_bytes(a.snapshot));
        Result<Snapshot> back = decode_snapshot(bytes);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->fingerprint, model.fingerprint());
        EXPECT_EQ(back->positions, 16);
        EXPECT_EQ(back->tokens, a.session->conversation());
        EXPECT_EQ(back->tokens.size(), 17u);  // 16 positions + the held-back token
        EXPECT_EQ(back->layers[0].n, 16);     // full layers: every position
        EXPECT_EQ(back->layers[2].n, 16);
        // The ring holds its W + step - 1 = 4 + 8 - 1 slots' positions; the cell layout's
        // pool the last W - 1 = 3.
        EXPECT_EQ(back->layers[1].n, std::string(from) == "sequence" ? 11 : 3);
        EXPECT_EQ(back->layers[1].k, a.snapshot.layers[1].k);

        Built b = build(model, options(to, dt));
        Status st = restore_snapshot(*b.cache, b.seq, *back, model.fingerprint(), 260);
        ASSERT_TRUE(st.ok()) << st.to_string();
        Session resumed(*b.engine, b.setup.step_tokens, b.seq);
        ASSERT_TRUE(resumed.resume(back->tokens).ok());
        EXPECT_EQ(resumed.pos(), 16);
        EXPECT_EQ(resumed.conversation(), back->tokens);
        // Both continue: first with no prompt (the held-back token only), then a new prompt.
        const std::vector<int32_t> want = greedy_turn(*a.session, {}, 5);
        EXPECT_EQ(greedy_turn(resumed, {}, 5), want);
        const std::vector<int32_t> more = some_tokens(3, 260, 9);
        EXPECT_EQ(greedy_turn(resumed, more, 4), greedy_turn(*a.session, more, 4));
        EXPECT_EQ(resumed.conversation(), a.session->conversation());
      }
}

TEST(Snapshot, FileRoundTripIsAtomicAndReportsProgress) {
  Model model = tiny_model(TinySpec{});
  Captured a = converse(model, options("cell", DType::kF16));
  const std::string path =
      (std::filesystem::temp_directory_path() / "kvcache_snapshot_test.kvs").string();
  std::vector<int64_t> seen;
  ASSERT_TRUE(save_snapshot(path, a.snapshot, [&](int64_t done, int64_t total) {
                EXPECT_EQ(total, encoded_snapshot_bytes(a.snapshot));
                seen.push_back(done);
              }).ok());
  ASSERT_EQ(seen.size(), 3u);  // one report per cache layer
  EXPECT_EQ(seen.back(), encoded_snapshot_bytes(a.snapshot));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  Result<Snapshot> back = load_snapshot(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(encode_snapshot(*back), encode_snapshot(a.snapshot));
  std::filesystem::remove(path);
  EXPECT_EQ(load_snapshot(path).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(save_snapshot("/nonexistent-dir/x.kvs", a.snapshot).code(), StatusCode::kNotFound);
}

// Decoding refusals: code and a fragment of the message.
void expect_refused(const std::vector<uint8_t>& bytes, StatusCode code, const std::string& text) {
  Result<Snapshot> s = decode_snapshot(bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), code) << s.status().to_string();
  EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status().message();
}

TEST(Snapshot, TruncatedCorruptAndForeignFilesAreRefusedByName) {
  Model model = tiny_model(TinySpec{});
  Captured a = converse(model, options("sequence", DType::kF32));
  const std::vector<uint8_t> good = encode_snapshot(a.snapshot);
  // Header: 16 preamble + 8 fingerprint + 4 key type + 4 value type + 4 flags + 4 count +
  // 3 x 16 geometry + 8 positions + 8 count + 17 x 4 tokens + 3 x 16 ranges = 220 bytes, then
  // its 8-byte checksum.
  const size_t header_end = 16 + 8 + 4 + 4 + 4 + 4 + 48 + 8 + 8 + 68 + 48 + 8;
  for (size_t n : {size_t{0}, size_t{7}})
    expect_refused({good.begin(), good.begin() + n}, StatusCode::kDataLoss, "too short");
  expect_refused({good.begin(), good.begin() + 12}, StatusCode::kDataLoss, "inside the preamble");
  expect_refused({good.begin(), good.begin() + header_end - 1}, StatusCode::kDataLoss,
                 "inside the header");
  for (size_t n : {header_end, good.size() - 9, good.size() - 1})
    expect_refused({good.begin(), good.begin() + n}, StatusCode::kDataLoss, "truncated");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_refused(longer, StatusCode::kDataLoss, "1 bytes after the last layer");

  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;
  expect_refused(bad, StatusCode::kInvalidArgument, "not a kvcache snapshot");
  bad = good;
  bad[8] = 4;  // version 4
  expect_refused(bad, StatusCode::kInvalidArgument, "format version 4, this build reads 1..3");
  bad = good;
  bad[40] ^= 0x10;  // inside the layer geometry
  expect_refused(bad, StatusCode::kDataLoss, "header checksum mismatch");
  bad = good;
  bad[header_end + 5] ^= 0x80;  // layer 0's first K byte row
  expect_refused(bad, StatusCode::kDataLoss, "layer 0 rows checksum mismatch");
  bad = good;
  bad[good.size() - 20] ^= 0x01;  // inside the last layer's V rows
  expect_refused(bad, StatusCode::kDataLoss, "layer 2 rows checksum mismatch");
  // Every single-bit flip anywhere is refused (one bit per byte, rotating).
  for (size_t i = 0; i < good.size(); ++i) {
    bad = good;
    bad[i] ^= static_cast<uint8_t>(1u << (i % 8));
    Result<Snapshot> s = decode_snapshot(bad);
    ASSERT_FALSE(s.ok()) << "byte " << i;
    EXPECT_TRUE(s.status().code() == StatusCode::kDataLoss ||
                s.status().code() == StatusCode::kInvalidArgument)
        << s.status().to_string();
  }
}

// A geometry with attention sinks is written as version 3 (a u32 of layer flags after each
// layer's window: 3 x 4 bytes more) and read back with its flags; one without stays version 2.
// A cache whose layer lacks the snapshot's sinks refuses the restore naming layer and field.
TEST(Snapshot, SinksAreWrittenAsVersionThreeAndReadBackPerLayer) {
  Model model = tiny_model(TinySpec{});
  Captured a = converse(model, options("sequence", DType::kF32));
  const std::vector<uint8_t> plain = encode_snapshot(a.snapshot);
  ASSERT_GE(plain.size(), 12u);
  EXPECT_EQ(plain[8], 2);
  Snapshot sinks = a.snapshot;
  sinks.geometry.layers[1].sinks = true;
  const std::vector<uint8_t> bytes = encode_snapshot(sinks);
  EXPECT_EQ(bytes[8], 3);
  EXPECT_EQ(bytes.size(), plain.size() + 12);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), encoded_snapshot_bytes(sinks));
  Result<Snapshot> back = decode_snapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->geometry, sinks.geometry);
  EXPECT_FALSE(back->geometry.layers[0].sinks);
  EXPECT_TRUE(back->geometry.layers[1].sinks);
  Built b = build(model, options("sequence", DType::kF32));
  Status st = restore_snapshot(*b.cache, b.seq, *back, model.fingerprint(), 260);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cache layer 1 sinks = 1 in the snapshot, 0 in this cache"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(b.cache->pos(b.seq), 0);
}

TEST(Snapshot, AnotherModelGeometryOrDtypeIsRefusedAndTheCacheStaysEmpty) {
  Model model = tiny_model(TinySpec{});
  Captured a = converse(model, options("cell", DType::kF16));
  const Snapshot& s = a.snapshot;
  auto refused = [&](Built& b, uint64_t fp, StatusCode code, const std::string& text) {
    Status st = restore_snapshot(*b.cache, b.seq, s, fp, 260);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
    EXPECT_EQ(b.cache->pos(b.seq), 0);
    EXPECT_EQ(b.cache->used_end(), 0);
  };
  TinySpec other_spec;
  other_spec.seed = 2;  // same architecture and shapes, other weights
  Model other = tiny_model(other_spec);
  ASSERT_NE(other.fingerprint(), model.fingerprint());
  Built b = build(other, options("cell", DType::kF16));
  refused(b, other.fingerprint(), StatusCode::kInvalidArgument, "made by another model");

  CacheOptions windows = options("sequence", DType::kF16);
  windows.windows = {0};  // every layer full
  Built w = build(model, windows);
  refused(w, model.fingerprint(), StatusCode::kInvalidArgument,
          "cache layer 1 window = 4 in the snapshot, 0 in this cache");
  Built d = build(model, options("sequence", DType::kBF16));
  refused(d, model.fingerprint(), StatusCode::kInvalidArgument,
          "kv dtype f16, this cache stores bf16");
  Built small = build(model, options("sequence", DType::kF16, 12));
  refused(small, model.fingerprint(), StatusCode::kResourceExhausted, "exceed capacity 12");
  Status vocab = restore_snapshot(*small.cache, 0, s, model.fingerprint(), 100);
  EXPECT_EQ(vocab.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(vocab.message().find("expected < the model's vocabulary of 100"), std::string::npos);

  Built busy = build(model, options("sequence", DType::kF16));
  Session session(*busy.engine, busy.setup.step_tokens, busy.seq);
  greedy_turn(session, {1, 2, 3}, 1);
  Status st = restore_snapshot(*busy.cache, 0, s, model.fingerprint(), 260);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_EQ(busy.cache->pos(0), 3);
}

}  // namespace
}  // namespace kvcache::engine::testing
