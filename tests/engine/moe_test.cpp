// Mixtures of experts (qwen3moe; llama with experts): what the expert keys and 3-D stacks
// (or older Mixtral files' per-expert tensors) load as in every weight type, the router's top-k and weights, refusals naming the key or
// tensor, the cached forward equal to the no-cache reference, and that only the chosen
// experts are read: changing an expert no token chose changes no logit, decode runs k experts
// per layer and a prefill chunk reads each chosen expert once; the requantized drafter encodes
// every expert; gpt-oss (sinks, YaRN, biases, clamped SwiGLU) cached = reference too; experts
// wide enough to be shared over the pool give bitwise the same logits with 1 and 2 threads,
// and a chunk mixing small (fused) and large (GEMM) expert groups equals the reference. The
// interpretation itself is pinned against the independent Python reference by
// engine_arch_golden_{qwen3moe,llama-moe,gpt-oss}.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/moe.h"
#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

constexpr double kTol = 1e-4;

TinySpec qwen3moe_spec() {
  TinySpec s;
  s.arch = "qwen3moe";
  s.qk_norm = true;
  s.n_expert = 6;
  s.n_expert_used = 2;
  s.d_ff_expert = 32;
  return s;
}

Status load_status(const TinySpec& s) {
  std::vector<uint8_t> bytes = tiny_model_bytes(s);
  Result<gguf::GgufFile> f = gguf::GgufFile::parse(bytes);
  if (!f.ok()) return f.status();
  return Model::load(*f).status();
}

void expect_refused(const TinySpec& s, StatusCode code, const std::string& message) {
  Status st = load_status(s);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(message), std::string::npos) << st.message();
}

TEST(MoeRouting, KeepsTheTopKWithTiesToTheLowerIndexAndRenormalises) {
  // Row 0: logits 3 at experts 1 and 2 tie; the lower index comes first.
  // Row 1: the best two are 2 (e^2) and 0 (e^1).
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f,  //
                                     1.0f, -1.0f, 2.0f, 0.5f};
  std::vector<ExpertChoice> out;
  route_tokens(logits, 2, 4, 2, /*renormalize=*/true, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].expert, 1);
  EXPECT_EQ(out[1].expert, 2);
  EXPECT_FLOAT_EQ(out[0].weight, 0.5f);
  EXPECT_FLOAT_EQ(out[1].weight, 0.5f);
  EXPECT_EQ(out[2].expert, 2);
  EXPECT_EQ(out[3].expert, 0);
  // Renormalised: e^2 / (e^2 + e^1) = 1 / (1 + e^-1).
  EXPECT_FLOAT_EQ(out[2].weight, static_cast<float>(1.0 / (1.0 + std::exp(-1.0))));
  // Without renormalisation the weights are the softmax over all four experts.
  route_tokens(logits, 2, 4, 2, /*renormalize=*/false, out);
  const double all = std::exp(1.0) + std::exp(-1.0) + std::exp(2.0) + std::exp(0.5);
  EXPECT_FLOAT_EQ(out[2].weight, static_cast<float>(std::exp(2.0) / all));
  EXPECT_FLOAT_EQ(out[3].weight, static_cast<float>(std::exp(1.0) / all));
}

