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
#include "program/gguf_quant.h"

namespace kvcache::engine::testing {
namespace {

CacheOptions capacity(int64_t cells) {
  CacheOptions o;
  o.capacity = cells;
  return o;
}

// A draft sampler hotter than the target's, so rejections draw from the residual.
SamplerConfig hot_sampler() {
  SamplerConfig c;
  c.temperature = 1.4f;
  c.seed = 9;
  return c;
}

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
  // A continuation that reaches the context's end goes on from the drafts: "5" was followed
  // by "8 5", and then the tail "5 8 5" by "8 5" again.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{5, 8, 5}, 4, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{8, 5, 8, 5}));
  // "1 2" was followed by "3 1 2" (the end); with those drafts the tail "3 1 2" occurred at 2,
  // followed by "3 1 2": two more fill k = 5.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{1, 2, 3, 1, 2}, 5, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3, 1, 2, 3, 1}));
  // A run of one id: each match offers one more, k of them in all.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{4, 7, 7, 7}, 6, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>(6, 7)));
  // Never more than k: "6" was followed by "9 6", one is asked for.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{6, 9, 6}, 1, out).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{9}));
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
    // A fixed width: the adaptive one follows measured step times, which would make what
    // these tests draft depend on the machine (AdaptiveK is tested on its own below).
    spec.adaptive = false;
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
      // Every step is a verify step (at least one draft) or a plain one, and each is timed.
      const SpecStats& d = spec.st.spec;
      EXPECT_GT(d.verify_steps, 0);
      EXPECT_LE(d.verify_steps, d.steps);
      EXPECT_GE(d.drafted, d.verify_steps);
      EXPECT_GT(d.verify_seconds, 0.0);
      EXPECT_EQ(d.plain_seconds > 0.0, d.verify_steps < d.steps);
      EXPECT_EQ(spec_figures(d).has_value(), d.verify_steps < d.steps);
      EXPECT_EQ(plain.st.spec.verify_steps, 0) << "no drafter: nothing verified";
    }
}

TEST_F(Speculative, TheModelAsItsOwnDraftKeepsEveryDraftAndEqualsPlainGreedy) {
  for (const char* kind : {"sequence", "cell"}) {
    const CacheOptions o = options(kind, DType::kF32);
    const Run plain = turn(o, bytes_of("In the beginning"), 80, nullptr);
    Result<std::unique_ptr<ModelDrafter>> d =
        ModelDrafter::create(*loaded_.model, o, SamplerConfig{}, "model:tiny");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    const Run spec = turn(o, bytes_of("In the beginning"), 80, d->get());
    EXPECT_EQ(spec.st.generated, plain.st.generated) << kind;
    EXPECT_EQ(spec.pos, plain.pos);
    EXPECT_GT(spec.st.spec.drafted, 0);
    EXPECT_EQ(spec.st.spec.accepted, spec.st.spec.drafted) << kind;
    EXPECT_EQ((*d)->name(), "model:tiny");
  }
}

// A drafter reads the turn's prompt once, right after the target prefilled it (prompt work,
// timed with the prefill), and only proposes after; a one-token turn never drafts, so it is
// not asked to read.
class RecordingDrafter final : public Drafter {
 public:
  Status prepare(std::span<const int32_t> context) override {
    prepared.push_back(static_cast<int64_t>(context.size()));
    if (proposals > 0) prepared_after_a_proposal = true;
    return ok_status();
  }
  Status propose(std::span<const int32_t> context, int32_t k, Draft& out) override {
    ++proposals;
    return inner.propose(context, k, out);
  }
  std::string name() const override { return "recording"; }
  NgramDrafter inner;
  std::vector<int64_t> prepared;
  int32_t proposals = 0;
  bool prepared_after_a_proposal = false;
};

TEST_F(Speculative, ADrafterReadsThePromptWithThePrefillBeforeItsFirstProposal) {
  const CacheOptions o = options("sequence", DType::kF16);
  const std::vector<int32_t> prompt = bytes_of(kRepetitive);
  RecordingDrafter rec;
  const Run spec = turn(o, prompt, 40, &rec);
  ASSERT_EQ(rec.prepared.size(), 1u);
  EXPECT_EQ(rec.prepared[0], static_cast<int64_t>(prompt.size()));
  EXPECT_FALSE(rec.prepared_after_a_proposal);
  EXPECT_GT(rec.proposals, 0);
  EXPECT_EQ(spec.st.generated, turn(o, prompt, 40, nullptr).st.generated);
  RecordingDrafter one;
  (void)turn(o, prompt, 1, &one);
  EXPECT_TRUE(one.prepared.empty());
  EXPECT_EQ(one.proposals, 0);
}

