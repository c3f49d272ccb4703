// Quantized K/V through the engine on the embedded model (kvcache-tiny-kjv: head and value
// widths of 32, one block): greedy output with q8_0 K/V against f16 K/V, every token's logits
// within a stated bound, and snapshots that carry the key and value types (a q8_0 snapshot
// restores into a q8_0 cache and continues exactly; any other cache refuses it by name).
#include <gtest/gtest.h>

#include <optional>

#include "engine/embedded_model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/snapshot.h"
#include "engine_test_util.h"

namespace kvcache::engine::testing {
namespace {

CacheOptions options(const char* kind, DType k, DType v,
                     std::optional<bool> rotate = std::nullopt) {
  CacheOptions o;
  o.kv_rotate = rotate;
  o.kind = kind;
  o.kv_dtype = DType::kF16;
  o.k_dtype = k;
  o.v_dtype = v;
  o.capacity = 256;
  return o;
}

std::vector<int32_t> prompt_bytes(const std::string& text) {
  return std::vector<int32_t>(text.begin(), text.end());  // the embedded vocab: id = byte
}

std::vector<int32_t> greedy(Built& b, const std::vector<int32_t>& prompt, int n) {
  Session s(*b.engine, b.setup.step_tokens, b.seq);
  Sampler sampler(SamplerConfig{});
  Result<TurnStats> st = s.turn(prompt, n, sampler);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? st->generated : std::vector<int32_t>{};
}

class EmbeddedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (embedded_model().empty()) GTEST_SKIP() << "this build embeds no model";
    Result<LoadedModel> m = load_model({});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    loaded_ = std::move(*m);
  }
  LoadedModel loaded_;
};

// Measured on this model: q8_0 K and V follow f16 K/V greedily for all 64 tokens of both
// prompts in both layouts; q4_0 keys diverge earlier (not asserted here).
TEST_F(EmbeddedModel, GreedyWithQ8_0KvEqualsF16KvFor64Tokens) {
  const Model& model = *loaded_.model;
  for (const char* kind : {"sequence", "cell"})
    for (const std::string text : {"In the beginning God created the heaven",
                                   "And the LORD spake unto Moses, saying, "}) {
      Built f16 = build(model, options(kind, DType::kF16, DType::kF16));
      Built q8 = build(model, options(kind, DType::kQ8_0, DType::kQ8_0));
      EXPECT_EQ(greedy(q8, prompt_bytes(text), 64), greedy(f16, prompt_bytes(text), 64))
          << kind << ": " << text;
    }
}

// Every position's logits over 200 tokens (prefill chunks of 16, then the sliding layers'
// windows of 32 slide): q8_0 K/V stays within 1 % of the largest |logit| of the f16 path.
// Measured worst (rotated, the default for block types): 0.34 % (q8_0 K and V), 0.38 % (q8_0
// K, f16 V), 0.11 % (f16 K, q8_0 V); unrotated 0.44 %, 0.40 %, 0.11 %.
TEST_F(EmbeddedModel, Q8_0KvLogitsStayWithinOnePercentOfF16) {
  const Model& model = *loaded_.model;
  const std::vector<int32_t> tokens = some_tokens(200, 256, 11);
  Built f16 = build(model, options("sequence", DType::kF16, DType::kF16));
  const std::vector<float> base = cached_logits(f16, tokens, 16);
  const std::vector<double> want(base.begin(), base.end());
  for (auto [k, v] : {std::pair{DType::kQ8_0, DType::kQ8_0}, std::pair{DType::kQ8_0, DType::kF16},
                      std::pair{DType::kF16, DType::kQ8_0}}) {
    Built q = build(model, options("sequence", k, v));
    const std::vector<float> got = cached_logits(q, tokens, 16);
    const double diff = rel_diff(got, want);
    EXPECT_LT(diff, 0.01) << "k " << to_string(k) << " v " << to_string(v);
    EXPECT_GT(diff, 0.0) << "the quantized path must differ from f16 somewhere";
  }
}