TEST(MoeLoad, Qwen3MoeReadsTheExpertKeysAndViewsEachExpert) {
  Model m = tiny_model(qwen3moe_spec());
  const HParams& h = m.hparams();
  EXPECT_EQ(h.n_expert, 6);
  EXPECT_EQ(h.n_expert_used, 2);
  EXPECT_EQ(h.d_ff_expert, 32);  // expert_feed_forward_length, not feed_forward_length (48)
  EXPECT_TRUE(h.expert_weights_norm);
  EXPECT_FALSE(h.rope_interleaved);  // rotate-half, as qwen3
  const LayerWeights& w = m.layers()[0];
  EXPECT_EQ(w.router.rows, 6);
  EXPECT_EQ(w.router.cols, 32);
  ASSERT_EQ(w.gate_exps.size(), 6u);
  EXPECT_EQ(w.gate_exps[5].rows, 32);
  EXPECT_EQ(w.gate_exps[5].cols, 32);
  EXPECT_EQ(w.down_exps[5].rows, 32);
  EXPECT_EQ(w.down_exps[5].cols, 32);
  EXPECT_TRUE(w.w_gate.empty());
  EXPECT_EQ(w.q_norm.size(), 8u);
  // Every expert is a view of its own slice of the stack: consecutive, no copy.
  EXPECT_EQ(w.up_exps[1].bytes.data(), w.up_exps[0].bytes.data() + 32 * 32 * 4);
}

TEST(MoeLoad, LlamaWithExpertsTakesTheWidthFromFeedForwardLength) {
  TinySpec s;
  s.n_expert = 4;
  s.d_ff_expert = 48;  // = d_ff: Mixtral's files carry no expert_feed_forward_length...
  Model m = tiny_model(s);
  EXPECT_EQ(m.hparams().n_expert, 4);
  EXPECT_EQ(m.hparams().d_ff_expert, 48);
  EXPECT_TRUE(m.hparams().rope_interleaved);
  // ...and llama without expert_count is dense.
  Model dense = tiny_model(TinySpec{});
  EXPECT_EQ(dense.hparams().n_expert, 0);
  EXPECT_FALSE(dense.layers()[0].w_gate.empty());
  EXPECT_TRUE(dense.layers()[0].router.empty());
}

TEST(MoeLoad, ExpertViewsAreTheStackSlicesInEveryWeightType) {
  using gguf::TensorType;
  TinySpec s = qwen3moe_spec();
  s.d_model = 256;  // K-type rows are 256 values
  s.d_ff_expert = 256;
  s.n_expert = 3;
  s.layer_cache = {0};
  s.cache_kv_heads = {2};
  s.cache_windows = {0};
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                          TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                          TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kMXFP4}) {
    s.experts_as = type;
    gguf::GgufFile f = tiny_file(s);
    Result<Model> m = Model::load(f);
    ASSERT_TRUE(m.ok()) << gguf::to_string(type) << ": " << m.status().to_string();
    const LayerWeights& w = m->layers()[0];
    EXPECT_EQ(w.down_exps[2].type, type);
    EXPECT_EQ(w.router.type, TensorType::kF32);
    // numpy order [expert, row, col]: expert e's row r starts at (e * 256 + r) * 256.
    const std::vector<float> all = f.tensor_f32("blk.0.ffn_down_exps.weight").value();
    std::vector<float> row(256);
    for (int e = 0; e < 3; ++e)
      for (int r : {0, 131, 255}) {
        w.down_exps[e].row(r, row);
        EXPECT_TRUE(std::equal(row.begin(), row.end(), all.begin() + (e * 256 + r) * 256))
            << gguf::to_string(type) << " expert " << e << " row " << r;
      }
  }
}

