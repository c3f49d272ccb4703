// Generation: greedy output identical across layouts, chunk sizes and threads; undo returns
// the cache exactly to a turn's start, past a ring too; a refused turn changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cpu/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

std::vector<int32_t> greedy(const Model& model, const CacheOptions& o,
                            const std::vector<int32_t>& prompt, int n) {
  Built b = build(model, o);
  Session session(*b.engine, b.setup.step_tokens, b.seq);
  Sampler sampler(SamplerConfig{});
  Result<TurnStats> st = session.turn(prompt, n, sampler);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(session.pos(), static_cast<int64_t>(prompt.size()) + n - 1);
  return st.ok() ? st->generated : std::vector<int32_t>{};
}

// A vocabulary of 1024 over d_model 128 makes each token's logits product 2^17 multiply-adds
// over 1024 rows, where matmul starts sharing rows over the pool (the default tiny model stays
// below every threshold, so its "2 threads" ran on one).
TEST(Session, GreedyOutputIsIdenticalAcrossLayoutsChunksAndThreads) {
  TinySpec spec;
  spec.d_model = 128;
  spec.d_ff = 256;
  spec.vocab = 1024;
  spec.head_dim = 32;
  Model model = tiny_model(spec);
  const std::vector<int32_t> prompt = some_tokens(11, 1024, 21);
  CacheOptions base;
  base.capacity = 64;
  const std::vector<int32_t> want = greedy(model, base, prompt, 12);
  ASSERT_EQ(want.size(), 12u);
  for (const char* kind : {"sequence", "cell"})
    for (int64_t chunk : {1, 3, 4})
      for (int threads : {1, 2}) {
        cpu::set_global_threads(threads);
        CacheOptions o = base;
        o.kind = kind;
        o.max_step_tokens = chunk;
        EXPECT_EQ(greedy(model, o, prompt, 12), want) << kind << " chunk " << chunk << " threads "
                                                      << threads;
      }
  cpu::set_global_threads(2);
}

TEST(Session, ReducedPrecisionKvAgreesWithF32OnTheFirstGreedyTokens) {
  Model model = tiny_model(TinySpec{});
  const std::vector<int32_t> prompt = some_tokens(9, 260, 31);
  CacheOptions o;
  o.capacity = 64;
  const std::vector<int32_t> want = greedy(model, o, prompt, 4);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    o.kv_dtype = dt;
    EXPECT_EQ(greedy(model, o, prompt, 4), want) << to_string(dt);
  }
}

