// Speculative decoding in the batching executor on the embedded tiny model (sliding(32) layers
// and a KV-shared one): greedy output with drafting equals running alone without it, drafting
// and plain sessions share steps, the counters are exact where the drafts are known (an
// oracle drafter keeps everything, a contrary one nothing and adaptive K falls to 0 and
// probes), the cache and the prefix index keep no rejected token.
#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/session.h"
#include "engine/speculative.h"
#include "serve/executor.h"
#include "serve_test_util.h"
#include "text/json_schema.h"

namespace kvcache::serve {
namespace {

using testing::alone;
using testing::drain;
using testing::ids;
using testing::make;
using testing::tiny;

const std::vector<std::string> kPrompts = {
    "the cat sat on the mat. the dog sat on the log. the cat sat on the",
    "In the beginning God created the heaven and the earth. And the earth was",
    "And God said, Let there be light",
    "one two three one two three one two three one two",
    "The LORD is my shepherd; I shall not want.",
    "abcabcabcabcabcabcabcabc",
};

ExecutorOptions ngram_options(int32_t k = 8) {
  ExecutorOptions o;
  o.make_drafter = [](const DraftRoom&) -> Result<std::unique_ptr<engine::Drafter>> {
    return std::unique_ptr<engine::Drafter>(std::make_unique<engine::NgramDrafter>(3));
  };
  o.spec.draft_max = k;
  o.spec.measured_cost = false;  // widths that do not depend on timing (tests opt in)
  return o;
}

// Proposes the greedy continuation `alone()` produces (shifted by `wrong`, mod 256, to make
// every draft a wrong one), whatever the context holds so far.
class OracleDrafter final : public engine::Drafter {
 public:
  OracleDrafter(std::vector<int32_t> full, int32_t wrong) : full_(std::move(full)), wrong_(wrong) {}
  Status propose(std::span<const int32_t> context, int32_t k, engine::Draft& out) override {
    out.clear();
    for (size_t i = context.size(); i < full_.size() && out.tokens.size() < size_t(k); ++i)
      out.tokens.push_back((full_[i] + wrong_) % 256);
    return ok_status();
  }
  std::string name() const override { return "oracle"; }