// Older Mixtral files store each expert as a 2-D tensor (blk.N.ffn_gate.E.weight) instead of
// the 3-D stacks: the same values give bitwise the same logits (F32 and Q4_K experts), and a
// missing expert is refused by its name.
TEST(MoeLoad, MixtralPerExpertTensorsEqualTheStacks) {
  using gguf::TensorType;
  for (TensorType type : {TensorType::kF32, TensorType::kQ4_K}) {
    TinySpec s;
    s.n_expert = 4;
    s.d_model = 256;
    s.d_ff_expert = 256;
    s.d_ff = 256;
    s.experts_as = type;
    Model stacked = tiny_model(s);
    s.split_experts = true;
    gguf::GgufFile f = tiny_file(s);
    ASSERT_EQ(f.tensor("blk.0.ffn_gate_exps.weight"), nullptr);
    ASSERT_NE(f.tensor("blk.0.ffn_gate.3.weight"), nullptr);
    Result<Model> split = Model::load(f);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    EXPECT_EQ(split->layers()[0].down_exps[3].type, type);
    EXPECT_EQ(split->layers()[0].down_exps.size(), 4u);
    const std::vector<int32_t> tokens = some_tokens(9, stacked.hparams().vocab, 3);
    CacheOptions o;
    o.capacity = 16;
    Built a = build(stacked, o), b = build(*split, o);
    EXPECT_EQ(cached_logits(a, tokens, 4), cached_logits(b, tokens, 4)) << gguf::to_string(type);
  }
  TinySpec s;
  s.n_expert = 4;
  s.split_experts = true;
  s.skip_tensors = {"blk.1.ffn_up.2.weight"};
  expect_refused(s, StatusCode::kNotFound, "tensor blk.1.ffn_up.2.weight is missing");
}

TEST(MoeLoad, RefusalsNameTheKeyOrTensor) {
  TinySpec s = qwen3moe_spec();
  s.n_expert_used = 0;
  expect_refused(s, StatusCode::kInvalidArgument,
                 "load model: qwen3moe.expert_used_count = 0, expected in [1, expert_count = 6]");
  s.n_expert_used = 7;
  expect_refused(s, StatusCode::kInvalidArgument,
                 "qwen3moe.expert_used_count = 7, expected in [1, expert_count = 6]");
  s = qwen3moe_spec();
  s.skip_tensors = {"blk.1.ffn_up_exps.weight"};
  expect_refused(s, StatusCode::kNotFound,
                 "load model: tensor blk.1.ffn_up_exps.weight is missing");
  s.skip_tensors = {"blk.0.ffn_gate_inp.weight"};
  expect_refused(s, StatusCode::kNotFound,
                 "load model: tensor blk.0.ffn_gate_inp.weight is missing");
  s = qwen3moe_spec();
  s.stack_experts = 5;  // a stack of 5 experts where expert_count says 6
  expect_refused(s, StatusCode::kInvalidArgument,
                 "tensor blk.0.ffn_gate_exps.weight has GGUF dims [32, 32, 5], expected "
                 "[32, 32, 6]");
  s = qwen3moe_spec();
  s.extra_ints = {{"expert_gating_func", 2}};
  expect_refused(s, StatusCode::kInvalidArgument,
                 "qwen3moe.expert_gating_func = 2, expected 1 (softmax)");
  s.extra_ints = {{"expert_shared_count", 1}};
  expect_refused(s, StatusCode::kInvalidArgument,
                 "qwen3moe.expert_shared_count = 1, expected 0 (no shared experts)");
  s = qwen3moe_spec();
  s.n_expert = 0;  // qwen3moe without expert_count
  expect_refused(s, StatusCode::kNotFound, "qwen3moe.expert_count");
  s = qwen3moe_spec();
  s.arch = "qwen2moe";  // other mixtures stay refused by name
  expect_refused(s, StatusCode::kInvalidArgument,
                 "general.architecture = \"qwen2moe\" is not supported");
}

TEST(MoeForward, CachedLogitsEqualTheReferenceInBothLayoutsAndChunkSizes) {
  TinySpec llama_moe;
  llama_moe.n_expert = 4;
  TinySpec q8 = qwen3moe_spec();
  q8.experts_as = gguf::TensorType::kQ8_0;
  for (const TinySpec& s : {qwen3moe_spec(), llama_moe, q8}) {
    Model model = tiny_model(s);
    const std::vector<int32_t> tokens = some_tokens(19, model.hparams().vocab, 4);
    for (const char* kind : {"sequence", "cell"})
      for (int chunk : {1, 4}) {
        CacheOptions o;
        o.kind = kind;
        o.capacity = 32;
        Built b = build(model, o);
        std::vector<float> got = cached_logits(b, tokens, chunk);
        // Q8_0 products quantize the activations to int8 blocks too: about 1e-2.
        const double tol = s.experts_as == gguf::TensorType::kQ8_0 ? 5e-2 : kTol;
        EXPECT_LE(rel_diff(got, reference_logits(model, tokens, &b.setup.geometry)), tol)
            << s.arch << " " << gguf::to_string(s.experts_as) << " " << kind << " " << chunk;
      }
  }
}