TEST(Session, SamplingIsReproducibleForASeed) {
  Model model = tiny_model(TinySpec{});
  CacheOptions o;
  o.capacity = 64;
  auto run = [&](uint64_t seed) {
    Built b = build(model, o);
    Session session(*b.engine, b.setup.step_tokens);
    Sampler sampler(SamplerConfig{1.0f, 50, 0.95f, seed});
    return session.turn(some_tokens(5, 260), 10, sampler)->generated;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Session, UndoReturnsTheCacheToTheTurnStart) {
  Model model = tiny_model(TinySpec{});
  for (const char* kind : {"sequence", "cell"}) {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 64;
    o.windows = {0};  // full layers: every position stays rewindable
    Built b = build(model, o);
    Session session(*b.engine, b.setup.step_tokens, b.seq);
    Sampler sampler(SamplerConfig{});
    ASSERT_TRUE(session.turn(some_tokens(6, 260, 1), 4, sampler).ok());
    const int64_t start = session.pos();  // 6 + 4 - 1 = 9 (the last token is held back)
    EXPECT_EQ(start, 9);
    const std::vector<int32_t> second = some_tokens(5, 260, 2);
    std::vector<int32_t> first_try = session.turn(second, 6, sampler)->generated;
    EXPECT_EQ(session.pos(), start + 1 + 5 + 5);
    ASSERT_TRUE(session.undo().ok());
    EXPECT_EQ(session.pos(), start);
    EXPECT_EQ(session.turns(), 1u);
    // Same prompt again: the same continuation, so the same following logits.
    EXPECT_EQ(session.turn(second, 6, sampler)->generated, first_try) << kind;
    EXPECT_EQ(session.undo(5).code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(session.undo(2).ok());
    EXPECT_EQ(session.pos(), 0);
    ASSERT_TRUE(session.turn(some_tokens(3, 260, 3), 2, sampler).ok());
    ASSERT_TRUE(session.reset().ok());
    EXPECT_EQ(session.pos(), 0);
    EXPECT_EQ(session.turns(), 0u);
  }
}

// The greedy tokens of turns `prompts` in a fresh session, one vector per turn.
std::vector<std::vector<int32_t>> fresh_turns(const Model& model, const CacheOptions& o,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int n) {
  Built b = build(model, o);
  Session session(*b.engine, b.setup.step_tokens, b.seq);
  Sampler sampler(SamplerConfig{});
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    Result<TurnStats> st = session.turn(p, n, sampler);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    out.push_back(st.ok() ? st->generated : std::vector<int32_t>{});
  }
  return out;
}

TEST(Session, UndoPastTheRingReturnsExactlyInBothLayouts) {
  Model model = tiny_model(TinySpec{});
  const std::vector<int32_t> a = some_tokens(3, 260, 1), big = some_tokens(10, 260, 2),
                             c = some_tokens(2, 260, 3);
  for (const char* kind : {"sequence", "cell"}) {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 64;
    o.windows = {4};  // every cache layer Sliding(4), step 4: ring of 7, rewind floor L - 4
    const auto want = fresh_turns(model, o, {a, c}, 2);
    Built b = build(model, o);
    Session session(*b.engine, b.setup.step_tokens, b.seq);
    Sampler sampler(SamplerConfig{});
    ASSERT_TRUE(session.turn(a, 2, sampler).ok());
    EXPECT_EQ(session.pos(), 4);  // 3 + 2 - 1 (the last token is held back)
    Result<TurnStats> st = session.turn(big, 3, sampler);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(session.pos(), 17);  // 4 + 1 + 10 + 2: the rings hold nothing before 10
    // Sequence layout: positions 1..3 (W - 1 = 3) of every layer saved at the turn's start.
    int64_t per_cell = 0;
    for (const LayerGeometry& l : b.engine->cache().geometry().layers)
      per_cell += *bytes_per_cell(l, DType::kF32);
    EXPECT_EQ(st->checkpoint_bytes, std::string(kind) == "sequence" ? 3 * per_cell : 0) << kind;
    // Undo back past the rings, then the next turn continues as if `big` never happened.
    ASSERT_TRUE(session.undo().ok()) << kind;
    EXPECT_EQ(session.pos(), 4);
    EXPECT_EQ(session.turns(), 1u);
    Result<TurnStats> again = session.turn(c, 2, sampler);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->generated, want[1]) << kind;
    // Undoing everything is a rewind to 0, which always works.
    ASSERT_TRUE(session.undo(2).ok()) << kind;
    EXPECT_EQ(session.pos(), 0);
    EXPECT_EQ(b.engine->cache().rewind(session.seq(), 0).code(), StatusCode::kOk);
  }
}