// The Hadamard rotation (on by default for block types) spreads each head's outliers over its
// block before q4_0 rounds it: every position's logits over 200 tokens land closer to the f16
// path's than without it. Measured: 7.6 % of the largest |logit| unrotated, 2.9 % rotated.
TEST_F(EmbeddedModel, RotationBringsQ4_0KvCloserToF16) {
  const Model& model = *loaded_.model;
  const std::vector<int32_t> tokens = some_tokens(200, 256, 13);
  Built f16 = build(model, options("sequence", DType::kF16, DType::kF16));
  const std::vector<float> base = cached_logits(f16, tokens, 16);
  const std::vector<double> want(base.begin(), base.end());
  double diff[2];
  for (bool rotate : {false, true}) {
    Built q = build(model, options("sequence", DType::kQ4_0, DType::kQ4_0, rotate));
    EXPECT_EQ(q.cache->config().rotated(), rotate);
    diff[rotate] = rel_diff(cached_logits(q, tokens, 16), want);
  }
  EXPECT_LT(diff[1], diff[0]);
}

TEST_F(EmbeddedModel, SnapshotsCarryTheTypesAndRefuseAnotherCache) {
  const Model& model = *loaded_.model;
  const std::vector<int32_t> prompt = prompt_bytes("Blessed are the meek: for they");
  Built a = build(model, options("sequence", DType::kQ8_0, DType::kQ4_0));
  Session s(*a.engine, a.setup.step_tokens, a.seq);
  Sampler sampler(SamplerConfig{});
  ASSERT_TRUE(s.turn(prompt, 8, sampler).ok());
  Result<Snapshot> snap = capture_snapshot(*a.cache, s.seq(), model.fingerprint(),
                                           s.conversation());
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  EXPECT_EQ(snap->k_dtype, DType::kQ8_0);
  EXPECT_EQ(snap->v_dtype, DType::kQ4_0);
  // Round trip through bytes: blocks as they are.
  Result<Snapshot> back = decode_snapshot(encode_snapshot(*snap));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->k_dtype, DType::kQ8_0);
  EXPECT_EQ(back->v_dtype, DType::kQ4_0);
  for (size_t l = 0; l < snap->layers.size(); ++l) {
    EXPECT_EQ(back->layers[l].k, snap->layers[l].k);
    EXPECT_EQ(back->layers[l].v, snap->layers[l].v);
  }
  // Restored into the same types in the other layout, it continues exactly as the original.
  Built b = build(model, options("cell", DType::kQ8_0, DType::kQ4_0));
  ASSERT_TRUE(restore_snapshot(*b.cache, b.seq, *back, model.fingerprint(), 256).ok());
  Session r(*b.engine, b.setup.step_tokens, b.seq);
  ASSERT_TRUE(r.resume(back->tokens).ok());
  Sampler s1(SamplerConfig{}), s2(SamplerConfig{});
  const std::vector<int32_t> more = prompt_bytes(" shall");
  Result<TurnStats> t1 = s.turn(more, 12, s1);
  Result<TurnStats> t2 = r.turn(more, 12, s2);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_EQ(t2->generated, t1->generated);
  // Another cache refuses it, naming both pairs of types; the cache stays empty.
  Built f16 = build(model, options("sequence", DType::kF16, DType::kF16));
  const Status st = restore_snapshot(*f16.cache, f16.seq, *back, model.fingerprint(), 256);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("K/V stored as k q8_0, v q4_0; this cache stores k f16, v f16"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(f16.cache->pos(f16.seq), 0);
  // The same types unrotated: refused by the rotation, naming the flag.
  Built plain = build(model, options("sequence", DType::kQ8_0, DType::kQ4_0, false));
  const Status rs = restore_snapshot(*plain.cache, plain.seq, *back, model.fingerprint(), 256);
  EXPECT_EQ(rs.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rs.message().find("K/V stored rotated, this cache stores them unrotated "
                              "(build the cache with kv_rotate on)"),
            std::string::npos)
      << rs.message();
  EXPECT_TRUE(back->rotated);
}

// A version-1 file (one kv dtype; the committed fuzz seed, an f32 sequence-layout snapshot)
// still decodes, with that type for keys and values; re-encoding writes version 2.
TEST(SnapshotVersions, VersionOneFilesStillDecode) {
  const std::string path = std::string(KVCACHE_FUZZ_DIR) + "/corpus/snapshot/valid_0.kvs";
  Result<Snapshot> s = load_snapshot(path);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->k_dtype, DType::kF32);
  EXPECT_EQ(s->v_dtype, DType::kF32);
  const std::vector<uint8_t> again = encode_snapshot(*s);
  ASSERT_GE(again.size(), 12u);
  EXPECT_EQ(again[8], 2);  // version 2
  Result<Snapshot> back = decode_snapshot(again);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->layers.size(), s->layers.size());
  EXPECT_EQ(back->tokens, s->tokens);
}

}  // namespace
}  // namespace kvcache::engine::testing
