// The engine's central property: logits through the cache equal a full no-cache
// recomputation, for both layouts, chunk sizes 1/3/max, with and without sliding windows,
// with a KV-shared layer and per-layer kv heads; and several sequences in one forward (dense
// and a mixture of experts).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "cpu/thread_pool.h"
#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

constexpr double kTol = 1e-4;  // f32 storage: max abs diff relative to the logit scale

using Param = std::tuple<std::string, int, bool>;  // kind, chunk (0 = max), windows on

class CachedVsReference : public ::testing::TestWithParam<Param> {};

TEST_P(CachedVsReference, IncrementalLogitsEqualFullRecomputation) {
  const auto& [kind, chunk, windows] = GetParam();
  Model model = tiny_model(TinySpec{});
  CacheOptions o;
  o.kind = kind;
  o.capacity = 64;
  if (!windows) o.windows = {0};
  Built b = build(model, o);
  // The model's step is 8: with windows on, twice its Sliding(4) layer's window, so "max"
  // writes steps wider than the window (that layer's ring holds 4 + 8 - 1 rows).
  EXPECT_EQ(b.setup.step_tokens, 8);
  const std::vector<int32_t> tokens = some_tokens(21, model.hparams().vocab);
  std::vector<float> got = cached_logits(b, tokens, chunk == 0 ? b.setup.step_tokens : chunk);
  std::vector<double> want = reference_logits(model, tokens, &b.setup.geometry);
  EXPECT_LE(rel_diff(got, want), kTol);
  EXPECT_EQ(b.cache->pos(b.seq), 21);
}

INSTANTIATE_TEST_SUITE_P(LayoutsChunksWindows, CachedVsReference,
                         ::testing::Combine(::testing::Values("sequence", "cell"),
                                            ::testing::Values(1, 3, 0),
                                            ::testing::Values(true, false)));

TEST(Forward, ModelWithSharedLayerLoadsWithoutKvProjections) {
  Model model = tiny_model(TinySpec{});
  ASSERT_EQ(model.layers().size(), 4u);
  EXPECT_TRUE(model.layers()[3].kv_shared);  // layer 3 reads cache 1, owned by layer 1
  EXPECT_TRUE(model.layers()[3].wk.empty());
  EXPECT_FALSE(model.layers()[1].kv_shared);
  EXPECT_EQ(model.layers()[2].kv_heads, 4);  // per-layer kv heads from the geometry
}

TEST(Forward, RotateHalfBiasQkNormPartialRopeAndLinearScalingMatchReference) {
  TinySpec s;
  s.arch = "qwen3";
  s.bias = true;
  s.qk_norm = true;
  s.rope_dim = 4;
  s.rope_linear = 2.0f;
  s.tied = true;
  Model model = tiny_model(s);
  EXPECT_FALSE(model.hparams().rope_interleaved);
  EXPECT_TRUE(model.tied());
  for (const char* kind : {"sequence", "cell"}) {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 32;
    Built b = build(model, o);
    const std::vector<int32_t> tokens = some_tokens(13, model.hparams().vocab, 3);
    std::vector<float> got = cached_logits(b, tokens, 3);
    EXPECT_LE(rel_diff(got, reference_logits(model, tokens)), kTol) << kind;
  }
}

TEST(Forward, F16WeightsKeptAsHalfMatchTheConvertedModel) {
  TinySpec s;
  s.store_as = gguf::TensorType::kF16;
  gguf::GgufFile f = tiny_file(s);
  Model half = Model::load(f).value();
  Model full = Model::load(f, LoadOptions{false}).value();
  EXPECT_TRUE(half.layers()[0].wq.is_f16());
  EXPECT_TRUE(half.token_embd().is_f16());
  EXPECT_FALSE(full.layers()[0].wq.is_f16());
  const std::vector<int32_t> tokens = some_tokens(14, 260, 4);
  std::vector<double> want = reference_logits(full, tokens);
  for (const Model* m : {&half, &full}) {
    CacheOptions o;
    o.capacity = 32;
    Built b = build(*m, o);
    EXPECT_LE(rel_diff(cached_logits(b, tokens, 3), want), kTol);
  }
}