TEST(Session, UndoTurnsBoundsTheSavedStartsAndAnOlderUndoIsRefusedNamingTheBound) {
  Model model = tiny_model(TinySpec{});
  const std::vector<int32_t> a = some_tokens(3, 260, 1), big = some_tokens(10, 260, 2),
                             c = some_tokens(10, 260, 3);
  for (const char* kind : {"sequence", "cell"}) {
    const bool cell = std::string(kind) == "cell";
    CacheOptions o;
    o.kind = kind;
    o.capacity = 128;
    o.windows = {4};  // every cache layer Sliding(4): a saved start is 3 positions per layer
    Built b = build(model, o);
    Session session(*b.engine, b.setup.step_tokens, b.seq);
    EXPECT_EQ(session.undo_turns(), kDefaultUndoTurns);
    EXPECT_EQ(session.set_undo_turns(-1).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(session.set_undo_turns(1).ok());
    int64_t per_cell = 0;
    for (const LayerGeometry& l : b.engine->cache().geometry().layers)
      per_cell += *bytes_per_cell(l, DType::kF32);
    Sampler sampler(SamplerConfig{});
    ASSERT_TRUE(session.turn(a, 2, sampler).ok());    // starts at 0
    ASSERT_TRUE(session.turn(big, 3, sampler).ok());  // starts at 4
    ASSERT_TRUE(session.turn(c, 3, sampler).ok());    // starts at 17 (4 + 1 + 10 + 2)
    EXPECT_EQ(session.pos(), 30);                     // 17 + 1 + 10 + 2
    // Only the newest turn holds its start: 3 positions of every layer, copied or forked.
    UndoCost cost = session.undo_cost();
    EXPECT_EQ(cost.turns_kept, 1) << kind;
    EXPECT_EQ(cost.checkpoint_bytes, cell ? 0 : 3 * per_cell) << kind;
    EXPECT_EQ(cost.forks, cell ? 1 : 0) << kind;
    // Turn 2's start (4) was released and the rings moved past it: refused, nothing changes.
    Status old = session.undo(2);
    EXPECT_EQ(old.code(), StatusCode::kOutOfRange) << kind << ": " << old.to_string();
    EXPECT_NE(old.message().find("undo 2: cannot return to position 4 (now at 30)"),
              std::string::npos) << old.message();
    EXPECT_NE(old.message().find("saved start was released (the session keeps it for the last "
                                 "1 turn(s))"), std::string::npos) << old.message();
    EXPECT_EQ(session.pos(), 30);
    EXPECT_EQ(session.turns(), 3u);
    // The kept turn undoes exactly; turn 1 (start 0) still undoes: a rewind to 0 needs nothing.
    ASSERT_TRUE(session.undo(1).ok()) << kind;
    EXPECT_EQ(session.pos(), 17);
    EXPECT_EQ(session.undo_cost().turns_kept, 0);
    ASSERT_TRUE(session.undo(2).ok()) << kind;
    EXPECT_EQ(session.pos(), 0);
    // Lowering the bound releases at once; the default keeps the last 8 of 10 turns.
    ASSERT_TRUE(session.set_undo_turns(kDefaultUndoTurns).ok());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(session.turn(some_tokens(2, 260, 40 + i), 1, sampler).ok());
    EXPECT_EQ(session.undo_cost().turns_kept, 8) << kind;
    ASSERT_TRUE(session.set_undo_turns(0).ok());
    EXPECT_EQ(session.undo_cost().turns_kept, 0) << kind;
    EXPECT_EQ(session.undo_cost().forks, 0) << kind;
  }
}

TEST(Session, ARefusedTurnLeavesTheConversationAsItWasInBothLayouts) {
  Model model = tiny_model(TinySpec{});
  const std::vector<int32_t> a = some_tokens(3, 260, 1), huge = some_tokens(30, 260, 2),
                             c = some_tokens(2, 260, 3);
  for (const char* kind : {"sequence", "cell"}) {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 24;
    o.windows = {0, 4};  // full and Sliding(4) layers: the full pool bounds the length
    const auto want = fresh_turns(model, o, {a, c}, 2);
    Built b = build(model, o);
    Session session(*b.engine, b.setup.step_tokens, b.seq);
    Sampler sampler(SamplerConfig{});
    ASSERT_TRUE(session.turn(a, 2, sampler).ok());
    // 4 + 1 + 30 tokens exceed the 24 cells: refused part-way, after the rings moved on.
    Result<TurnStats> refused = session.turn(huge, 2, sampler);
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << kind;
    EXPECT_EQ(session.pos(), 4);
    EXPECT_EQ(session.turns(), 1u);
    Result<TurnStats> next = session.turn(c, 2, sampler);
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(next->generated, want[1]) << kind;
  }
}

TEST(Session, GenerationStopsAtAnEndOfGenerationIdAndFeedsItNextTurn) {
  Model model = tiny_model(TinySpec{});
  CacheOptions o;
  o.capacity = 64;
  const std::vector<int32_t> prompt = some_tokens(5, 260, 4);
  const std::vector<int32_t> free_run = greedy(model, o, prompt, 8);
  ASSERT_EQ(free_run.size(), 8u);
  // Stop at the 4th greedy token; k = its first occurrence (an earlier equal id stops first).
  const int32_t stop = free_run[3];
  const auto k = static_cast<size_t>(std::find(free_run.begin(), free_run.end(), stop) -
                                     free_run.begin());
  Built b = build(model, o);
  Session session(*b.engine, b.setup.step_tokens, b.seq);
  Sampler sampler(SamplerConfig{});
  std::vector<int32_t> seen;
  Result<TurnStats> st = session.turn(prompt, 8, sampler, [&](int32_t t) { seen.push_back(t); },
                                      [&](int32_t t) { return t == stop; });
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  const std::vector<int32_t> before(free_run.begin(), free_run.begin() + static_cast<long>(k));
  EXPECT_EQ(st->generated, before);
  EXPECT_EQ(seen, before);  // the stop id is not reported
  EXPECT_EQ(st->eog_token, stop);
  EXPECT_EQ(st->decode_tokens, static_cast<int64_t>(k));  // one forward per reported token
  EXPECT_EQ(session.pos(), 5 + static_cast<int64_t>(k));  // the stop id is held back
  Result<TurnStats> next = session.turn(some_tokens(2, 260, 5), 1, sampler);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->prefill_tokens, 1 + 2);  // the stop id, then the new prompt
  EXPECT_EQ(next->eog_token, -1);
  // Without a stop callback the same turn runs to max_new_tokens.
  EXPECT_EQ(greedy(model, o, prompt, 8), free_run);
}

