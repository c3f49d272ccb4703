// The batching executor on the embedded tiny model: greedy batching equals running alone under
// every mix, prefix sharing prefills only new tokens, forks sample independently, refusals
// change nothing, stop conditions, session verbs.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cell_layout.h"
#include "serve/executor.h"
#include "serve_test_util.h"

namespace kvcache::serve {
namespace {

using testing::alone;
using testing::drain;
using testing::ids;
using testing::make;

const std::vector<std::string> kPrompts = {
    "In the beginning God created",
    "In the beginning God created the heaven and the earth. And the earth was",
    "And God said, Let there be light",
    "The LORD is my shepherd; I shall not want.",
    "In the beginning God created the heaven",
    "Blessed are the meek: for they",
    "And",
    "In the beginning God created the heaven and the earth. And the earth was without form",
};

struct Mix {
  int32_t max_sessions;
  bool prefix_cache;
  int64_t pool_cells;  // 0 = the default max_sessions * 256
  bool reversed;
};

class GreedyBatching : public ::testing::TestWithParam<Mix> {};

TEST_P(GreedyBatching, EveryRequestEqualsRunningItAlone) {
  const Mix mix = GetParam();
  constexpr int32_t kNew = 40;
  ExecutorOptions o;
  o.max_sessions = mix.max_sessions;
  o.prefix_cache = mix.prefix_cache;
  if (mix.pool_cells > 0) o.pool_cells = mix.pool_cells;
  auto ex = make(o);
  const int64_t empty_free = ex->cache().free_cells();  // every pool empty
  ASSERT_NE(ex, nullptr);
  std::vector<size_t> order(kPrompts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = mix.reversed ? order.size() - 1 - i : i;
  std::map<int64_t, size_t> which;
  GenerateParams p;
  p.max_new_tokens = kNew;
  for (size_t i : order) which[*ex->submit(ids(kPrompts[i]), p)] = i;
  auto results = drain(*ex);
  ASSERT_EQ(results.size(), kPrompts.size());
  for (const auto& [id, r] : results) {
    const size_t i = which.at(id);
    ASSERT_EQ(r.completions.size(), 1u);
    EXPECT_EQ(r.completions[0].tokens, alone(ids(kPrompts[i]), kNew)) << "prompt " << i;
    EXPECT_EQ(r.completions[0].finish, Finish::kLength);
  }
  const ExecutorStats s = ex->stats();
  if (mix.pool_cells > 0 && mix.pool_cells < 400) {
    EXPECT_GT(s.preemptions, 0);  // 8 sessions of up to 126 tokens in 256-ish cells
  }
  // Every prompt's tokens were counted once, as cloned or to prefill.
  int64_t prompts = 0;
  for (const std::string& text : kPrompts) prompts += static_cast<int64_t>(text.size());
  EXPECT_EQ(s.prefix_hit_tokens + s.prefix_miss_tokens, prompts);
  if (!mix.prefix_cache) {
    EXPECT_EQ(s.prefix_hit_tokens, 0);
  }
  ex->clear_prefix_cache();
  EXPECT_EQ(ex->cache().free_cells(), empty_free);
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, GreedyBatching,
    ::testing::Values(Mix{1, false, 0, false}, Mix{3, false, 0, false}, Mix{8, false, 0, true},
                      Mix{3, true, 0, false}, Mix{8, true, 0, true}, Mix{8, true, 256, false},
                      Mix{8, false, 300, true}));

TEST(Executor, PrefixHitPrefillsOnlyTheNewTokens) {
  ExecutorOptions o;
  auto ex = make(o);
  const std::vector<int32_t> first = ids("In the beginning God created the heaven and the earth.");
  const std::vector<int32_t> second = ids("In the beginning God created the heaven and the earth. And");
  GenerateParams p;
  p.max_new_tokens = 1;  // the retained sequence holds the first prompt exactly (54 tokens)
  ASSERT_TRUE(ex->submit(first, p).ok());
  drain(*ex);
  const ExecutorStats before = ex->stats();
  p.max_new_tokens = 20;
  const int64_t id = *ex->submit(second, p);
  auto results = drain(*ex);
  const RequestResult& r = results.at(id);
  // The first 54 tokens are shared: 3 full blocks of 16 found by the index, then extended
  // token by token to the end of what the retained sequence holds.
  EXPECT_EQ(static_cast<int64_t>(first.size()), 54);
  EXPECT_EQ(r.cached_prompt_tokens, 54);
  const ExecutorStats after = ex->stats();
  EXPECT_EQ(after.prefix_hit_tokens - before.prefix_hit_tokens, 54);
  EXPECT_EQ(after.prefix_miss_tokens - before.prefix_miss_tokens, 4);  // " And"
  EXPECT_EQ(r.completions[0].tokens, alone(second, 20));
}

TEST(Executor, ConcurrentRequestsWithOneSystemPromptPrefillItOnce) {
  ExecutorOptions o;
  auto ex = make(o);
  const std::string system = "And God said, Let there be light: and there was light. ";  // 56
  GenerateParams p;
  p.max_new_tokens = 8;
  std::vector<int64_t> id;
  for (const char* q : {"And God", "And the", "Let us", "In the"})
    id.push_back(*ex->submit(ids(system + q), p));
  auto results = drain(*ex);
  // The first request prefills the system prompt; the others wait for its 3 full blocks
  // (48 tokens) and clone them, extended to what was fed when they were admitted.
  EXPECT_EQ(results.at(id[0]).cached_prompt_tokens, 0);
  for (size_t i = 1; i < id.size(); ++i) {
    EXPECT_GE(results.at(id[i]).cached_prompt_tokens, 48) << i;
    EXPECT_EQ(results.at(id[i]).completions[0].tokens,
              alone(ids(system + std::vector<std::string>{"And God", "And the", "Let us", "In the"}[i]), 8));
  }
}

TEST(Executor, ForksPrefillOnceAndSampleLikeSeparateSeeds) {
  ExecutorOptions o;
  auto ex = make(o);
  GenerateParams p;
  p.max_new_tokens = 24;
  p.n = 3;
  p.sampling.temperature = 0.9f;
  p.sampling.top_p = 0.95f;
  p.sampling.seed = 11;
  const std::vector<int32_t> prompt = ids("And God said, Let there be light");
  const int64_t id = *ex->submit(prompt, p);
  auto results = drain(*ex);
  const RequestResult& r = results.at(id);
  ASSERT_EQ(r.completions.size(), 3u);
  EXPECT_EQ(ex->stats().prefill_tokens + ex->stats().decode_tokens,
            static_cast<int64_t>(prompt.size()) + 3 * 23);  // prompt once, 23 feeds per fork
  for (int32_t i = 0; i < 3; ++i) {
    engine::SamplerConfig sc = p.sampling;
    sc.seed = 11 + static_cast<uint64_t>(i);
    EXPECT_EQ(r.completions[i].tokens, alone(prompt, 24, sc)) << "completion " << i;
  }
  EXPECT_NE(r.completions[0].tokens, r.completions[1].tokens);
}

TEST(Executor, RefusedRequestsChangeNothing) {
  ExecutorOptions o;
  o.max_sessions = 2;
  auto ex = make(o);
  const int64_t empty_free = ex->cache().free_cells();  // every pool empty
  GenerateParams p;
  EXPECT_EQ(ex->submit({}, p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex->submit({300}, p).status().code(), StatusCode::kInvalidArgument);  // vocab 256
  GenerateParams many = p;
  many.n = 3;
  EXPECT_EQ(ex->submit(ids("x"), many).status().code(), StatusCode::kInvalidArgument);
  GenerateParams too_long = p;
  too_long.max_new_tokens = 250;  // 10 + 250 > 256 tokens per session
  Status s = ex->submit(ids("0123456789"), too_long).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds max_session_tokens 256"), std::string::npos) << s.message();
  GenerateParams nan = p;
  nan.sampling.temperature = std::nanf("");
  EXPECT_EQ(ex->submit(ids("x"), nan).status().code(), StatusCode::kInvalidArgument);
  GenerateParams empty_stop = p;
  empty_stop.stop = {""};
  EXPECT_EQ(ex->submit(ids("x"), empty_stop).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ex->idle());
  EXPECT_EQ(ex->cache().free_cells(), empty_free);
  EXPECT_EQ(ex->stats().steps, 0);
}

TEST(Executor, CreationRefusesImpossibleBudgets) {
  ExecutorOptions o;
  o.max_session_tokens = 257;  // the tiny model's max_context is 256
  auto a = Executor::create(testing::tiny(), nullptr, o);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("max_context 256"), std::string::npos);
  o = {};
  o.max_sessions = 0;
  EXPECT_EQ(Executor::create(testing::tiny(), nullptr, o).status().code(),
            StatusCode::kInvalidArgument);
  o = {};
  o.pool_cells = 100;  // smaller than one session's 256 tokens
  EXPECT_EQ(Executor::create(testing::tiny(), nullptr, o).status().code(),
            StatusCode::kInvalidArgument);
}

// The executor plans its cell cache through engine::plan_cache alone: the sessions plus as
// many retained prefixes plus the prompt checkpoints (2 * max_sessions + prefix_checkpoints,
// at most kDefaultMaxSeqs) size the layout.
TEST(Executor, CachePlanCarriesTheSequenceBound) {
  ExecutorOptions o;
  o.max_sessions = 3;
  auto a = Executor::create(testing::tiny(), nullptr, o);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ((*a)->setup().kind, "cell");
  EXPECT_EQ((*a)->setup().config.max_seqs, 2 * 3 + 8);
  o.prefix_checkpoints = 0;
  auto none = Executor::create(testing::tiny(), nullptr, o);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ((*none)->setup().config.max_seqs, 6);
  o.prefix_checkpoints = 8;
  EXPECT_EQ((*a)->setup().config.capacity, 3 * 256);  // max_sessions * the default budget
  o.max_sessions = kDefaultMaxSeqs / 2;
  o.max_session_tokens = 16;
  auto b = Executor::create(testing::tiny(), nullptr, o);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)->setup().config.max_seqs, kDefaultMaxSeqs);
}

// A K/V memory budget buys sessions through the same rule (engine::plan_session_pool): the
// budget of exactly five sessions' pool gives five, and admission takes five, not the default 8.
TEST(Executor, AKvMemoryBudgetSetsTheSessionsAdmitted) {
  engine::SessionPool five;
  five.max_sessions = 5;
  five.max_session_tokens = 16;
  engine::CacheOptions co;
  co.kv_dtype = DType::kF16;
  Result<engine::SessionPlan> plan = engine::plan_session_pool(testing::tiny(), co, five);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ExecutorOptions o;
  o.max_session_tokens = 16;
  o.prefix_cache = false;
  o.kv_dtype = DType::kF16;
  o.kv_memory = engine::kv_bytes(plan->setup);
  auto ex = make(o);
  EXPECT_EQ(ex->max_sessions(), 5);
  EXPECT_EQ(ex->setup().config, plan->setup.config);
  EXPECT_EQ(ex->setup().kv_memory, o.kv_memory);
  GenerateParams p;
  p.max_new_tokens = 2;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(ex->open(ids("In the"), p).ok()) << i;
  EXPECT_EQ(ex->open(ids("In the"), p).status().code(), StatusCode::kResourceExhausted);
  o.kv_memory = *o.kv_memory / 5 - 1;  // less than one session
  Result<std::unique_ptr<Executor>> none = Executor::create(testing::tiny(), nullptr, o);
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("session pool: kv_memory = "), std::string::npos)
      << none.status().message();
}

