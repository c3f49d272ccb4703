// Constrained decoding in the batching executor on the embedded tiny model (byte tokens):
// every completion of a request with a grammar is a whole document of it and stops there,
// forks (n > 1) and sessions under different schemas in one batch each keep their own
// state, and a preempted session resumes where its grammar was (same text as without
// pressure). Layer: tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "serve_test_util.h"
#include "text/grammar_matcher.h"
#include "text/json_schema.h"

namespace kvcache::serve::testing {
namespace {

constexpr const char* kRecord =
    R"({"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":999},
        "kind":{"enum":["cat","dog"]},"name":{"type":"string","minLength":1,"maxLength":6},
        "ok":{"type":"boolean"}},"required":["id","kind","name"],"additionalProperties":false})";
constexpr const char* kList =
    R"({"type":"array","items":{"type":"integer","minimum":-5,"maximum":5},"minItems":2,"maxItems":4})";

std::shared_ptr<const text::Grammar> grammar(const char* schema) {
  auto g = text::compile_json_schema(schema);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

bool is_document(const std::shared_ptr<const text::Grammar>& g, const std::string& text) {
  text::GrammarMatcher m(g);
  const text::GrammarState s = m.advance(m.start(), text);
  return s != text::kDeadState && m.complete(s);
}

TEST(ExecutorGrammar, EveryCompletionIsAWholeDocumentAndStopsThere) {
  ExecutorOptions o;
  o.max_sessions = 8;
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  const auto record = grammar(kRecord), list = grammar(kList);
  GenerateParams a;
  a.max_new_tokens = 120;
  a.n = 3;
  a.sampling.temperature = 1.0f;
  a.sampling.seed = 5;
  a.grammar = record;
  GenerateParams b = a;
  b.n = 1;
  b.grammar = list;
  GenerateParams free_text;
  free_text.max_new_tokens = 20;
  const int64_t ra = *ex->submit(ids("A record: "), a);
  const int64_t rb = *ex->submit(ids("A list: "), b);
  const int64_t rf = *ex->submit(ids("Free: "), free_text);
  auto results = drain(*ex);
  ASSERT_EQ(results.at(ra).completions.size(), 3u);
  for (const Completion& c : results.at(ra).completions) {
    EXPECT_TRUE(is_document(record, c.text)) << c.text;
    EXPECT_EQ(c.finish, Finish::kStop) << c.text;
    EXPECT_EQ(c.text.front(), '{');
  }
  EXPECT_NE(results.at(ra).completions[0].text, results.at(ra).completions[1].text);
  const Completion& l = results.at(rb).completions[0];
  EXPECT_TRUE(is_document(list, l.text)) << l.text;
  EXPECT_EQ(l.finish, Finish::kStop);
  // The free request beside them is untouched: what it generates alone.
  EXPECT_EQ(results.at(rf).completions[0].tokens, alone(ids("Free: "), 20));
}

TEST(ExecutorGrammar, APreemptedSessionResumesItsGrammarWhereItWas) {
  const auto record = grammar(R"({"type":"object","properties":{"k":{"enum":["cat","dog"]},
      "n":{"type":"integer","minimum":0,"maximum":99}},"required":["k","n"],
      "additionalProperties":false})");  // at most 20 bytes
  GenerateParams p;
  p.max_new_tokens = 30;
  p.grammar = record;  // greedy: the text is a function of the prompt
  const std::vector<std::string> prompts = {
      "In the beginning God created the heaven and the earth. And the earth was", "Blessed are",
      "The LORD is my shepherd; I shall not want.", "And God said, Let there be light"};
  auto run = [&](std::optional<int64_t> pool) {
    ExecutorOptions o;
    o.max_sessions = 4;
    o.max_session_tokens = 128;
    o.pool_cells = pool;
    auto ex = make(o);
    std::vector<int64_t> id;
    for (const std::string& s : prompts) id.push_back(*ex->submit(ids(s), p));
    auto results = drain(*ex);
    std::vector<std::string> texts;
    for (int64_t i : id) texts.push_back(results.at(i).completions[0].text);
    return std::make_pair(texts, ex->stats().preemptions);
  };
  const auto [calm, none] = run(std::nullopt);
  const auto [tight, preempted] = run(130);  // 4 sessions of 40..103 tokens in 130 cells
  EXPECT_EQ(none, 0);
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(tight, calm);
  for (const std::string& t : calm) EXPECT_TRUE(is_document(record, t)) << t;
}