 private:
  std::vector<int32_t> full_;  // prompt + the greedy continuation
  int32_t wrong_;
};

ExecutorOptions oracle_options(const std::vector<int32_t>& full, int32_t wrong, int32_t k) {
  ExecutorOptions o;
  o.make_drafter = [full, wrong](const DraftRoom&) -> Result<std::unique_ptr<engine::Drafter>> {
    return std::unique_ptr<engine::Drafter>(std::make_unique<OracleDrafter>(full, wrong));
  };
  o.spec.draft_max = k;
  o.spec.measured_cost = false;  // the acceptance rule: widths that do not depend on timing
  return o;
}

struct DraftMix {
  int32_t max_sessions;
  bool prefix_cache;
  int64_t pool_cells;  // 0 = the default
  int32_t draft_max;
  bool measured = false;  // adaptive K's measured-cost rule (else the acceptance rule)
};

void PrintTo(const DraftMix& m, std::ostream* os) {  // stable test names (no padding bytes)
  *os << m.max_sessions << "_sessions_prefix" << m.prefix_cache << "_pool" << m.pool_cells << "_k"
      << m.draft_max << (m.measured ? "_measured" : "");
}

class GreedyDrafting : public ::testing::TestWithParam<DraftMix> {};

TEST_P(GreedyDrafting, EveryRequestEqualsRunningItAloneWithoutDrafts) {
  const DraftMix mix = GetParam();
  constexpr int32_t kNew = 60;  // prompt + 60 runs past the 32-token windows
  ExecutorOptions o = ngram_options(mix.draft_max);
  o.spec.measured_cost = mix.measured;
  o.max_sessions = mix.max_sessions;
  o.prefix_cache = mix.prefix_cache;
  if (mix.pool_cells > 0) o.pool_cells = mix.pool_cells;
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  const int64_t empty_free = ex->cache().free_cells();
  std::map<int64_t, size_t> which;
  GenerateParams p;
  p.max_new_tokens = kNew;
  for (size_t i = 0; i < kPrompts.size(); ++i) which[*ex->submit(ids(kPrompts[i]), p)] = i;
  auto results = drain(*ex);
  ASSERT_EQ(results.size(), kPrompts.size());
  int64_t drafted = 0, accepted = 0, steps = 0;
  for (const auto& [id, r] : results) {
    const size_t i = which.at(id);
    EXPECT_EQ(r.completions[0].tokens, alone(ids(kPrompts[i]), kNew)) << "prompt " << i;
    EXPECT_EQ(r.completions[0].finish, Finish::kLength);
    drafted += r.completions[0].draft.drafted;
    accepted += r.completions[0].draft.accepted;
    steps += r.completions[0].draft.steps;
  }
  const ExecutorStats s = ex->stats();
  EXPECT_EQ(s.draft_tokens, drafted);
  EXPECT_EQ(s.draft_accepted, accepted);
  EXPECT_EQ(s.draft_steps, steps);
  // Under the measured-cost rule the widths follow the step timings (K may rest at 0 where a
  // row costs more than the drafts yield), so only the acceptance rule must keep drafts.
  if (!mix.measured) {
    EXPECT_GT(s.draft_accepted, 0) << "repetitive prompts keep some n-gram drafts";
  }
  // Every token the cache holds was fed once (no preemption here): each prompt token as prefill,
  // from the pool, or — when a step leaves exactly one prompt token — as a decode token, and
  // every generated token but the last as a decode token. Every decode step keeps 1 + accepted
  // drafts.
  if (s.preemptions == 0) {
    int64_t fed = 0;
    for (const std::string& prompt : kPrompts)
      fed += static_cast<int64_t>(ids(prompt).size()) + kNew - 1;
    EXPECT_EQ(s.prefill_tokens + s.prefix_hit_tokens + s.decode_tokens, fed);
    EXPECT_EQ(steps + accepted, s.decode_tokens);
    // A session's first token comes from its prompt's row, or — with the prefix cache on this
    // sliding-window model, a prompt of more than one 16-token block is fed up to its last
    // token and snapshotted — from a step that feeds the last prompt token like a decode token.
    // Under the acceptance rule the steps do not depend on timing and no other split happens;
    // under the measured rule the drafts' share of a step may cut a prompt one token short.
    if (!mix.measured) {
      int64_t want = 0;
      for (const std::string& prompt : kPrompts)
        want += kNew - 1 + (mix.prefix_cache && prompt.size() - 1 >= 16 ? 1 : 0);
      EXPECT_EQ(s.decode_tokens, want);
    }
  }
  if (mix.pool_cells > 0) {
    EXPECT_GT(s.preemptions, 0);
  }
  ex->clear_prefix_cache();
  EXPECT_EQ(ex->cache().free_cells(), empty_free) << "no cell of a rejected draft is left";
}

INSTANTIATE_TEST_SUITE_P(Mixes, GreedyDrafting,
                         ::testing::Values(DraftMix{1, true, 0, 8}, DraftMix{3, false, 0, 4},
                                           DraftMix{6, true, 0, 8}, DraftMix{6, true, 0, 15},
                                           DraftMix{6, false, 300, 8},
                                           DraftMix{1, true, 0, 8, true},
                                           DraftMix{3, false, 0, 4, true},
                                           DraftMix{6, false, 300, 8, true}));

TEST(ExecutorDrafting, DraftingAndPlainSessionsShareSteps) {
  constexpr int32_t kNew = 48;
  ExecutorOptions o = ngram_options();
  o.max_sessions = 4;
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  std::map<int64_t, size_t> which;
  for (size_t i = 0; i < 4; ++i) {
    GenerateParams p;
    p.max_new_tokens = kNew;
    p.draft = i % 2 == 0;  // requests 0 and 2 draft, 1 and 3 decode plainly
    which[*ex->submit(ids(kPrompts[i]), p)] = i;
  }
  auto results = drain(*ex);
  ASSERT_EQ(results.size(), 4u);
  for (const auto& [id, r] : results) {
    const size_t i = which.at(id);
    const Completion& c = r.completions[0];
    EXPECT_EQ(c.tokens, alone(ids(kPrompts[i]), kNew)) << "prompt " << i;
    if (i % 2 == 0) {  // + 1: the last prompt token is fed as a decode step (see above)
      EXPECT_EQ(c.draft.steps + c.draft.accepted, kNew) << "prompt " << i;
      EXPECT_GT(c.draft.drafted, 0) << "prompt " << i;
    } else {
      EXPECT_EQ(c.draft.steps, 0) << "prompt " << i;
      EXPECT_EQ(c.draft.drafted, 0) << "prompt " << i;
    }
  }
  EXPECT_EQ(ex->stats().peak_running, 4) << "all four ran in the same steps";
}

// The executor and a session on the acceptance rule (`kvcache run` chooses K from measured
// costs instead) apply one rule (AdaptiveK, accept_drafts) with one drafter, so alone in the
// executor a request drafts and keeps exactly what that session does.
TEST(ExecutorDrafting, CountersEqualRunsOnARepetitivePrompt) {
  constexpr int32_t kNew = 80;
  const std::vector<int32_t> prompt = ids(kPrompts[0]);
  auto run = engine::build_engine(tiny(), engine::CacheOptions{});
  ASSERT_TRUE(run.ok());
  engine::Session session(*run->engine, run->setup.step_tokens);
  engine::NgramDrafter ngram(3);
  engine::SpecOptions spec;
  spec.draft_max = 8;
  spec.measured_cost = false;
  ASSERT_TRUE(session.set_drafter(&ngram, spec).ok());
  engine::Sampler sampler(engine::SamplerConfig{});
  auto st = session.turn(prompt, kNew, sampler);
  ASSERT_TRUE(st.ok());

  ExecutorOptions o = ngram_options(8);
  o.prefix_cache = false;  // the prompt prefilled whole, as run does
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  GenerateParams p;
  p.max_new_tokens = kNew;
  const int64_t id = *ex->submit(prompt, p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions[0];
  EXPECT_EQ(c.tokens, st->generated);
  EXPECT_EQ(c.draft.drafted, st->spec.drafted);
  EXPECT_EQ(c.draft.accepted, st->spec.accepted);
  EXPECT_EQ(c.draft.steps, st->spec.steps);
  EXPECT_GT(c.draft.accepted, 20) << "the prompt repeats itself";
}

TEST(ExecutorDrafting, AnOracleDrafterKeepsEveryDraftAndTheCountersAreExact) {
  constexpr int32_t kNew = 20;
  const std::vector<int32_t> prompt = ids(kPrompts[1]);
  std::vector<int32_t> full = prompt;
  const std::vector<int32_t> want = alone(prompt, kNew);
  full.insert(full.end(), want.begin(), want.end());
  ExecutorOptions o = oracle_options(full, 0, 4);
  o.prefix_cache = false;  // the prompt prefilled whole: its row gives token 1
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  GenerateParams p;
  p.max_new_tokens = kNew;
  const int64_t id = *ex->submit(prompt, p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions[0];
  EXPECT_EQ(c.tokens, want);
  // Token 1 comes from the prompt's row; then steps of 4 drafts keep 5 tokens each (1 -> 6 ->
  // 11 -> 16), and the last step drafts 3 (20 - 16 - 1) and keeps 4.
  EXPECT_EQ(c.draft.steps, 4);
  EXPECT_EQ(c.draft.drafted, 15);
  EXPECT_EQ(c.draft.accepted, 15);
  EXPECT_EQ(ex->stats().decode_tokens, kNew - 1);
}

TEST(ExecutorDrafting, AContraryDrafterFallsToPlainDecodingAndProbes) {
  constexpr int32_t kNew = 40;
  const std::vector<int32_t> prompt = ids(kPrompts[2]);
  std::vector<int32_t> full = prompt;
  const std::vector<int32_t> want = alone(prompt, kNew);
  full.insert(full.end(), want.begin(), want.end());
  auto ex = make(oracle_options(full, 1, 4));  // every draft is the greedy token + 1
  ASSERT_NE(ex, nullptr);
  GenerateParams p;
  p.max_new_tokens = kNew;
  const int64_t id = *ex->submit(prompt, p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions[0];
  EXPECT_EQ(c.tokens, want);
  // The 32-token prompt is fed to its last token, which then goes as a decode step (prefix
  // cache on a sliding-window model), so all 40 tokens come from decode steps of one token:
  // K 4 -> 2 -> 1 -> 0 (drafts 4, 2, 1 rejected), 16 plain steps, a 1-draft probe (rejected,
  // back to 0), 16 plain, a second probe, 3 plain: 9 drafts.
  EXPECT_EQ(c.draft.steps, kNew);
  EXPECT_EQ(c.draft.drafted, 4 + 2 + 1 + 1 + 1);
  EXPECT_EQ(c.draft.accepted, 0);
  // The retained sequence holds the prompt and the generated tokens but the last (pending):
  // no rejected draft in the cache or the index.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), want.begin(), want.end());
  auto snap = ex->export_prefix(all);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  EXPECT_EQ(snap->positions, int64_t(prompt.size()) + kNew - 1);
}

// Sampled requests draft too (the speculative-sampling rule, tested for its distribution in
// tests/engine/speculative_test.cpp): the same requests and seeds repeat their completions.
// (Another mix may give another draw: the draft widths, hence the draws, follow the budget.)
TEST(ExecutorDrafting, SampledRequestsDraftAndASeedRepeatsItsCompletion) {
  auto run = [](int32_t sessions) {
    ExecutorOptions o = ngram_options();
    o.max_sessions = sessions;
    auto ex = make(o);
    std::vector<int64_t> order;
    for (size_t i = 0; i < 3; ++i) {
      GenerateParams p;
      p.max_new_tokens = 50;
      p.sampling.temperature = 0.7f;
      p.sampling.seed = 11 + i;
      order.push_back(*ex->submit(ids(kPrompts[i]), p));
    }
    auto results = drain(*ex);
    std::vector<Completion> out;
    for (int64_t id : order) out.push_back(results.at(id).completions[0]);
    return out;
  };
  const std::vector<Completion> a = run(3), b = run(3);
  int64_t accepted = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    EXPECT_EQ(a[i].tokens.size(), 50u);
    EXPECT_EQ(a[i].draft.accepted, b[i].draft.accepted) << "prompt " << i;
    accepted += a[i].draft.accepted;
  }
  EXPECT_GT(accepted, 0);
}

std::shared_ptr<const text::Grammar> cat_list() {
  auto g = text::compile_json_schema(
      R"({"type":"array","items":{"enum":["the cat sat on the mat","a dog"]},)"
      R"("minItems":3,"maxItems":5})");
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

// The same tokens and alternatives; logprobs within 1e-4 (a verification row comes from a
// forward of k + 1 rows, a plain one from a single row: the logits differ in the last bits).
void expect_same_logprobs(const Completion& a, const Completion& b) {
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(a.logprobs[i].token, b.logprobs[i].token) << "token " << i;
    EXPECT_NEAR(a.logprobs[i].logprob, b.logprobs[i].logprob, 1e-4) << "token " << i;
    ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size()) << "token " << i;
    for (size_t k = 0; k < a.logprobs[i].top.size(); ++k) {
      EXPECT_EQ(a.logprobs[i].top[k].first, b.logprobs[i].top[k].first) << "token " << i;
      EXPECT_NEAR(a.logprobs[i].top[k].second, b.logprobs[i].top[k].second, 1e-4) << "token " << i;
    }
  }
}

// Requests whose draws are shaped draft too: each verification row gets the grammar's mask,
// the bias and the penalties as they stand after the drafts before it, and a kept draft's
// logprob comes from its row. Greedy, the text and logprobs must be what the same request
// gives without a drafter. The list's items are forced by its enum, so n-gram drafts of the
// second item on are kept.
TEST(ExecutorDrafting, GrammarBiasPenaltiesAndLogprobsDraftAndEqualPlainDecoding) {
  const auto list = cat_list();
  std::vector<GenerateParams> params(5);
  params[0].grammar = list;
  params[1].logit_bias = {{'e', -2.0f}, {' ', 1.5f}};
  params[1].presence_penalty = 0.6f;
  params[1].frequency_penalty = 0.4f;
  params[2] = params[1];
  params[2].grammar = list;
  params[3].logprobs = 2;
  params[4] = params[2];
  params[4].logprobs = 3;
  for (GenerateParams& p : params) p.max_new_tokens = 70;
  auto run = [&](ExecutorOptions o) {
    o.max_sessions = 5;
    auto ex = make(o);
    std::vector<int64_t> order;
    for (size_t i = 0; i < params.size(); ++i)
      order.push_back(*ex->submit(ids(kPrompts[i % 2 == 0 ? 0 : 3]), params[i]));
    auto results = drain(*ex);
    std::vector<Completion> out;
    for (int64_t id : order) out.push_back(results.at(id).completions[0]);
    return out;
  };
  const std::vector<Completion> drafted = run(ngram_options(8)), plain = run(ExecutorOptions{});
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(drafted[i].tokens, plain[i].tokens);
    EXPECT_EQ(drafted[i].text, plain[i].text);
    EXPECT_EQ(plain[i].draft.steps, 0);
    EXPECT_GT(drafted[i].draft.steps, 0);
    expect_same_logprobs(drafted[i], plain[i]);
  }
  EXPECT_EQ(drafted[0].text.front(), '[');
  EXPECT_EQ(drafted[0].finish, Finish::kStop) << drafted[0].text;
  EXPECT_GT(drafted[0].draft.accepted, 10) << drafted[0].text;
  EXPECT_GT(drafted[2].draft.accepted, 10) << drafted[2].text;
  EXPECT_EQ(drafted[3].logprobs.size(), 70u);
  EXPECT_EQ(drafted[3].logprobs[5].top.size(), 2u);
  EXPECT_EQ(drafted[4].logprobs.size(), drafted[4].tokens.size());
}

// A lazy grammar (off until its trigger appears in the text) switching on at a kept draft: the
// rows after that draft were drawn unmasked, so the draft is held and the next step draws under
// the grammar. An oracle proposes the whole plain completion (the trigger, then the list), so
// drafts span the switch; the text must equal plain decoding's.
TEST(ExecutorDrafting, ALazyGrammarSwitchingOnInsideADraftKeepsNoUnmaskedToken) {
  GenerateParams p;
  p.max_new_tokens = 60;
  p.grammar = cat_list();
  p.grammar_trigger = "[";
  p.logit_bias = {{'[', 20.0f}};  // the free text soon writes the trigger
  const std::vector<int32_t> prompt = ids(kPrompts[1]);
  ExecutorOptions plain_options;
  plain_options.prefix_cache = false;
  auto plain_ex = make(plain_options);
  const int64_t pid = *plain_ex->submit(prompt, p);
  const Completion plain = drain(*plain_ex).at(pid).completions[0];
  const size_t at = plain.text.find('[');
  ASSERT_NE(at, std::string::npos) << plain.text;
  ASSERT_GT(at, 0u) << "the trigger comes after some free text: " << plain.text;
  EXPECT_EQ(plain.finish, Finish::kStop) << plain.text;

  std::vector<int32_t> full = prompt;
  full.insert(full.end(), plain.tokens.begin(), plain.tokens.end());
  ExecutorOptions o = oracle_options(full, 0, 8);
  o.prefix_cache = false;
  auto ex = make(o);
  const int64_t id = *ex->submit(prompt, p);
  const Completion drafted = drain(*ex).at(id).completions[0];
  EXPECT_EQ(drafted.tokens, plain.tokens);
  EXPECT_EQ(drafted.text, plain.text);
  EXPECT_GT(drafted.draft.accepted, 10);
}

TEST(ExecutorDrafting, RefusesADraftWidthTheStepCannotHold) {
  ExecutorOptions o = ngram_options(64);  // the embedded model's step is 32 (its window)
  auto ex = Executor::create(tiny(), &testing::bytes_tokenizer(), o);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ex.status().message().find("draft_max = 64"), std::string::npos)
      << ex.status().message();
  ExecutorOptions d = ngram_options(0);  // the default: min(8, step - 1)
  auto ok = make(d);
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->spec().draft_max, 8);
}

}  // namespace
}  // namespace kvcache::serve