// A draft model that read the prompt in prepare() feeds only the new ids at its first
// proposal: its cache holds the prompt after prepare, and the drafts equal those of a drafter
// that read it all in propose().
TEST_F(Speculative, ADraftModelPreparedOnThePromptProposesWhatAnUnpreparedOneDoes) {
  const CacheOptions o = options("sequence", DType::kF16);
  std::vector<int32_t> context = bytes_of("In the beginning");
  Result<std::unique_ptr<ModelDrafter>> a =
      ModelDrafter::create(*loaded_.model, o, SamplerConfig{}, "a");
  Result<std::unique_ptr<ModelDrafter>> b =
      ModelDrafter::create(*loaded_.model, o, SamplerConfig{}, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->prepare(context).ok());
  context.push_back(context.back());  // the held token
  Draft da, db;
  ASSERT_TRUE((*a)->propose(context, 4, da).ok());
  ASSERT_TRUE((*b)->propose(context, 4, db).ok());
  EXPECT_EQ(da.tokens.size(), 4u);
  EXPECT_EQ(da.tokens, db.tokens);
}

// self:TYPE: the target's matrices re-encoded in memory draft for it; greedy output stays the
// target's, and most drafts agree with it.
TEST_F(Speculative, TheTargetsOwnWeightsReencodedDraftForIt) {
  const Model& model = *loaded_.model;
  EXPECT_EQ(model.requantized(gguf::TensorType::kF16).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model.requantized(gguf::TensorType::kQ4_1).status().code(),
            StatusCode::kInvalidArgument);
  for (gguf::TensorType type : {gguf::TensorType::kQ8_0, gguf::TensorType::kQ4_0,
                                gguf::TensorType::kQ4_K, gguf::TensorType::kQ6_K}) {
    Result<Model> cheap = model.requantized(type);
    ASSERT_TRUE(cheap.ok()) << cheap.status().to_string();
    // Rows of whole K-quant blocks (256 values) take the K type, narrower ones Q8_0.
    const auto as_encoded = [&](const kernels::Weight& w) {
      return gguf::row_bytes(type, w.cols) ? type : gguf::TensorType::kQ8_0;
    };
    EXPECT_EQ(cheap->layers()[0].wq.type, as_encoded(model.layers()[0].wq));
    EXPECT_EQ(cheap->layers()[0].w_down.type, as_encoded(model.layers()[0].w_down));
    EXPECT_EQ(cheap->output().type, as_encoded(model.output()));
    // A tied output gets its own encoded copy: counted once more (vocab x d).
    EXPECT_FALSE(cheap->tied());
    EXPECT_EQ(cheap->n_params(),
              model.n_params() + (model.tied() ? model.output().n_elements() : 0));
    const CacheOptions o = options("cell", DType::kF16);
    const Run plain = turn(o, bytes_of("In the beginning"), 60, nullptr);
    Result<std::unique_ptr<ModelDrafter>> d =
        ModelDrafter::create(*cheap, o, SamplerConfig{}, "self");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    const Run spec = turn(o, bytes_of("In the beginning"), 60, d->get());
    EXPECT_EQ(spec.st.generated, plain.st.generated) << gguf::to_string(type);
    EXPECT_GT(spec.st.spec.acceptance(), 0.5) << gguf::to_string(type);
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


// (t2, t3) — the 2nd and 3rd generated tokens, the first two a verification step produces —
// for seeds 0..n-1 after a fixed prompt. The prompt but its last id is fed once; each seed is a
// turn of that last id (then undone, back to the same cache).
std::vector<int64_t> pairs(const Model& model, const std::vector<int32_t>& prompt,
                           SamplerConfig sc, Drafter* drafter, int n) {
  CacheOptions o;
  o.kind = "sequence";
  o.capacity = 256;
  Built b = build(model, o);
  Session s(*b.engine, b.setup.step_tokens, b.seq);
  EXPECT_TRUE(s.set_drafter(drafter, SpecOptions{.draft_max = 4}).ok());
  Sampler none(SamplerConfig{});
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
  EXPECT_TRUE(s.turn(head, 0, none).ok());
  std::vector<int64_t> out;
  for (int seed = 0; seed < n; ++seed) {
    sc.seed = static_cast<uint64_t>(seed);
    Sampler sampler(sc);
    Result<TurnStats> st = s.turn(std::vector<int32_t>{prompt.back()}, 3, sampler);
    EXPECT_TRUE(st.ok() && st->generated.size() == 3u);
    if (!st.ok() || st->generated.size() != 3u) return out;
    out.push_back(int64_t{st->generated[1]} * 1000 + st->generated[2]);
    EXPECT_TRUE(s.undo(1).ok());
  }
  return out;
}

// Two-sample chi-square homogeneity test of equal-size samples: pairs seen fewer than 10 times
// in both together are pooled into one bin (each expected count >= 5), and one more bin joins
// the pool when needed to make the degrees of freedom even. The survival probability.
double homogeneity(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int* df_out) {
  std::map<int64_t, std::pair<int64_t, int64_t>> count;
  for (int64_t x : a) ++count[x].first;
  for (int64_t x : b) ++count[x].second;
  std::vector<std::pair<int64_t, int64_t>> bins;
  std::pair<int64_t, int64_t> pool{0, 0};
  for (const auto& [key, c] : count) {
    if (c.first + c.second < 10) pool.first += c.first, pool.second += c.second;
    else bins.push_back(c);
  }
  if (pool.first + pool.second > 0) bins.push_back(pool);
  if (bins.size() % 2 == 0 && bins.size() > 2) {  // df = bins - 1 must be even
    std::sort(bins.begin(), bins.end(), [](auto x, auto y) { return x.first + x.second < y.first + y.second; });
    bins[1].first += bins[0].first, bins[1].second += bins[0].second;
    bins.erase(bins.begin());
  }
  double chi2 = 0.0;
  for (const auto& [x, y] : bins) chi2 += double(x - y) * double(x - y) / double(x + y);
  *df_out = static_cast<int>(bins.size()) - 1;
  return chi2_survival_even_df(chi2, *df_out);
}

// Plain sampling vs speculative sampling, 2000 seeds each, temperature 0.9 and top-p 0.95:
// the (t2, t3) distributions must not differ at the 1e-4 level (a correct rule fails with
// probability 1e-4 per comparison; the seeds are fixed, so the test never flakes). The same
// test tells plain sampling at temperature 0.9 from 1.2 apart (its power on this model).
TEST_F(Speculative, SampledOutputHasTheTargetsDistribution) {
  const Model& model = *loaded_.model;
  const std::vector<int32_t> prompt = bytes_of("the cat sat on the mat. the cat sat on th");
  constexpr int kSeeds = 2000;
  const SamplerConfig sc{.temperature = 0.9f, .top_k = 0, .top_p = 0.95f};
  const std::vector<int64_t> plain = pairs(model, prompt, sc, nullptr, kSeeds);
  ASSERT_EQ(plain.size(), size_t{kSeeds});
  int df = 0;
  NgramDrafter ngram;  // q one-hot
  const double p_ngram = homogeneity(plain, pairs(model, prompt, sc, &ngram, kSeeds), &df);
  EXPECT_GT(p_ngram, 1e-4) << "ngram drafts: chi-square survival over " << df << " df";
  EXPECT_GE(df, 10);
  // The model itself as drafter at another temperature: q differs from p, so rejections
  // draw from the residual max(0, p - q).
  Result<std::unique_ptr<ModelDrafter>> d = ModelDrafter::create(
      model, capacity(256), hot_sampler(), "q");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const double p_model = homogeneity(plain, pairs(model, prompt, sc, d->get(), kSeeds), &df);
  EXPECT_GT(p_model, 1e-4) << "model drafts: chi-square survival over " << df << " df";
  SamplerConfig hotter = sc;
  hotter.temperature = 1.2f;
  EXPECT_LT(homogeneity(plain, pairs(model, prompt, hotter, nullptr, kSeeds), &df), 1e-4)
      << "the test must tell temperature 0.9 from 1.2";
}

// Writes steps into a cache the way the model's blocks do (every model layer in order: an
// owning layer writes and attends, a KV-shared one only attends), with q/k/v a fixed function
// of (token, position, layer, index): the rows of a token do not depend on the step it came in,
// so two caches that hold the same tokens must hold the same bytes.
class RowDriver {
 public:
  RowDriver(const Model& model, Cache& cache, int32_t seq)
      : model_(model), cache_(cache), seq_(seq) {}
  // One step of `tokens` at the sequence's next positions; returns every layer's output.
  std::vector<float> step(const std::vector<int32_t>& tokens) {
    const HParams& hp = model_.hparams();
    const auto t = static_cast<int32_t>(tokens.size());
    const std::vector<int32_t> ids(tokens.size(), seq_);
    std::vector<int64_t> pos(tokens.size());
    for (int32_t i = 0; i < t; ++i) pos[i] = cache_.pos(seq_) + i;
    EXPECT_TRUE(cache_.declare_step(ids).ok());
    std::vector<float> all;
    for (int32_t l = 0; l < hp.n_layers; ++l) {
      const LayerWeights& w = model_.layers()[l];
      const std::vector<float> q = fill(tokens, pos, l, hp.q_heads * hp.head_dim, 0.0f);
      const std::vector<float> k = fill(tokens, pos, l, w.kv_heads * hp.head_dim, 1.0f);
      const std::vector<float> v = fill(tokens, pos, l, w.kv_heads * hp.value_dim, 2.0f);
      std::vector<float> out(static_cast<size_t>(t) * hp.q_heads * hp.value_dim);
      AttendArgs a;
      a.layer = w.cache;
      a.n_tokens = t;
      a.q_heads = hp.q_heads;
      a.positions = pos;
      a.q = q;
      if (!w.kv_shared) a.k = k, a.v = v;
      a.scale = 0.125f;
      a.out = out;
      const Status st = w.kv_shared ? cache_.attend(a) : cache_.update_and_attend(a);
      EXPECT_TRUE(st.ok()) << "layer " << l << ": " << st.to_string();
      all.insert(all.end(), out.begin(), out.end());
    }
    return all;
  }

 private:
  static std::vector<float> fill(const std::vector<int32_t>& tokens, const std::vector<int64_t>& pos,
                                 int32_t layer, int64_t width, float salt) {
    std::vector<float> x;
    for (size_t i = 0; i < tokens.size(); ++i)
      for (int64_t j = 0; j < width; ++j)
        x.push_back(std::sin(0.37f * static_cast<float>(tokens[i]) +
                             0.011f * static_cast<float>(pos[i]) + 1.3f * static_cast<float>(layer) +
                             0.07f * static_cast<float>(j) + salt));
    return x;
  }
  const Model& model_;
  Cache& cache_;
  int32_t seq_;
};

void expect_same_cache(const CacheControl& cs, int32_t s, const CacheControl& cr, int32_t r,
                       int round) {
  const int64_t pos = cr.pos(r);
  ASSERT_EQ(cs.pos(s), pos) << round;
  ASSERT_EQ(cs.seq_len(s), cr.seq_len(r));
  ASSERT_EQ(cs.free_cells(), cr.free_cells());
  ASSERT_EQ(cs.used_end(), cr.used_end());
  Result<std::vector<LayerRows>> rs = cs.read_rows(s, 0, pos), rr = cr.read_rows(r, 0, pos);
  ASSERT_TRUE(rs.ok() && rr.ok());
  for (size_t l = 0; l < rr->size(); ++l) {
    const LayerRows &x = (*rs)[l], &y = (*rr)[l];
    const int32_t w = cs.geometry().layers[l].window;
    // Every position a later query can see is held: all of them, or the window's W - 1.
    const int64_t need = w > 0 ? std::max<int64_t>(0, pos - (w - 1)) : 0;
    ASSERT_LE(x.first, need) << "layer " << l << " round " << round;
    ASSERT_LE(y.first, need) << "layer " << l << " round " << round;
    // Bitwise equal over what both hold (a sequence-layout ring may hold more than W - 1).
    const int64_t from = std::max(x.first, y.first);
    const auto kb = static_cast<int64_t>(x.k.size()) / std::max<int64_t>(x.n, 1);
    const auto vb = static_cast<int64_t>(x.v.size()) / std::max<int64_t>(x.n, 1);
    ASSERT_TRUE(std::equal(x.k.begin() + (from - x.first) * kb, x.k.end(),
                           y.k.begin() + (from - y.first) * kb, y.k.end()))
        << "K rows differ, layer " << l << " round " << round;
    ASSERT_TRUE(std::equal(x.v.begin() + (from - x.first) * vb, x.v.end(),
                           y.v.begin() + (from - y.first) * vb, y.v.end()))
        << "V rows differ, layer " << l << " round " << round;
  }
}

// Random accept/reject patterns against a cache that only ever saw the accepted tokens, over
// the embedded model's cache (sliding(32) rings / pools, a KV-shared layer): each round writes
// the held token + K random drafts as one step, keeps a random number of them (a forced
// verdict) and rewinds the rest; the reference writes the held token + the kept drafts. Over
// 60 rounds the windows slide several times. Counters, rows (bitwise) and what the next step
// attends (bitwise) must agree.
TEST_F(Speculative, RejectedDraftsLeaveTheCacheAsIfNeverWritten) {
  const Model& model = *loaded_.model;
  for (const char* kind : {"sequence", "cell"})
    for (DType kv : {DType::kF16, DType::kQ8_0}) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(to_string(kv)));
      const CacheOptions o = options(kind, kv);
      Built spec = build(model, o), ref = build(model, o);
      RowDriver ds(model, *spec.cache, spec.seq), dr(model, *ref.cache, ref.seq);
      std::mt19937 rng(77);
      auto rand_tok = [&] { return static_cast<int32_t>(rng() % 256); };
      ds.step(some_tokens(14, 256, 5));
      dr.step(some_tokens(14, 256, 5));
      int32_t tok = rand_tok();
      int64_t rejected = 0;
      for (int round = 0; round < 60; ++round) {
        const int32_t k = 1 + static_cast<int32_t>(rng() % 6);  // K + 1 <= max_write (16)
        std::vector<int32_t> feed{tok};
        for (int32_t i = 0; i < k; ++i) feed.push_back(rand_tok());
        const int32_t kept = static_cast<int32_t>(rng() % (k + 1));
        const int64_t p0 = spec.cache->pos(spec.seq);
        ds.step(feed);
        ASSERT_TRUE(spec.cache->rewind(spec.seq, p0 + 1 + kept).ok()) << round;
        dr.step(std::vector<int32_t>(feed.begin(), feed.begin() + 1 + kept));
        rejected += k - kept;
        tok = rand_tok();
        expect_same_cache(*spec.cache, spec.seq, *ref.cache, ref.seq, round);
        if (HasFatalFailure()) return;
      }
      EXPECT_GT(rejected, 60);
      EXPECT_GT(spec.cache->pos(spec.seq), 150);  // past the window several times
      const std::vector<int32_t> next = some_tokens(9, 256, 9);
      EXPECT_EQ(ds.step(next), dr.step(next));
    }
}

