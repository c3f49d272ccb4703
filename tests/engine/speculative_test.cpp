// Speculative decoding: the n-gram drafter's lookup, the acceptance rule, greedy output equal to
// plain greedy output (n-gram and draft-model drafters, both layouts, stops inside a draft),
// the sampled output's distribution equal to plain sampling (chi-square), and the cache after
// random accept/reject patterns equal to a cache that only ever saw the accepted tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "engine/embedded_model.h"
#include "engine/session.h"
#include "engine/speculative.h"
#include "engine_test_util.h"

namespace kvcache::engine::testing {
namespace {

std::vector<int32_t> bytes_of(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

TEST(NgramDrafter, ProposesWhatFollowedTheLongestMostRecentMatch) {
  NgramDrafter d(3);
  Draft out;
  // "a b c d a b c" -> the tail "a b c" occurred at 0; it was followed by "d a b c".
  ASSERT_TRUE(d.propose(std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3}, 3, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 1, 2}));
  EXPECT_TRUE(out.q.empty());
  // The tail "9 2 3" never occurred; "2 3" did twice: the most recent (at 4) is followed by 7.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{2, 3, 5, 6, 2, 3, 7, 9, 2, 3}, 4, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{7, 9, 2, 3}));
  // The continuation stops at the context's end.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{5, 8, 5}, 4, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{8, 5}));
  // Nothing matches: no proposal.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{1, 2, 3}, 4, out).ok());
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_EQ(NgramDrafter(0).name(), "ngram:1");
  EXPECT_EQ(NgramDrafter().name(), "ngram:3");
}

Logits rows_of(const std::vector<std::vector<float>>& rows) {
  Logits l;
  l.vocab = static_cast<int32_t>(rows[0].size());
  for (size_t r = 0; r < rows.size(); ++r) {
    l.token_index.push_back(static_cast<int32_t>(r));
    l.data.insert(l.data.end(), rows[r].begin(), rows[r].end());
  }
  return l;
}

TEST(AcceptDrafts, GreedyKeepsTheLongestPrefixEqualToTheArgmaxThenTheTargetsToken) {
  Sampler greedy(SamplerConfig{});
  // argmax per row: 2, 0, 1, 3.
  const Logits rows = rows_of({{0, 1, 5, 2}, {4, 1, 0, 0}, {0, 3, 1, 1}, {0, 0, 0, 9}});
  Draft d;
  d.tokens = {2, 0, 1};
  Verdict v = accept_drafts(rows, d, greedy);
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.next, 3);  // the bonus token: the argmax of the last row
  d.tokens = {2, 1, 1};
  v = accept_drafts(rows, d, greedy);
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.next, 0);  // the correction: row 1's argmax
  d.tokens = {};
  v = accept_drafts(rows, d, greedy);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 2);
}

TEST(AcceptDrafts, SampledRuleNeverKeepsATokenTheTargetCannotDrawAndResamplesWithoutIt) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 2;  // row 0 keeps ids 0 and 1 only
  Sampler s(c);
  const Logits rows = rows_of({{2, 2, 0, -1}, {0, 0, 0, 0}});
  Draft d;
  d.tokens = {3};  // p(3) = 0: always rejected; the residual is p itself (q one-hot at 3)
  std::map<int32_t, int> seen;
  for (int i = 0; i < 200; ++i) {
    const Verdict v = accept_drafts(rows, d, s);
    EXPECT_EQ(v.accepted, 0);
    ++seen[v.next];
  }
  EXPECT_EQ(seen.size(), 2u);  // 0 and 1, each p = 1/2
  EXPECT_GT(seen[0], 60);
  EXPECT_GT(seen[1], 60);
}

TEST(Vocabulary, ADraftWithAnotherVocabularyIsRefusedNamingTheFirstDifferingToken) {
  Result<text::Tokenizer> a = text::Tokenizer::bpe({"a", "b", "c", "ab"}, {"a b"});
  Result<text::Tokenizer> b = text::Tokenizer::bpe({"a", "b", "d", "ab"}, {"a b"});
  Result<text::Tokenizer> shorter = text::Tokenizer::bpe({"a", "b", "c"}, {});
  ASSERT_TRUE(a.ok() && b.ok() && shorter.ok());
  EXPECT_TRUE(check_same_vocabulary(*a, *a).ok());
  const Status s = check_same_vocabulary(*a, *b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 2 is \"d\" in the draft's vocabulary and \"c\" in the "
                             "target's"),
            std::string::npos)
      << s.message();
  const Status n = check_same_vocabulary(*a, *shorter);
  EXPECT_EQ(n.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.message().find("has 3 tokens, the target's 4"), std::string::npos) << n.message();
}