TinySpec gpt_oss_spec() {
  TinySpec s;
  s.arch = "gpt-oss";
  s.bias = true;
  s.sinks = s.q_heads;
  s.cache_windows = {4, 0, 4};
  s.n_expert = 4;
  s.d_ff_expert = 32;
  s.yarn_factor = 32.0f;
  s.yarn_orig_ctx = 4096;
  s.rope_base = 150000.0f;
  return s;
}

TEST(MoeForward, GptOssCachedLogitsEqualTheReferencePastTheWindowInBothLayouts) {
  Model model = tiny_model(gpt_oss_spec());
  ASSERT_TRUE(model.hparams().gpt_oss);
  ASSERT_FALSE(model.layers()[0].attn_sinks.empty());
  const std::vector<int32_t> tokens = some_tokens(19, model.hparams().vocab, 4);
  for (const char* kind : {"sequence", "cell"})
    for (int chunk : {1, 4}) {
      CacheOptions o;
      o.kind = kind;
      o.capacity = 32;
      Built b = build(model, o);
      std::vector<float> got = cached_logits(b, tokens, chunk);
      EXPECT_LE(rel_diff(got, reference_logits(model, tokens, &b.setup.geometry)), kTol)
          << kind << " " << chunk;
    }
}

TEST(MoeLoad, GptOssRefusesAMissingSinkOrExpertBiasNamingTheTensor) {
  TinySpec s = gpt_oss_spec();
  s.skip_tensors = {"blk.3.attn_sinks.weight"};
  // Layer 3 shares cache layer 1 with layer 1, whose tensor is present: the geometry refuses.
  expect_refused(s, StatusCode::kInvalidArgument, "blk.3.attn_sinks.weight is absent");
  s.skip_tensors = {"blk.0.attn_sinks.weight"};
  expect_refused(s, StatusCode::kNotFound, "tensor blk.0.attn_sinks.weight is missing");
  s.skip_tensors = {"blk.2.ffn_up_exps.bias"};
  expect_refused(s, StatusCode::kNotFound, "tensor blk.2.ffn_up_exps.bias is missing");
  s.skip_tensors = {"blk.1.post_attention_norm.weight"};
  expect_refused(s, StatusCode::kNotFound, "tensor blk.1.post_attention_norm.weight is missing");
}

TEST(MoeForward, RequantizedDrafterEncodesEveryExpertAndKeepsTheRouter) {
  Model model = tiny_model(qwen3moe_spec());
  Result<Model> q8 = model.requantized(gguf::TensorType::kQ8_0);
  ASSERT_TRUE(q8.ok()) << q8.status().to_string();
  const LayerWeights& w = q8->layers()[1];
  for (const std::vector<kernels::Weight>* stack : {&w.gate_exps, &w.up_exps, &w.down_exps})
    for (const kernels::Weight& e : *stack) EXPECT_EQ(e.type, gguf::TensorType::kQ8_0);
  EXPECT_EQ(w.router.type, gguf::TensorType::kF32);
  EXPECT_EQ(q8->n_params(), model.n_params());
  // Q8_0 experts (and int8 activations) move the logits by about 1e-2 of their scale.
  CacheOptions o;
  o.capacity = 32;
  Built b = build(*q8, o);
  const std::vector<int32_t> tokens = some_tokens(9, 260, 6);
  EXPECT_LE(rel_diff(cached_logits(b, tokens, 3), reference_logits(model, tokens)), 5e-2);
}