TEST(Sampler, GreedyTopKAndTopPBehave) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
  EXPECT_EQ(argmax(logits), 1);
  Sampler g(SamplerConfig{});
  EXPECT_EQ(g.sample(logits), 1);
  Sampler k1(SamplerConfig{1.0f, 1, 1.0f, 7});
  Sampler p(SamplerConfig{1.0f, 0, 1e-6f, 7});
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(k1.sample(logits), 1);
    EXPECT_EQ(p.sample(logits), 1);
  }
  // top-k 2 at a high temperature draws only ids 1 and 2, and both.
  Sampler k2(SamplerConfig{50.0f, 2, 1.0f, 7});
  std::vector<int> seen(4, 0);
  for (int i = 0; i < 200; ++i) ++seen[k2.sample(logits)];
  EXPECT_EQ(seen[0] + seen[3], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
}

// An allowed-token mask removes tokens before greedy, top-k and top-p: the best allowed token
// wins greedily, a draw never leaves the mask, and an empty mask draws nothing (-1).
TEST(Sampler, AMaskRestrictsEveryDrawToAllowedTokens) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f};
  const std::vector<uint64_t> only_0_and_3 = {0b01001};
  Sampler g(SamplerConfig{});
  EXPECT_EQ(g.sample(logits, only_0_and_3), 0);  // 0.1 > -1.0
  EXPECT_EQ(g.sample(logits, std::vector<uint64_t>{0b10000}), 4);
  EXPECT_EQ(g.sample(logits, std::vector<uint64_t>{0}), -1);
  EXPECT_EQ(g.sample(logits, std::span<const uint64_t>{}), 1);  // no mask: every token
  Sampler hot(SamplerConfig{50.0f, 0, 1.0f, 3});
  Sampler k1(SamplerConfig{50.0f, 1, 1.0f, 3});
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 200; ++i) {
    ++seen[hot.sample(logits, only_0_and_3)];
    EXPECT_EQ(k1.sample(logits, only_0_and_3), 0);  // top-k counts allowed tokens only
  }
  EXPECT_EQ(seen[1] + seen[2] + seen[4], 0);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[3], 0);
}

// The radix ordering of the sampler is the comparison sort's order exactly: over vocabularies
// with many ties (values on a grid of 1/8), -0 beside +0, infinities, and every keep from a
// short top-k (partial sort) to the whole vocabulary (radix sort).
TEST(Sampler, RadixLogitOrderEqualsTheComparisonSort) {
  std::mt19937 g(5);
  for (int32_t n : {1, 2, 300, 5000, 32000})
    for (int round = 0; round < 3; ++round) {
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& x : logits) x = static_cast<float>(static_cast<int>(g() % 161) - 80) / 8.0f;
      if (n > 4) {
        logits[1] = -0.0f;
        logits[2] = 0.0f;
        logits[3] = -INFINITY;
        logits[4] = round == 0 ? INFINITY : 1e30f;
      }
      for (int32_t keep : {1, 7, n / 2 + 1, n}) {
        if (keep > n) continue;
        std::vector<int32_t> got, want;
        order_by_logit(logits, keep, got);
        order_by_logit_reference(logits, keep, want);
        ASSERT_EQ(std::vector<int32_t>(got.begin(), got.begin() + keep),
                  std::vector<int32_t>(want.begin(), want.begin() + keep))
            << "n " << n << " keep " << keep << " round " << round;
      }
    }
}

}  // namespace
}  // namespace kvcache::engine::testing