TEST(ExecutorLogits, ABiasOfMinus100BansEveryTokenOfTheFreeAnswer) {
  const std::vector<int32_t> prompt = ids("In the beginning God created");
  const std::vector<int32_t> free_answer = alone(prompt, 16);
  GenerateParams p;
  p.max_new_tokens = 16;
  for (int32_t t : std::set<int32_t>(free_answer.begin(), free_answer.end()))
    p.logit_bias.emplace_back(t, -100.0f);
  auto ex = make(ExecutorOptions{});
  const int64_t id = *ex->submit(prompt, p);
  const std::vector<int32_t> got = drain(*ex).at(id).completions[0].tokens;
  ASSERT_EQ(got.size(), 16u);
  for (int32_t t : got)
    EXPECT_EQ(std::count(free_answer.begin(), free_answer.end(), t), 0) << "token " << t;
}

TEST(ExecutorLogits, PenaltiesActOnlyOnTokensAlreadyGenerated) {
  const std::vector<int32_t> prompt = ids("And God said, Let there be light");
  const std::vector<int32_t> free_answer = alone(prompt, 24);
  ASSERT_LT(std::set<int32_t>(free_answer.begin(), free_answer.end()).size(), free_answer.size())
      << "the greedy answer repeats a token (else no penalty applies)";
  for (bool presence : {true, false}) {
    GenerateParams p;
    p.max_new_tokens = 24;
    (presence ? p.presence_penalty : p.frequency_penalty) = 2.0f;
    auto ex = make(ExecutorOptions{});
    const int64_t id = *ex->submit(prompt, p);
    const std::vector<int32_t> got = drain(*ex).at(id).completions[0].tokens;
    EXPECT_EQ(got[0], free_answer[0]);  // nothing generated yet: nothing penalized
    EXPECT_NE(got, free_answer);
  }
  GenerateParams bad;
  bad.presence_penalty = 99.0f;
  auto ex = make(ExecutorOptions{});
  Result<int64_t> r = ex->submit(prompt, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "request: presence_penalty = 99, expected in [-2, 2]");
  bad.presence_penalty = 0.0f;
  bad.logit_bias = {{300, 1.0f}};
  EXPECT_EQ(ex->submit(prompt, bad).status().message(),
            "request: logit_bias 300 = 1, expected a token id in [0, 256) and a bias in [-100, 100]");
}