// Logits of every token of `tokens` through the sequence layout in chunks of 4, and which
// experts of layer 0 any token chose.
std::vector<float> run(const Model& model, std::span<const int32_t> tokens,
                       std::set<int32_t>* layer0_chosen = nullptr) {
  CacheOptions o;
  o.capacity = 32;
  Built b = build(model, o);
  std::vector<float> logits = cached_logits(b, tokens, 4);
  const MoeStats& st = b.engine->moe_stats();
  if (layer0_chosen != nullptr)
    for (int32_t e = 0; e < model.hparams().n_expert; ++e)
      if (st.tokens[e] > 0) layer0_chosen->insert(e);
  return logits;
}

TEST(MoeForward, AnExpertNoTokenChoseChangesNothingAndAChosenOneChangesTheLogits) {
  TinySpec s = qwen3moe_spec();
  s.n_expert = 16;
  const std::vector<int32_t> tokens = some_tokens(5, 260, 9);
  std::set<int32_t> chosen;
  const std::vector<float> base = run(tiny_model(s), tokens, &chosen);
  // 5 tokens choose at most 10 of 16 experts in layer 0.
  int32_t unused = 0, used = *chosen.begin();
  while (chosen.count(unused) > 0) ++unused;
  ASSERT_LT(unused, 16);
  auto scale_expert = [&](int32_t expert) {
    return [expert](const std::string& name, std::vector<float>& v) {
      if (name.rfind("blk.0.ffn_", 0) != 0 || name.find("_exps.") == std::string::npos) return;
      const size_t per = v.size() / 16;  // one expert's slice of the stack
      for (size_t i = expert * per; i < (expert + 1) * per; ++i) v[i] *= 5.0f;
    };
  };
  s.edit = scale_expert(unused);
  EXPECT_EQ(run(tiny_model(s), tokens), base) << "expert " << unused << " was not chosen";
  s.edit = scale_expert(used);
  const std::vector<float> changed = run(tiny_model(s), tokens);
  double worst = 0.0;
  for (size_t i = 0; i < base.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(changed[i] - base[i])));
  EXPECT_GT(worst, 1e-2) << "expert " << used << " was chosen";
}

TEST(MoeForward, DecodeReadsKExpertsPerLayerAndAChunkReadsEachChosenExpertOnce) {
  Model model = tiny_model(qwen3moe_spec());
  const HParams& h = model.hparams();
  CacheOptions o;
  o.capacity = 32;
  Built b = build(model, o);
  // The tiny geometry's Sliding(4) layer makes 4 the widest step.
  const std::vector<int32_t> tokens = some_tokens(4, h.vocab, 2);
  (void)cached_logits(b, tokens, 4);  // one chunk of 4 tokens
  const MoeStats& st = b.engine->moe_stats();
  int64_t distinct = 0, routed = 0;
  for (int64_t v : st.tokens) {
    distinct += v > 0 ? 1 : 0;
    routed += v;
  }
  EXPECT_EQ(routed, int64_t{4} * 2 * h.n_layers);  // every token to 2 experts in every layer
  EXPECT_EQ(st.expert_runs, distinct);             // each chosen expert read once
  const int64_t per_expert = 3 * 32 * 32 * 4;      // gate, up, down: 32 x 32 f32
  EXPECT_EQ(st.expert_bytes, distinct * per_expert);
  b.engine->reset_moe_stats();
  (void)cached_logits(b, std::vector<int32_t>{7}, 1);  // one decode step
  EXPECT_EQ(b.engine->moe_stats().expert_runs, int64_t{2} * h.n_layers);
  EXPECT_EQ(b.engine->moe_stats().expert_bytes, int64_t{2} * h.n_layers * per_expert);
  EXPECT_EQ(b.engine->moe_stats().router_bytes, int64_t{h.n_layers} * 6 * 32 * 4);
}