// The same through the model's forward: after random accept/reject rounds the positions and
// counters match a cache that saw only the accepted tokens, and the next tokens' logits agree
// (rows computed in steps of another width round differently, so not bitwise here).
TEST_F(Speculative, RejectedDraftsThroughTheForwardLeaveTheSameCounters) {
  const Model& model = *loaded_.model;
  for (const char* kind : {"sequence", "cell"}) {
    SCOPED_TRACE(kind);
    const CacheOptions o = options(kind, DType::kF32);
    Built spec = build(model, o), ref = build(model, o);
    std::mt19937 rng(78);
    Logits a, b;
    const std::vector<int32_t> prompt = some_tokens(20, 256, 5);
    ASSERT_TRUE(prefill_chunks(*spec.engine, spec.seq, prompt, 16, LogitsMode::kLast, a).ok());
    ASSERT_TRUE(prefill_chunks(*ref.engine, ref.seq, prompt, 16, LogitsMode::kLast, b).ok());
    for (int round = 0; round < 40; ++round) {
      const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
      const std::vector<int32_t> feed = some_tokens(k + 1, 256, 100 + round);
      const int32_t kept = static_cast<int32_t>(rng() % (k + 1));
      const int64_t p0 = spec.engine->cache().pos(spec.seq);
      ASSERT_TRUE(prefill_chunks(*spec.engine, spec.seq, feed, 16, LogitsMode::kAll, a).ok());
      ASSERT_TRUE(spec.engine->cache().rewind(spec.seq, p0 + 1 + kept).ok()) << round;
      const std::vector<int32_t> accepted(feed.begin(), feed.begin() + 1 + kept);
      ASSERT_TRUE(prefill_chunks(*ref.engine, ref.seq, accepted, 16, LogitsMode::kAll, b).ok());
      ASSERT_EQ(spec.engine->cache().pos(spec.seq), ref.engine->cache().pos(ref.seq));
      ASSERT_EQ(spec.engine->cache().free_cells(), ref.engine->cache().free_cells());
      ASSERT_EQ(spec.engine->cache().used_end(), ref.engine->cache().used_end());
    }
    const std::vector<int32_t> next = some_tokens(12, 256, 9);
    ASSERT_TRUE(prefill_chunks(*spec.engine, spec.seq, next, 16, LogitsMode::kAll, a).ok());
    ASSERT_TRUE(prefill_chunks(*ref.engine, ref.seq, next, 16, LogitsMode::kAll, b).ok());
    ASSERT_EQ(a.data.size(), b.data.size());
    double worst = 0.0, scale = 1.0;
    for (size_t i = 0; i < a.data.size(); ++i) {
      worst = std::max(worst, double(std::abs(a.data[i] - b.data[i])));
      scale = std::max(scale, double(std::abs(b.data[i])));
    }
    EXPECT_LT(worst / scale, 1e-4);
  }
}

}  // namespace
}  // namespace kvcache::engine::testing