TEST(Executor, OpenRefusesAtMaxSessionsAndIdsAreNeverReused) {
  ExecutorOptions o;
  o.max_sessions = 2;
  o.prefix_cache = false;
  auto ex = make(o);
  const int64_t empty_free = ex->cache().free_cells();  // every pool empty
  GenerateParams p;
  p.max_new_tokens = 4;
  const int64_t a = *ex->open(ids("In the"), p);
  const int64_t b = *ex->open(ids("And God"), p);
  Result<int64_t> c = ex->open(ids("Let"), p);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(ex->close(a).ok());
  EXPECT_EQ(ex->close(a).code(), StatusCode::kNotFound);
  const int64_t d = *ex->open(ids("Let"), p);
  EXPECT_GT(d, b);
  EXPECT_GT(b, a);
  auto results = drain(*ex);
  EXPECT_EQ(results.at(a).completions[0].finish, Finish::kCancelled);
  EXPECT_EQ(results.at(d).completions[0].tokens, alone(ids("Let"), 4));
  EXPECT_EQ(ex->cache().free_cells(), empty_free);
}

TEST(Executor, CloneContinuesAPrefixWithoutRecomputingIt) {
  ExecutorOptions o;
  auto ex = make(o);
  GenerateParams p;
  p.max_new_tokens = 30;
  const std::vector<int32_t> prompt = ids("The LORD is my shepherd");
  const int64_t a = *ex->open(prompt, p);
  auto first = drain(*ex);
  // The finished request's sequence is retained (23 prompt + 29 fed generated tokens). Its
  // sliding(32) pools keep only positions 21..51, so a clone of the prompt alone (which
  // needs positions from -9 up to 21 in the window) is prefilled in full, and continues alike.
  const int64_t b = *ex->clone(a, static_cast<int64_t>(prompt.size()), p);
  auto second = drain(*ex);
  EXPECT_EQ(second.at(b).cached_prompt_tokens, 0);
  EXPECT_EQ(second.at(b).completions[0].tokens, first.at(a).completions[0].tokens);
  // Continuing the whole held conversation with more tokens shares all 52 positions.
  std::vector<int32_t> held = prompt;
  held.insert(held.end(), first.at(a).completions[0].tokens.begin(),
              first.at(a).completions[0].tokens.end() - 1);
  const std::vector<int32_t> more = ids(" And");
  const int64_t c = *ex->clone(a, static_cast<int64_t>(held.size()), p, more);
  auto third = drain(*ex);
  EXPECT_EQ(third.at(c).cached_prompt_tokens, 52);
  held.insert(held.end(), more.begin(), more.end());
  EXPECT_EQ(third.at(c).completions[0].tokens, alone(held, 30));
  EXPECT_EQ(ex->clone(a, 0, p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex->clone(999, 1, p).status().code(), StatusCode::kNotFound);
}

TEST(Executor, CancelEndsOneRequestAndSparesTheOthers) {
  ExecutorOptions o;
  auto ex = make(o);
  GenerateParams p;
  p.max_new_tokens = 30;
  const int64_t a = *ex->submit(ids("In the beginning"), p);
  const int64_t b = *ex->submit(ids("And God said"), p);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ex->step().ok());
  EXPECT_TRUE(ex->cancel(a).ok());
  EXPECT_EQ(ex->cancel(a).code(), StatusCode::kNotFound);
  auto results = drain(*ex);
  EXPECT_EQ(results.at(a).completions[0].finish, Finish::kCancelled);
  EXPECT_EQ(results.at(b).completions[0].tokens, alone(ids("And God said"), 30));
}