// Experts wide enough that moe_ffn shares their rows over the pool (d 256, width 512: a
// decode's gate and up rows are 2 x 2 x 512 x 256 = 524288 multiply-adds, past 2^15). The
// dense matrices are F16: the output product of a 4-token chunk (4 x 260 x 256 multiply-adds)
// is shared over the pool too, and F16 rows, unlike BLAS's F32 ranges, never depend on the split.
TinySpec wide_experts_spec(gguf::TensorType type) {
  TinySpec s = qwen3moe_spec();
  s.d_model = 256;  // one K-type super-block
  s.d_ff_expert = 512;
  s.experts_as = type;
  s.store_as = gguf::TensorType::kF16;
  return s;
}

// The work items of a step's experts are fixed by the shapes, never by the thread count, and
// the outputs are added in ascending expert order: decode (groups of one token) and chunks of 4
// (groups of up to 4) give the same bits on 1 and 2 threads, F32 (BLAS on row ranges) included.
TEST(MoeForward, LogitsAreBitwiseTheSameWithOneAndTwoThreads) {
  using gguf::TensorType;
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                          TensorType::kQ4_K, TensorType::kMXFP4}) {
    Model model = tiny_model(wide_experts_spec(type));
    const std::vector<int32_t> tokens = some_tokens(12, model.hparams().vocab, 5);
    const std::vector<double> want = reference_logits(model, tokens);
    for (int chunk : {1, 4}) {
      std::vector<float> got[2];
      for (int threads : {1, 2}) {
        cpu::set_global_threads(threads);
        CacheOptions o;
        o.capacity = 32;
        Built b = build(model, o);
        got[threads - 1] = cached_logits(b, tokens, chunk);
      }
      EXPECT_EQ(got[0], got[1]) << gguf::to_string(type) << " chunk " << chunk;
      // Int8 activations (block types) can flip a near tie of the router against the f64
      // reference; their accuracy is the test above's. Unquantized experts match it.
      if (!kernels::product_quantizes(type)) {
        EXPECT_LE(rel_diff(got[1], want), kTol) << gguf::to_string(type) << " chunk " << chunk;
      }
    }
  }
  cpu::set_global_threads(2);
}

// A chunk of 40 tokens over 2 of 4 experts routes 80 choices: groups of more than kSmallBatch
// (16) tokens run alone with the GEMM, smaller ones fused; the sum is the reference's.
TEST(MoeForward, AChunkMixingSmallAndLargeExpertGroupsEqualsTheReference) {
  using gguf::TensorType;
  for (TensorType type : {TensorType::kF32, TensorType::kQ8_0}) {
    TinySpec s = wide_experts_spec(type);
    s.n_expert = 4;
    s.cache_windows = {0, 0, 0};  // no sliding layer: the chunk may be wider than 4
    s.max_step_tokens = 40;
    Model model = tiny_model(s);
    const std::vector<int32_t> tokens = some_tokens(40, model.hparams().vocab, 11);
    CacheOptions o;
    o.capacity = 48;
    o.max_step_tokens = 40;
    Built b = build(model, o);
    const std::vector<float> got = cached_logits(b, tokens, 40);
    const MoeStats& st = b.engine->moe_stats();
    int64_t large = 0, small = 0;
    for (int64_t n : st.tokens) {  // one step: tokens per (layer, expert) = its group's size
      if (n > kernels::kSmallBatch) ++large;
      else if (n > 0) ++small;
    }
    EXPECT_GT(large, 0) << "no expert group took more than kSmallBatch tokens";
    EXPECT_GT(small, 0) << "every expert group took more than kSmallBatch tokens";
    // Q8_0 experts quantize the activations to int8 blocks too: about 1e-2.
    const double tol = type == TensorType::kQ8_0 ? 5e-2 : kTol;
    EXPECT_LE(rel_diff(got, reference_logits(model, tokens)), tol) << gguf::to_string(type);
  }
}

}  // namespace
}  // namespace kvcache::engine::testing