// The prompt's next-token logits by a plain forward (sequence layout, f32 K/V, in chunks of
// the model's step).
std::vector<float> next_logits(const std::vector<int32_t>& prompt) {
  auto run = engine::build_engine(tiny(), engine::CacheOptions{});
  EXPECT_TRUE(run.ok()) << run.status().to_string();
  engine::Logits out;
  const size_t step = static_cast<size_t>(run->setup.step_tokens);
  for (size_t from = 0; from < prompt.size(); from += step) {
    const size_t n = std::min(step, prompt.size() - from);
    std::vector<int32_t> toks(prompt.begin() + from, prompt.begin() + from + n), seq(n, 0);
    std::vector<int64_t> pos(n);
    for (size_t i = 0; i < n; ++i) pos[i] = static_cast<int64_t>(from + i);
    Status st = run->engine->forward({toks, seq, pos}, engine::LogitsMode::kLast, out);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  return out.data;
}

double log_softmax_at(const std::vector<float>& row, int32_t id, double t) {
  double mx = -1e300, sum = 0.0;
  for (float v : row) mx = std::max(mx, v / t);
  for (float v : row) sum += std::exp(v / t - mx);
  return row[static_cast<size_t>(id)] / t - mx - std::log(sum);
}

TEST(ExecutorLogits, LogprobsAreTheLogSoftmaxOfTheDistributionSampledFrom) {
  const std::vector<int32_t> prompt = ids("In the beginning God created");
  const std::vector<float> row = next_logits(prompt);
  ASSERT_EQ(row.size(), 256u);
  for (float temperature : {0.7f, 0.0f}) {  // greedy reports the model's own (t = 1)
    GenerateParams p;
    p.max_new_tokens = 6;
    p.logprobs = 3;
    p.sampling.temperature = temperature;
    p.sampling.seed = 5;
    auto ex = make(ExecutorOptions{});
    const int64_t id = *ex->submit(prompt, p);
    const Completion c = drain(*ex).at(id).completions[0];
    ASSERT_EQ(c.logprobs.size(), c.tokens.size());
    const double t = temperature > 0.0f ? temperature : 1.0;
    const engine::TokenLogprob& first = c.logprobs[0];
    EXPECT_EQ(first.token, c.tokens[0]);
    EXPECT_NEAR(first.logprob, log_softmax_at(row, first.token, t), 1e-3);
    std::vector<int32_t> order(row.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ASSERT_EQ(first.top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(first.top[k].first, order[k]) << k;
      EXPECT_NEAR(first.top[k].second, log_softmax_at(row, order[k], t), 1e-3) << k;
    }
    if (temperature == 0.0f) {
      EXPECT_EQ(first.token, order[0]);  // greedy took the top one
    }
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      EXPECT_EQ(c.logprobs[i].token, c.tokens[i]);
      EXPECT_LE(c.logprobs[i].logprob, 0.0f);
      EXPECT_GE(c.logprobs[i].top[0].second, c.logprobs[i].top[1].second);
      EXPECT_GE(c.logprobs[i].top[1].second, c.logprobs[i].top[2].second);
    }
  }
}

TEST(ExecutorLogits, LogprobsUnderAGrammarListOnlyAllowedTokens) {
  const std::shared_ptr<const text::Grammar> list = grammar(kList);
  GenerateParams p;
  p.max_new_tokens = 40;
  p.logprobs = 5;
  p.grammar = list;
  auto ex = make(ExecutorOptions{});
  const int64_t id = *ex->submit(ids("Numbers: "), p);
  const Completion c = drain(*ex).at(id).completions[0];
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  text::GrammarMatcher m(list);
  text::GrammarState s = m.start();
  double first_mass = 0.0;
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    for (const auto& [alt, lp] : c.logprobs[i].top) {
      const std::string byte(1, static_cast<char>(alt));
      EXPECT_NE(m.advance(s, byte), text::kDeadState) << "token " << alt << " at " << i;
      if (i == 0) first_mass += std::exp(lp);
    }
    s = m.advance(s, std::string(1, static_cast<char>(c.tokens[i])));
    ASSERT_NE(s, text::kDeadState);
  }
  // The first token of a list is '[' alone: all the mass is on it.
  EXPECT_NEAR(first_mass, 1.0, 1e-5);
  EXPECT_EQ(c.logprobs[0].top.size(), 1u);
  GenerateParams bad;
  bad.logprobs = 21;
  EXPECT_EQ(ex->submit(ids("x"), bad).status().message(),
            "request: logprobs = 21, expected -1 (none) or 0..20 alternatives");
}

TEST(ExecutorGrammar, RequestsWithTheSameGrammarShareOneMatcher) {
  auto ex = make(ExecutorOptions{});
  GenerateParams p;
  p.max_new_tokens = 30;
  p.grammar = grammar(kList);
  EXPECT_EQ(grammar(kList), p.grammar);  // the same schema text compiles to the same grammar
  GenerateParams q = p;
  q.grammar = text::json_object_grammar();
  for (const GenerateParams* g : {&p, &q, &p})
    ASSERT_TRUE(ex->submit(ids("x"), *g).ok());
  EXPECT_EQ(ex->stats().grammar_matchers, 2);
  drain(*ex);
  EXPECT_EQ(ex->stats().grammar_matchers, 2);  // kept for the next requests
}

TEST(ExecutorGrammar, AGrammarWithoutATokenizerIsRefused) {
  auto ex = Executor::create(tiny(), nullptr, ExecutorOptions{});
  ASSERT_TRUE(ex.ok());
  GenerateParams p;
  p.grammar = text::json_object_grammar();
  Result<int64_t> r = (*ex)->submit(ids("x"), p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "request: a grammar needs the executor's tokenizer (token bytes)");
  EXPECT_TRUE((*ex)->idle());
}

}  // namespace
}  // namespace kvcache::serve::testing