TEST(Executor, StopStringCutsTheTextAndStreamsOnlyWhatCannotBecomeOne) {
  ExecutorOptions o;
  auto ex = make(o);
  const std::vector<int32_t> prompt = ids("In the beginning God created");
  const std::vector<int32_t> greedy = alone(prompt, 64);
  std::string text(greedy.begin(), greedy.end());
  // Greedy text: " them that were all the people of the LORD shall be ..."; stop at "LORD".
  const size_t at = text.find("LORD");
  ASSERT_NE(at, std::string::npos) << text;
  std::string streamed;
  ex->set_on_token([&](const TokenEvent& e) { streamed += e.piece; });
  GenerateParams p;
  p.max_new_tokens = 64;
  p.stop = {"LORD", "zzz"};
  const int64_t id = *ex->submit(prompt, p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions[0];
  EXPECT_EQ(c.finish, Finish::kStop);
  EXPECT_EQ(c.text, text.substr(0, at));
  EXPECT_EQ(streamed, c.text);
  EXPECT_EQ(c.tokens.size(), at + 4);  // up to and including the token that completed "LORD"
}

TEST(Executor, EndOfGenerationTokenStopsUnlessIgnored) {
  ExecutorOptions o;
  o.eog_ids = {'L'};
  auto ex = make(o);
  const std::vector<int32_t> prompt = ids("In the beginning God created");
  const std::vector<int32_t> greedy = alone(prompt, 64);
  const size_t at = static_cast<size_t>(std::find(greedy.begin(), greedy.end(), 'L') - greedy.begin());
  ASSERT_LT(at, greedy.size());
  GenerateParams p;
  p.max_new_tokens = 64;
  const int64_t a = *ex->submit(prompt, p);
  p.ignore_eos = true;
  const int64_t b = *ex->submit(prompt, p);
  auto results = drain(*ex);
  EXPECT_EQ(results.at(a).completions[0].finish, Finish::kStop);
  EXPECT_EQ(results.at(a).completions[0].tokens.size(), at + 1);
  EXPECT_EQ(results.at(a).completions[0].text, std::string(greedy.begin(), greedy.begin() + at));
  EXPECT_EQ(results.at(b).completions[0].finish, Finish::kLength);
  EXPECT_EQ(results.at(b).completions[0].tokens, greedy);
}

TEST(Executor, ZeroNewTokensPrefillsAndFinishesWithLength) {
  ExecutorOptions o;
  auto ex = make(o);
  GenerateParams p;
  p.max_new_tokens = 0;
  const int64_t id = *ex->submit(ids("In the beginning"), p);
  auto results = drain(*ex);
  EXPECT_EQ(results.at(id).completions[0].finish, Finish::kLength);
  EXPECT_TRUE(results.at(id).completions[0].tokens.empty());
}

}  // namespace
}  // namespace kvcache::serve