TEST(Forward, InterleavedAndRotateHalfPairingsGiveDifferentLogits) {
  TinySpec s;
  Model llama = tiny_model(s);
  s.arch = "qwen2";
  Model qwen = tiny_model(s);  // same weights, other pairing
  const std::vector<int32_t> tokens = some_tokens(6, 260);
  std::vector<double> a = reference_logits(llama, tokens), b = reference_logits(qwen, tokens);
  double diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-3);
}

// Dense, and a mixture of experts (the step's tokens of both sequences grouped by expert).
class SeveralSequences : public ::testing::TestWithParam<int32_t> {};  // experts (0 = dense)

TEST_P(SeveralSequences, InOneForwardMatchSeparateRuns) {
  TinySpec spec;
  spec.n_expert = GetParam();
  Model model = tiny_model(spec);
  CacheOptions o;
  o.kind = "cell";
  o.capacity = 64;
  Built b = build(model, o);
  const int32_t s0 = b.seq, s1 = *b.cache->seq_new();
  const std::vector<int32_t> ta = some_tokens(7, 260, 11), tb = some_tokens(5, 260, 12);
  // Step 1: a[0..3] and b[0..2] interleaved; step 2: a[4..6] and b[3..4].
  std::vector<float> ga, gb;
  Logits out;
  auto step = [&](std::vector<std::pair<int32_t, int32_t>> picks) {  // (seq, index)
    std::vector<int32_t> tok, ids;
    std::vector<int64_t> pos;
    int64_t na = b.cache->pos(s0), nb = b.cache->pos(s1);
    for (auto [s, i] : picks) {
      tok.push_back(s == s0 ? ta[i] : tb[i]);
      ids.push_back(s);
      pos.push_back(s == s0 ? na++ : nb++);
    }
    ASSERT_TRUE(b.engine->forward({tok, ids, pos}, LogitsMode::kAll, out).ok());
    for (size_t r = 0; r < picks.size(); ++r) {
      auto row = out.row(r);
      (picks[r].first == s0 ? ga : gb).insert((picks[r].first == s0 ? ga : gb).end(),
                                              row.begin(), row.end());
    }
  };
  step({{s0, 0}, {s1, 0}, {s0, 1}, {s1, 1}, {s0, 2}, {s0, 3}, {s1, 2}});
  step({{s1, 3}, {s0, 4}, {s0, 5}, {s1, 4}, {s0, 6}});
  EXPECT_LE(rel_diff(ga, reference_logits(model, ta)), kTol);
  EXPECT_LE(rel_diff(gb, reference_logits(model, tb)), kTol);
  // kLast gives one row per sequence: its last token in the batch.
  std::vector<int32_t> tok = {1, 2, 3}, ids = {s0, s1, s0};
  std::vector<int64_t> pos = {7, 5, 8};
  ASSERT_TRUE(b.engine->forward({tok, ids, pos}, LogitsMode::kLast, out).ok());
  EXPECT_EQ(out.token_index, (std::vector<int32_t>{1, 2}));
}

INSTANTIATE_TEST_SUITE_P(DenseAndMixture, SeveralSequences, ::testing::Values(0, 6));

TEST(Forward, ReducedPrecisionStorageAgreesWithF32OnTheFirstTokens) {
  Model model = tiny_model(TinySpec{});
  const std::vector<int32_t> tokens = some_tokens(12, 260, 5);
  std::vector<double> want = reference_logits(model, tokens);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    CacheOptions o;
    o.capacity = 32;
    o.kv_dtype = dt;
    Built b = build(model, o);
    std::vector<float> got = cached_logits(b, tokens, 3);
    // f16 keeps 11 significant bits, bf16 8: the logits move by well under 5% of their scale.
    EXPECT_LE(rel_diff(got, want), dt == DType::kF16 ? 5e-3 : 5e-2) << to_string(dt);
    EXPECT_GT(rel_diff(got, want), 0.0) << "storage should round";
  }
}