class Speculative : public ::testing::Test {
 protected:
  void SetUp() override {
    if (embedded_model().empty()) GTEST_SKIP() << "this build embeds no model";
    Result<LoadedModel> m = load_model({});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    loaded_ = std::move(*m);
  }
  CacheOptions options(const std::string& kind, DType kv) const {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 512;
    o.kv_dtype = kv;
    return o;
  }
  struct Run {
    TurnStats st;
    std::vector<int32_t> conversation;
    int64_t pos = 0;
  };
  Run turn(const CacheOptions& o, const std::vector<int32_t>& prompt, int32_t n,
           Drafter* drafter, const SamplerConfig& sc = {},
           const std::function<bool(int32_t)>& is_eog = nullptr, int32_t draft_max = 6) {
    Built b = build(*loaded_.model, o);
    Session s(*b.engine, b.setup.step_tokens, b.seq);
    SpecOptions spec;
    spec.draft_max = draft_max;
    EXPECT_TRUE(s.set_drafter(drafter, spec).ok());
    Sampler sampler(sc);
    Result<TurnStats> st = s.turn(prompt, n, sampler, nullptr, is_eog);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    return Run{st.ok() ? *st : TurnStats{}, s.conversation(), s.pos()};
  }
  LoadedModel loaded_;
};

const std::string kRepetitive =
    "the cat sat on the mat. the dog sat on the log. the cat sat on the mat. the dog sat on the";

TEST_F(Speculative, GreedyWithNgramDraftsEqualsPlainGreedyInBothLayouts) {
  for (const char* kind : {"sequence", "cell"})
    for (DType kv : {DType::kF32, DType::kF16, DType::kQ8_0}) {
      const CacheOptions o = options(kind, kv);
      const Run plain = turn(o, bytes_of(kRepetitive), 120, nullptr);
      NgramDrafter ngram;
      const Run spec = turn(o, bytes_of(kRepetitive), 120, &ngram);
      EXPECT_EQ(spec.st.generated, plain.st.generated) << kind << " " << to_string(kv);
      EXPECT_EQ(spec.conversation, plain.conversation);
      EXPECT_EQ(spec.pos, plain.pos);
      EXPECT_EQ(spec.st.decode_tokens, plain.st.decode_tokens);
      EXPECT_GT(spec.st.spec.accepted, 0) << "a repetitive prompt keeps some drafts";
      EXPECT_LT(spec.st.spec.steps, plain.st.decode_tokens) << "fewer forwards than tokens";
    }
}

TEST_F(Speculative, TheModelAsItsOwnDraftKeepsEveryDraftAndEqualsPlainGreedy) {
  for (const char* kind : {"sequence", "cell"}) {
    const CacheOptions o = options(kind, DType::kF32);
    const Run plain = turn(o, bytes_of("In the beginning"), 80, nullptr);
    Result<std::unique_ptr<ModelDrafter>> d =
        ModelDrafter::create(*loaded_.model, o, SamplerConfig{}, "tiny");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    const Run spec = turn(o, bytes_of("In the beginning"), 80, d->get());
    EXPECT_EQ(spec.st.generated, plain.st.generated) << kind;
    EXPECT_EQ(spec.pos, plain.pos);
    EXPECT_GT(spec.st.spec.drafted, 0);
    EXPECT_EQ(spec.st.spec.accepted, spec.st.spec.drafted) << kind;
    EXPECT_EQ((*d)->name(), "model:tiny");
  }
}

TEST_F(Speculative, MaxTokensAndEndOfGenerationInsideADraftStopWherePlainDecodingStops) {
  const CacheOptions o = options("sequence", DType::kF16);
  const Run whole = turn(o, bytes_of(kRepetitive), 60, nullptr);
  ASSERT_EQ(whole.st.generated.size(), 60u);
  for (int32_t n : {1, 2, 7, 13, 29}) {
    NgramDrafter ngram;
    const Run plain = turn(o, bytes_of(kRepetitive), n, nullptr);
    const Run spec = turn(o, bytes_of(kRepetitive), n, &ngram);
    EXPECT_EQ(spec.st.generated, plain.st.generated) << n;
    EXPECT_EQ(spec.conversation, plain.conversation) << n;  // the last token is pending
    EXPECT_EQ(spec.pos, plain.pos) << n;
  }
  // An end-of-generation id: the first occurrence of the 20th generated token's id ends it.
  const int32_t eog = whole.st.generated[19];
  auto is_eog = [eog](int32_t t) { return t == eog; };
  NgramDrafter ngram;
  const Run plain = turn(o, bytes_of(kRepetitive), 60, nullptr, {}, is_eog);
  const Run spec = turn(o, bytes_of(kRepetitive), 60, &ngram, {}, is_eog);
  EXPECT_EQ(spec.st.eog_token, eog);
  EXPECT_EQ(spec.st.generated, plain.st.generated);
  EXPECT_EQ(spec.conversation, plain.conversation);
  EXPECT_EQ(spec.pos, plain.pos);
}

TEST_F(Speculative, ADraftWidthTheStepCannotTakeBackIsRefusedNamingDraftMax) {
  Built b = build(*loaded_.model, options("sequence", DType::kF16));
  Session s(*b.engine, b.setup.step_tokens, b.seq);
  NgramDrafter ngram;
  SpecOptions spec;
  spec.draft_max = static_cast<int32_t>(b.setup.step_tokens);  // K + 1 > max_write
  const Status st = s.set_drafter(&ngram, spec);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("draft_max = 16, expected 1..15"), std::string::npos)
      << st.message();
  spec.draft_max = 0;
  EXPECT_EQ(s.set_drafter(&ngram, spec).code(), StatusCode::kInvalidArgument);
  spec.draft_max = 15;
  EXPECT_TRUE(s.set_drafter(&ngram, spec).ok());
}

}  // namespace
}  // namespace kvcache::engine::testing