namespace kvcache::serve {
namespace {

// A session's logits do not depend on who else is in the step beyond float rounding of the
// same kernels: the row of sequence A decoding alone vs decoding beside B's prefill chunk and
// C's decode token.
TEST(Executor, LogitsOfARowDoNotDependOnTheBatch) {
  const engine::Model& m = testing::tiny();
  auto run = [&](bool crowded) {
    engine::CacheOptions o;
    o.kind = std::string(kCellKind);
    engine::CachedEngine built = engine::build_engine(m, o).value();
    auto& cache = built.cache;
    auto& eng = built.engine;
    const int32_t a = built.seq, b = *cache->seq_new(), c = *cache->seq_new();
    engine::Logits out;
    auto feed = [&](int32_t seq, const std::string& text) {
      std::vector<int32_t> t = testing::ids(text), s(t.size(), seq);
      std::vector<int64_t> p(t.size());
      for (size_t i = 0; i < t.size(); ++i) p[i] = cache->pos(seq) + static_cast<int64_t>(i);
      EXPECT_TRUE(eng->forward({t, s, p}, engine::LogitsMode::kLast, out).ok());
    };
    feed(a, "In the beginning God");
    feed(b, "And God said");
    feed(c, "The LORD");
    std::vector<int32_t> t = {' '}, s = {a};
    std::vector<int64_t> p = {cache->pos(a)};
    if (crowded) {
      for (char ch : std::string(", Let")) {
        t.push_back(ch);
        s.push_back(b);
        p.push_back(cache->pos(b) + static_cast<int64_t>(t.size()) - 2);
      }
      t.push_back(' ');
      s.push_back(c);
      p.push_back(cache->pos(c));
    }
    EXPECT_TRUE(eng->forward({t, s, p}, engine::LogitsMode::kLast, out).ok());
    return std::vector<float>(out.row(0).begin(), out.row(0).end());
  };
  const std::vector<float> alone_row = run(false), crowded_row = run(true);
  ASSERT_EQ(alone_row.size(), crowded_row.size());
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < alone_row.size(); ++i) {
    scale = std::max(scale, std::fabs(alone_row[i]));
    diff = std::max(diff, std::fabs(alone_row[i] - crowded_row[i]));
  }
  EXPECT_GT(scale, 1.0f);
  EXPECT_LE(diff, 1e-5f * scale) << "max |diff| " << diff << " at logit scale " << scale;
}

}  // namespace
}  // namespace kvcache::serve