// Shapes that cross the thresholds at which work is shared over the pool (the tiny default
// model crosses none): 16-token chunks of f32 weights make the logits product 16 x 128 x 512 =
// 2^20 multiply-adds over 512 rows (matmul splits rows from 2^17 and 32 rows), and the chunk at
// positions 64..79 reads 64..79 keys per token on the full layers, 1144 keys x 4 q heads x
// (32 + 32) = 292864 multiply-adds (attend() shares tokens from 2^18).
TEST(Forward, ThreadCountDoesNotChangeLogitsBeyondRounding) {
  TinySpec spec;
  spec.d_model = 128;
  spec.d_ff = 256;
  spec.vocab = 512;
  spec.head_dim = 32;
  spec.cache_windows = {0, 16, 0};  // a sliding layer as wide as the chunk
  Model model = tiny_model(spec);
  const std::vector<int32_t> tokens = some_tokens(80, 512, 9);
  std::vector<double> want = reference_logits(model, tokens);
  for (int threads : {1, 2, 3}) {
    cpu::set_global_threads(threads);
    CacheOptions o;
    o.capacity = 96;
    o.max_step_tokens = 16;
    Built b = build(model, o);
    EXPECT_LE(rel_diff(cached_logits(b, tokens, 16), want), kTol) << threads;
  }
  cpu::set_global_threads(2);
}

TEST(Forward, TokenOutOfRangeIsRefusedAndChangesNothing) {
  Model model = tiny_model(TinySpec{});
  CacheOptions o;
  o.capacity = 32;
  Built b = build(model, o);
  std::vector<int32_t> tok = {5, 260}, ids = {0, 0};
  std::vector<int64_t> pos = {0, 1};
  Logits out;
  Status s = b.engine->forward({tok, ids, pos}, LogitsMode::kAll, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token[1] = 260"), std::string::npos) << s.message();
  EXPECT_EQ(b.cache->pos(0), 0);
  ids = {0};
  s = b.engine->forward({tok, ids, pos}, LogitsMode::kAll, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

// Learned attention sinks on every layer (the shared layer 3 brings its own logits to cache
// layer 1): incremental logits through both layouts, chunks of 1 and 3, past the Sliding(4)
// window, equal the no-cache recomputation; and the sinks matter (without them the logits move).
TEST(Forward, AttentionSinksMatchReferenceInBothLayoutsPastTheWindow) {
  TinySpec s;
  s.sinks = s.q_heads;
  Model model = tiny_model(s);
  for (const auto& l : model.geometry().cache.layers) EXPECT_TRUE(l.sinks);
  EXPECT_EQ(model.layers()[3].attn_sinks.size(), 4u);
  const std::vector<int32_t> tokens = some_tokens(17, model.hparams().vocab, 4);
  const std::vector<double> want = reference_logits(model, tokens);
  Model plain = tiny_model(TinySpec{});  // the same other weights (sinks are drawn last)
  Built without = build(plain, CacheOptions{});
  EXPECT_GT(rel_diff(cached_logits(without, tokens, 3), want), 1e-2);
  for (const char* kind : {"sequence", "cell"})
    for (int chunk : {1, 3}) {
      CacheOptions o;
      o.kind = kind;
      o.capacity = 32;
      Built b = build(model, o);
      EXPECT_LE(rel_diff(cached_logits(b, tokens, chunk), want), kTol) << kind << " " << chunk;
    }
}

// A sink tensor of the wrong length is refused at load naming it; a cache built without the
// model's sinks is refused by the engine naming the layer.
TEST(Forward, MisSizedSinksTensorAndACacheWithoutSinksAreRefused) {
  TinySpec s;
  s.sinks = 3;  // for 4 query heads
  Result<gguf::GgufFile> f = gguf::GgufFile::parse(tiny_model_bytes(s));
  ASSERT_TRUE(f.ok());
  Result<Model> bad = Model::load(*f);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "load model: tensor blk.0.attn_sinks.weight has GGUF dims [3], expected [4]");
  s.sinks = s.q_heads;
  Model model = tiny_model(s);
  CacheSetup setup = *plan_cache(model, CacheOptions{});
  setup.geometry.layers[1].sinks = false;
  Result<std::unique_ptr<Engine>> e = Engine::create(model, *build_cache(setup));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "engine: cache layer 1 has sinks = false, the model's has true (attention sinks are the "
            "model's to publish)");
}

TEST(Forward, EngineRefusesACacheOfAnotherShape) {
  Model model = tiny_model(TinySpec{});
  CacheSetup s = *plan_cache(model, CacheOptions{});
  s.geometry.layers[2].kv_heads = 2;
  std::shared_ptr<Cache> cache = *build_cache(s);
  Result<std::unique_ptr<Engine>> e = Engine::create(model, cache);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("cache layer 2"), std::string::npos);
}

}  // namespace
}  // namespace kvcache::engine::testing