namespace kvcache::engine::testing {
namespace {

// The rule of docs/speculative.md, "Adaptive K", step by step.
TEST(AdaptiveK, HalvesToZeroOnRejectionsProbesAfterSixteenPlainStepsAndGrowsBack) {
  SpecOptions o;
  o.measured_cost = false;  // the acceptance rule (the executor's)
  o.draft_max = 4;
  AdaptiveK k(o);
  EXPECT_EQ(k.k(), 4);
  k.observe(4, 4);  // all kept: rate 1, K stays at the cap
  EXPECT_EQ(k.k(), 4);
  k.observe(4, 3);  // rate = 0.75 + 0.25 * 0.75 = 0.9375 >= 1/2: K stays
  EXPECT_EQ(k.k(), 4);
  EXPECT_DOUBLE_EQ(k.rate(), 0.9375);
  k.observe(4, 0);  // none kept: halves
  EXPECT_EQ(k.k(), 2);
  k.observe(2, 1);  // rate = 0.703125 * 0.75 + 0.125 = 0.65234375: stays
  EXPECT_EQ(k.k(), 2);
  k.observe(2, 0);  // halves to 1
  EXPECT_EQ(k.k(), 1);
  k.observe(1, 0);  // halves to 0: plain decoding
  EXPECT_EQ(k.k(), 0);
  k.observe(0, 0);  // a plain step at K = 0 counts toward the probe
  for (int i = 1; i < AdaptiveK::kProbeAfter - 1; ++i) k.observe(0, 0);
  EXPECT_EQ(k.k(), 0) << "15 plain steps";
  k.observe(0, 0);
  EXPECT_EQ(k.k(), 1) << "the 16th: a one-draft probe";
  k.observe(1, 1);  // the probe kept it: grows
  EXPECT_EQ(k.k(), 2);
  k.observe(2, 2);
  k.observe(3, 3);
  EXPECT_EQ(k.k(), 4);
}

TEST(AdaptiveK, ALowRateHalvesEvenWhenSomeDraftsAreKeptAndANonAdaptiveKNeverMoves) {
  SpecOptions o;
  o.measured_cost = false;  // the acceptance rule (the executor's)
  o.draft_max = 8;
  AdaptiveK k(o);
  // a/d = 1/8 each step: rate 1 -> 0.781 -> 0.617 -> 0.494 (< 1/2: halves)
  k.observe(8, 1);
  k.observe(8, 1);
  EXPECT_EQ(k.k(), 8);
  k.observe(8, 1);
  EXPECT_EQ(k.k(), 4);
  k.observe(0, 0);  // the drafter offered nothing at K > 0: no change
  EXPECT_EQ(k.k(), 4);
  o.adaptive = false;
  AdaptiveK fixed(o);
  fixed.observe(8, 0);
  fixed.observe(8, 0);
  EXPECT_EQ(fixed.k(), 8);
}


// The measured-cost rule: K maximizes E(K) / (K c + v(K + 1)). Costs in milliseconds.
// Plain steps (one row, 1.0 s each) a session resting at K = 0 takes until it probes again;
// 1000 = no probe.
int plain_steps_until_probe(AdaptiveK& a) {
  int n = 0;
  while (a.k() == 0 && n < 1000) {
    a.observe_costs(0, 0.0, 1, 1.0);
    a.observe(0, 0);
    ++n;
  }
  return n;
}

TEST(AdaptiveK, WithMeasuredCostsKMaximizesExpectedTokensPerSecond) {
  SpecOptions o;
  o.draft_max = 4;
  AdaptiveK k(o);
  EXPECT_EQ(k.k(), AdaptiveK::kFirstMeasured) << "a narrow first step";
  EXPECT_EQ(k.tokens_per_second(2), 0.0) << "no costs yet";
  // A free drafter; v(5) = 2 (a 5-row forward costs two plain steps); every draft kept.
  k.observe_costs(4, 0.0, 5, 2.0);
  k.observe(4, 4);
  // p = 1: E(K) = K + 1. Unmeasured widths cost 5-row time per row: v(r) = 0.4 r, so every
  // K gives E / v = 2.5; a wider K must win by more than 1 %, so K = 0.
  EXPECT_DOUBLE_EQ(k.tokens_per_second(0), 1.0 / 0.4);
  EXPECT_EQ(k.k(), 0);
  // A plain step measures v(1) = 1 and a 2-row step v(2) = 1.1, both drafts kept.
  k.observe_costs(0, 0.0, 1, 1.0);
  k.observe(0, 0);
  k.observe_costs(1, 0.0, 2, 1.1);
  k.observe(1, 1);
  // K = 1: 2 / 1.1 = 1.82; K = 2, 3 priced as v(2): 3 / 1.1, 4 / 1.1; K = 4: 5 / 2 = 2.5.
  EXPECT_EQ(k.k(), 3);
  EXPECT_DOUBLE_EQ(k.tokens_per_second(3), 4.0 / 1.1);
  // The 4-row forward turns out to cost 3 plain steps and the first draft fails. Kept and
  // examined decay by 0.9 a verified step: 4, then 0.9 * 4 + 1 = 4.6 of 4.6, now kept
  // 0.9 * 4.6 = 4.14 of 4.14 + 1 examined. K = 2 (v(3) still priced as v(2) = 1.1) gives
  // (1 + p + p^2) / 1.1 = 2.23; K = 3: 0.99; K = 4: 1.70; K = 1: 1.65.
  k.observe_costs(3, 0.0, 4, 3.0);
  k.observe(3, 0);
  const double p = 4.14 / 5.14;
  EXPECT_NEAR(k.tokens_per_second(2), (1 + p + p * p) / 1.1, 1e-12);
  EXPECT_NEAR(k.tokens_per_second(3), (1 + p + p * p + p * p * p) / 3.0, 1e-12);
  EXPECT_EQ(k.k(), 2);
  // A drafter that costs as much as a plain step per draft: plain decoding wins. Its first
  // drafting step (a draft model prefilling the prompt: 100) is not a draft's cost.
  AdaptiveK slow(o);
  slow.observe_costs(0, 0.0, 1, 1.0);
  slow.observe_costs(1, 100.0, 2, 1.1);
  slow.observe(1, 1);
  EXPECT_GT(slow.k(), 0) << "c not known yet";
  slow.observe_costs(1, 1.0, 2, 1.1);
  slow.observe(1, 1);
  EXPECT_EQ(slow.k(), 0);
  EXPECT_DOUBLE_EQ(slow.tokens_per_second(1), 2.0 / 2.1);
  // It could not pay even with every draft kept (K = 1: 2 / 2.1, K = 4: 5 / 5.1 plain
  // steps' worth): no probe follows.
  EXPECT_EQ(plain_steps_until_probe(slow), 1000);
  // A cheap drafter (0.1 a draft) whose drafts fail: probes after 16 plain steps; one that
  // ends at K = 0 with drafter time above a plain step (a draft model catching up: 50) doubles
  // the wait (32, then 64) and leaves the draft cost as it was; a cheap probe does not.
  AdaptiveK flaky(o);
  flaky.observe_costs(0, 0.0, 1, 1.0);
  flaky.observe_costs(2, 30.0, 3, 1.2);  // the first drafting step: a catch-up, not counted
  flaky.observe(2, 0);
  flaky.observe_costs(4, 0.4, 5, 1.5);
  flaky.observe(4, 0);
  EXPECT_EQ(flaky.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(flaky), 16);
  flaky.observe_costs(1, 50.0, 2, 1.1);
  flaky.observe(1, 0);
  EXPECT_EQ(flaky.k(), 0);
  EXPECT_DOUBLE_EQ(flaky.tokens_per_second(1), (1 + 0.0) / (0.1 + 1.1)) << "c still 0.1, p 0";
  EXPECT_EQ(plain_steps_until_probe(flaky), 32);
  flaky.observe_costs(1, 3.0, 2, 1.1);
  flaky.observe(1, 0);
  EXPECT_EQ(plain_steps_until_probe(flaky), 64);
  flaky.observe_costs(1, 0.5, 2, 1.1);
  flaky.observe(1, 0);
  EXPECT_EQ(plain_steps_until_probe(flaky), 64);
}

// A free drafter on a model whose 2-row step costs 3.5 plain steps (a tiny model, where a step
// is mostly fixed cost): a probe that finds nothing loses 2.5 plain steps, so the next waits
// 2.5 / 0.02 = 125 plain steps, not 16 (probing costs about 2 % of the time).
TEST(AdaptiveK, AProbeThatLosesTimeWaitsLongEnoughToCostAboutTwoPercent) {
  SpecOptions o;
  o.draft_max = 4;
  AdaptiveK k(o);
  k.observe_costs(0, 0.0, 1, 1.0);
  k.observe(0, 0);
  k.observe_costs(2, 0.0, 3, 3.5);  // the first drafting step: nothing kept
  k.observe(2, 0);
  ASSERT_EQ(k.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(k), AdaptiveK::kProbeAfter) << "not a probe yet";
  k.observe_costs(1, 0.0, 2, 3.5);  // the probe: its draft rejected (p = 0)
  k.observe(1, 0);
  ASSERT_EQ(k.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(k), 125);
  // A probe that keeps its draft still loses: p = 1 / (0.9 * 1.9 + 1) = 0.369, loss =
  // 3.5 - 1.369 = 2.131 plain steps, a bound of 107; the wait between failing probes never
  // shrinks, so 125 again.
  k.observe_costs(1, 0.0, 2, 3.5);
  k.observe(1, 1);
  ASSERT_EQ(k.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(k), 125);
  // A drafter at 0.25 plain steps a draft (3-row steps at 1.5) is priced at that, not at its
  // probe's own drafter time: loss = 0.25 + 3.5 - 1 = 2.75, a wait of 138.
  AdaptiveK dear(o);
  dear.observe_costs(0, 0.0, 1, 1.0);
  dear.observe(0, 0);
  dear.observe_costs(2, 9.0, 3, 1.5);  // the first drafting step (a catch-up, not counted)
  dear.observe(2, 0);
  dear.observe_costs(2, 0.5, 3, 1.5);
  dear.observe(2, 0);
  ASSERT_EQ(dear.k(), 0);
  ASSERT_EQ(plain_steps_until_probe(dear), AdaptiveK::kProbeAfter);
  ASSERT_EQ(dear.k(), 1);
  dear.observe_costs(1, 0.2, 2, 3.5);  // the probe's own drafter time is not what is priced
  dear.observe(1, 0);
  ASSERT_EQ(dear.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(dear), 138);
  // Where a 2-row step costs 1.1 plain steps, a failed probe loses 0.1: the wait stays 16.
  AdaptiveK cheap(o);
  cheap.observe_costs(0, 0.0, 1, 1.0);
  cheap.observe(0, 0);
  cheap.observe_costs(2, 0.0, 3, 3.5);
  cheap.observe(2, 0);
  ASSERT_EQ(plain_steps_until_probe(cheap), AdaptiveK::kProbeAfter);
  ASSERT_EQ(cheap.k(), 1);
  cheap.observe_costs(1, 0.0, 2, 1.1);
  cheap.observe(1, 0);
  ASSERT_EQ(cheap.k(), 0);
  EXPECT_EQ(plain_steps_until_probe(cheap), AdaptiveK::kProbeAfter);
}

// alpha, k, c and v in units of the turn's own plain steps, and E(k) / (k c + v); worked by
// hand: 6 plain steps of 0.2 s, 4 verify steps of 0.3 s with 8 drafts (k = 2) drafted in 0.8 s
// (c = 0.1 / 0.2 = 0.5, v = 1.5), 4 kept (alpha = 0.5): E = 1 + 0.5 + 0.25 = 1.75, and
// 1.75 / (2 * 0.5 + 1.5) = 0.7.
TEST(SpecFigures, AreInUnitsOfAPlainStepAndGiveTheIdealSpeedup) {
  SpecStats st;
  st.steps = 10;
  st.verify_steps = 4;
  st.drafted = 8;
  st.accepted = 4;
  st.draft_seconds = 0.8;
  st.verify_seconds = 1.2;
  st.plain_seconds = 1.2;
  const std::optional<SpecFigures> f = spec_figures(st);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->alpha, 0.5);
  EXPECT_DOUBLE_EQ(f->k, 2.0);
  EXPECT_DOUBLE_EQ(f->c, 0.5);
  EXPECT_DOUBLE_EQ(f->v, 1.5);
  EXPECT_DOUBLE_EQ(f->ideal_speedup, 0.7);
  st.accepted = 8;  // every draft kept: E = k + 1 = 3
  EXPECT_DOUBLE_EQ(spec_figures(st)->ideal_speedup, 3.0 / 2.5);
  st.steps = st.verify_steps;  // no plain step to measure against
  EXPECT_FALSE(spec_figures(st).has_value());
  EXPECT_FALSE(spec_figures(SpecStats{}).has_value());
}

// CostByRows: a width not measured is the widest narrower one measured, else a wider one's
// time per row; repeated measurements of a width are smoothed 0.8 / 0.2.
TEST(CostByRows, PricesUnmeasuredWidthsFromTheNearestMeasuredOnes) {
  CostByRows c;
  EXPECT_EQ(c.at(3), 0.0) << "nothing measured";
  c.add(4, 2.0);
  EXPECT_DOUBLE_EQ(c.at(4), 2.0);
  EXPECT_DOUBLE_EQ(c.at(9), 2.0) << "the widest narrower width";
  EXPECT_DOUBLE_EQ(c.at(2), 1.0) << "a wider width's seconds per row";
  c.add(4, 3.0);
  EXPECT_DOUBLE_EQ(c.at(4), 0.8 * 2.0 + 0.2 * 3.0);
  c.add(1, 0.5);
  EXPECT_DOUBLE_EQ(c.at(2), 0.5);
  c.add(0, 9.0);   // no rows: ignored
  c.add(2, -1.0);  // a negative time: ignored
  EXPECT_DOUBLE_EQ(c.at(2), 0.5);
}

// The executor's form of the measured-cost rule: K maximizes the shared step's tokens per
// second, (S + E(K)) / (K c + v(K)), v(K) = the step's seconds at base rows + K.
TEST(AdaptiveK, InASharedStepKWeighsTheOtherSessionsTokens) {
  SpecOptions o;
  o.draft_max = 4;
  // Steps cost 1 + 0.25 per row beyond the first (1 row: 1, 2: 1.25, ..., 16: 4.75).
  CostByRows steps;
  for (int32_t r = 1; r <= 16; ++r) steps.add(r, 1.0 + 0.25 * (r - 1));
  // Alone (S = 0, base 1 row), a free drafter, every draft kept (p = 1): E(K) = K + 1 and
  // (K + 1) / (1 + 0.25 K) grows with K: K = 4, 5 / 2 = 2.5 tokens per second.
  AdaptiveK alone(o);
  alone.observe_step_costs(2, 0.0, 0.0, steps, 1);
  alone.observe(2, 2);
  EXPECT_EQ(alone.k(), 4);
  EXPECT_DOUBLE_EQ(alone.tokens_per_second(4), 5.0 / 2.0);
  // The same as the single-session rule over forwards of K + 1 rows.
  AdaptiveK single(o);
  for (int32_t r = 1; r <= 5; ++r) single.observe_costs(r - 1, 0.0, r, steps.at(r));
  single.observe(2, 2);
  for (int32_t k = 0; k <= 4; ++k)
    EXPECT_DOUBLE_EQ(single.tokens_per_second(k), alone.tokens_per_second(k)) << "K " << k;
  // Beside 7 other decode sessions (base 8 rows: 2.75), K drafts add 0.25 K to the step of
  // all eight: (7 + K + 1) / (2.75 + 0.25 K) = 8 / 2.75 = 2.91 at K = 0, 9 / 3 = 3 at K = 1,
  // 12 / 3.75 = 3.2 at K = 4: still worth it with every draft kept...
  AdaptiveK shared(o);
  shared.observe_step_costs(2, 0.0, 7.0, steps, 8);
  shared.observe(2, 2);
  EXPECT_EQ(shared.k(), 4);
  EXPECT_DOUBLE_EQ(shared.tokens_per_second(4), 12.0 / 3.75);
  // ...but with half the drafts kept (p = 0.5 after a step that kept 1 of 2 from scratch:
  // kept 1, examined 2), E(1) = 1.5: 8.5 / 3 = 2.83 < 8 / 2.75 = 2.91, and every wider K
  // is lower still: plain decoding. Alone, the same p still pays: 1.5 / 1.25 = 1.2 > 1.
  AdaptiveK half_shared(o), half_alone(o);
  half_shared.observe_step_costs(2, 0.0, 7.0, steps, 8);
  half_shared.observe(2, 1);
  EXPECT_EQ(half_shared.k(), 0);
  EXPECT_DOUBLE_EQ(half_shared.tokens_per_second(1), 8.5 / 3.0);
  half_alone.observe_step_costs(2, 0.0, 0.0, steps, 1);
  half_alone.observe(2, 1);
  EXPECT_GT(half_alone.k(), 0);
  // The acceptance rule ignores costs.
  o.measured_cost = false;
  AdaptiveK by_acceptance(o);
  by_acceptance.observe_step_costs(2, 0.0, 7.0, steps, 8);
  EXPECT_EQ(by_acceptance.tokens_per_second(1), 0.0);
}

}  // namespace
}  // namespace kvcache::engine::testing