namespace kvcache::serve {
namespace {

// The tiny model's sliding(32) pools keep only a sequence's last 31 positions, so a finished
// request that generated 60 tokens no longer holds the window its prompt's end needs. The
// prompt's window tail was kept when its prefill reached the last prompt token: the same
// prompt again clones all but that token.
TEST(Executor, ARepeatedPromptHitsAfterGenerationMovedPastTheWindow) {
  ExecutorOptions o;
  auto ex = testing::make(o);
  const std::vector<int32_t> prompt = testing::ids("And God said, Let there be light: and there was");
  GenerateParams p;
  p.max_new_tokens = 60;
  const int64_t a = *ex->submit(prompt, p);
  auto first = testing::drain(*ex);
  const int64_t b = *ex->submit(prompt, p);
  auto second = testing::drain(*ex);
  EXPECT_EQ(first.at(a).cached_prompt_tokens, 0);
  EXPECT_EQ(second.at(b).cached_prompt_tokens, static_cast<int64_t>(prompt.size()) - 1);
  EXPECT_EQ(second.at(b).completions[0].tokens, first.at(a).completions[0].tokens);
  EXPECT_EQ(first.at(a).completions[0].tokens, testing::alone(prompt, 60));
}

// Ten requests share a 93-token system prompt and ask different questions. A finished
// sequence keeps only its last 31 positions in the sliding(32) pools, so without prompt
// checkpoints a later request finds no window before position 93; with them each later request
// clones at least the last block boundary of the shared prefix (16 x 5 = 80 tokens), at every
// session count, and generates exactly what it generates with the prefix cache off.
TEST(Executor, ASharedSystemPromptIsReusedOnASlidingWindowModel) {
  const std::string system =
      "You are a careful reader of old books. Answer in one short line, in the style of the text.\n>";
  ASSERT_EQ(system.size(), 92u);  // + " " = 93 shared tokens (byte tokenizer)
  const std::vector<std::string> questions = {
      "Who made the light?", "What was upon the face of the deep?", "Where was the garden?",
      "What did God call the light?", "Who was the first man?", "What is my shepherd?",
      "How long was the flood?", "What came on the third day?", "Why did Cain go out?",
      "Which river went out of Eden?"};
  for (int32_t sessions : {1, 3, 8}) {
    std::vector<std::vector<int32_t>> with, without;
    for (bool cache : {true, false}) {
      ExecutorOptions o;
      o.max_sessions = sessions;
      o.prefix_cache = cache;
      auto ex = testing::make(o);
      GenerateParams p;
      p.max_new_tokens = 12;
      std::vector<int64_t> ids;
      for (const std::string& q : questions) ids.push_back(*ex->submit(testing::ids(system + " " + q), p));
      auto done = testing::drain(*ex);
      for (size_t i = 0; i < ids.size(); ++i) {
        const RequestResult& r = done.at(ids[i]);
        (cache ? with : without).push_back(r.completions[0].tokens);
        if (!cache) {
          EXPECT_EQ(r.cached_prompt_tokens, 0);
        } else if (i > 0) {
          // The shared 93 tokens rounded down to a block; a request whose question starts like
          // an earlier one may share more.
          EXPECT_GE(r.cached_prompt_tokens, 80) << "sessions " << sessions << " request " << i;
        }
      }
      if (cache) {
        EXPECT_GT(ex->stats().checkpoints_taken, 0);
        EXPECT_LE(ex->stats().checkpoints, o.prefix_checkpoints);
        EXPECT_GE(ex->stats().prefix_hit_tokens, 9 * 80);
      }
    }
    EXPECT_EQ(with, without) << "sessions " << sessions;
  }
}

// With prompt checkpoints off the same requests miss: the window before the shared prefix's
// end is gone (what the checkpoints are for).
TEST(Executor, WithoutCheckpointsASharedPrefixMissesOnASlidingWindowModel) {
  ExecutorOptions o;
  o.max_sessions = 1;
  o.prefix_checkpoints = 0;
  auto ex = testing::make(o);
  GenerateParams p;
  p.max_new_tokens = 4;
  const std::string system(93, 'a');
  const int64_t a = *ex->submit(testing::ids(system + "first question"), p);
  const int64_t b = *ex->submit(testing::ids(system + "second question"), p);
  auto done = testing::drain(*ex);
  EXPECT_EQ(done.at(a).cached_prompt_tokens, 0);
  EXPECT_EQ(done.at(b).cached_prompt_tokens, 0);
  EXPECT_EQ(ex->stats().checkpoints_taken, 0);
}

TEST(Executor, RefusesANegativeCheckpointCount) {
  ExecutorOptions o;
  o.prefix_checkpoints = -1;
  auto ex = Executor::create(testing::tiny(), &testing::bytes_tokenizer(), o);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.status().message(), "executor: prefix_checkpoints = -1, expected >= 0");
}

}  // namespace
}  // namespace kvcache::serve

namespace kvcache::serve {
namespace {

// Saved prefixes: what one executor holds, exported as a snapshot and imported into another,
// makes the next request there a prefix hit with the same greedy tokens as a run alone.
TEST(ExecutorPrefixSnapshot, ExportedPrefixImportedElsewhereIsAPrefixHit) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    ExecutorOptions o;
    o.kv_dtype = dt;
    auto a = testing::make(o);
    const std::vector<int32_t> prompt = testing::ids("In the beginning God created the heaven");
    GenerateParams p;
    p.max_new_tokens = 0;  // prefill only: the finished sequence is retained
    ASSERT_TRUE(a->submit(prompt, p).ok());
    testing::drain(*a);
    Result<engine::Snapshot> snap = a->export_prefix(prompt);
    ASSERT_TRUE(snap.ok()) << snap.status().to_string();
    EXPECT_EQ(snap->positions, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(snap->tokens, prompt);
    const std::vector<uint8_t> bytes = engine::encode_snapshot(*snap);
    Result<engine::Snapshot> back = engine::decode_snapshot(bytes);
    ASSERT_TRUE(back.ok());

    auto b = testing::make(o);
    Result<int64_t> held = b->import_prefix(*back);
    ASSERT_TRUE(held.ok()) << held.status().to_string();
    EXPECT_EQ(*held, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(b->stats().retained, 1);
    std::vector<int32_t> longer = prompt;
    for (int32_t t : testing::ids(" and the earth.")) longer.push_back(t);
    p.max_new_tokens = 12;
    const int64_t id = *b->submit(longer, p);
    auto results = testing::drain(*b);
    EXPECT_EQ(results.at(id).cached_prompt_tokens, static_cast<int64_t>(prompt.size()));
    if (dt == DType::kF32) {  // alone() runs f32 K/V
      EXPECT_EQ(results.at(id).completions[0].tokens, testing::alone(longer, 12));
    }
    // The same request on `a` (its own prefix) samples the same tokens as on `b`.
    const int64_t again = *a->submit(longer, p);
    EXPECT_EQ(testing::drain(*a).at(again).completions[0].tokens,
              results.at(id).completions[0].tokens);
  }
}

TEST(ExecutorPrefixSnapshot, RefusalsNameTheReason) {
  ExecutorOptions o;
  auto a = testing::make(o);
  EXPECT_EQ(a->export_prefix(testing::ids("nothing held")).status().code(), StatusCode::kNotFound);
  const std::vector<int32_t> prompt = testing::ids("And God said, Let there be light");
  GenerateParams p;
  p.max_new_tokens = 0;
  ASSERT_TRUE(a->submit(prompt, p).ok());
  testing::drain(*a);
  Result<engine::Snapshot> snap = a->export_prefix(prompt);
  ASSERT_TRUE(snap.ok());
  ExecutorOptions f16 = o;
  f16.kv_dtype = DType::kF16;
  auto other = testing::make(f16);
  Result<int64_t> r = other->import_prefix(*snap);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("kv dtype f32, this cache stores f16"), std::string::npos);
  EXPECT_EQ(other->stats().retained, 0);
  EXPECT_EQ(other->cache().used_end(), 0);
  ExecutorOptions off = o;
  off.prefix_cache = false;
  EXPECT_EQ(testing::make(off)->import_prefix(*snap).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvcache::serve
