// `kvcache quantize` plans and output: the _M mixes' higher-precision tensors, vectors and
// routers kept f32, expert stacks by their dense names, row-length fallbacks, metadata copied with general.file_type set, and quantized or
// unknown-type inputs refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "program/gguf.h"
#include "program/gguf_quant.h"
#include "program/gguf_quantize.h"

namespace kvcache::gguf {
namespace {

// An 8-layer model's tensor set (values irrelevant to the plan), row length 256.
std::vector<uint8_t> eight_layer_file(bool tied, TensorType matrices = TensorType::kF16) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", 8);
  w.set_string("tokenizer.ggml.model", "gpt2");
  auto add = [&](const std::string& name, std::vector<int64_t> dims, TensorType t) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
    ASSERT_TRUE(w.add_tensor_f32(name, dims, v, t).ok()) << name;
  };
  add("token_embd.weight", {256, 64}, matrices);
  for (int i = 0; i < 8; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {256}, TensorType::kF16);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"})
      add(p + m + ".weight", {256, 32}, matrices);
    add(p + "ffn_down.weight", {96, 256}, matrices);  // row length 96: no K-quant block fits
  }
  add("output_norm.weight", {256}, TensorType::kF32);
  if (!tied) add("output.weight", {256, 64}, matrices);
  add("odd.weight", {100, 2}, matrices);  // fits no block type at all
  return w.bytes();
}

TensorType planned(const std::vector<TensorPlan>& plans, const std::string& name) {
  for (const TensorPlan& p : plans)
    if (p.name == name) return p.to;
  ADD_FAILURE() << name << " has no plan";
  return TensorType::kF32;
}

TEST(GgufQuantize, Q4KMKeepsOutputAndHalfTheValueProjectionsAtQ6K) {
  GgufFile f = GgufFile::parse(eight_layer_file(/*tied=*/false)).value();
  std::vector<TensorPlan> plans = plan_quantization(f, QuantMix::kQ4_K_M).value();
  EXPECT_EQ(planned(plans, "output.weight"), TensorType::kQ6_K);
  EXPECT_EQ(planned(plans, "token_embd.weight"), TensorType::kQ4_K);
  EXPECT_EQ(planned(plans, "blk.1.attn_q.weight"), TensorType::kQ4_K);
  EXPECT_EQ(planned(plans, "blk.0.attn_norm.weight"), TensorType::kF32);  // F16 vector -> F32
  // 8 layers: the first and last eighth (0, 7) and every third between (3, 6).
  for (int i = 0; i < 8; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    EXPECT_EQ(planned(plans, "blk." + std::to_string(i) + ".attn_v.weight"),
              more ? TensorType::kQ6_K : TensorType::kQ4_K) << i;
    // ffn_down rows of 96 fit no K block: Q8_0 whatever the mix wanted.
    EXPECT_EQ(planned(plans, "blk." + std::to_string(i) + ".ffn_down.weight"),
              TensorType::kQ8_0) << i;
  }
  EXPECT_EQ(planned(plans, "odd.weight"), TensorType::kF16);  // 100: not even Q8_0's 32
}

TEST(GgufQuantize, TiedEmbeddingIsTheOutputAndQ8_0QuantizesEveryMatrixAlike) {
  GgufFile f = GgufFile::parse(eight_layer_file(/*tied=*/true)).value();
  std::vector<TensorPlan> m = plan_quantization(f, QuantMix::kQ5_K_M).value();
  EXPECT_EQ(planned(m, "token_embd.weight"), TensorType::kQ6_K);
  EXPECT_EQ(planned(m, "blk.2.attn_v.weight"), TensorType::kQ5_K);
  std::vector<TensorPlan> q8 = plan_quantization(f, QuantMix::kQ8_0).value();
  EXPECT_EQ(planned(q8, "token_embd.weight"), TensorType::kQ8_0);
  EXPECT_EQ(planned(q8, "blk.0.attn_v.weight"), TensorType::kQ8_0);
  EXPECT_EQ(planned(q8, "blk.0.ffn_down.weight"), TensorType::kQ8_0);
}

// A mixture of experts of `experts` experts per block, 8 blocks, F16, rows of 256.
std::vector<uint8_t> moe_file(int64_t experts) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n), 0.25f);
    ASSERT_TRUE(w.add_tensor_f32(name, dims, v, TensorType::kF16).ok()) << name;
  };
  add("token_embd.weight", {256, 8});
  for (int i = 0; i < 8; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "ffn_norm.weight", {256});
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
      add(p + m + ".weight", {256, 256});
    add(p + "ffn_gate_inp.weight", {256, experts});
    add(p + "ffn_gate_exps.weight", {256, 256, experts});
    add(p + "ffn_up_exps.weight", {256, 256, experts});
    add(p + "ffn_down_exps.weight", {256, 256, experts});
  }
  add("output.weight", {256, 8});
  return w.bytes();
}

TEST(GgufQuantize, MixturesKeepTheRouterF32AndQuantizeExpertStacksByTheirDenseNames) {
  GgufFile f = GgufFile::parse(moe_file(4)).value();
  std::vector<TensorPlan> plans = plan_quantization(f, QuantMix::kQ4_K_M).value();
  for (int i = 0; i < 8; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(planned(plans, p + "ffn_gate_inp.weight"), TensorType::kF32) << i;
    EXPECT_EQ(planned(plans, p + "ffn_norm.weight"), TensorType::kF32) << i;
    EXPECT_EQ(planned(plans, p + "ffn_gate_exps.weight"), TensorType::kQ4_K) << i;
    // The down stacks take ffn_down's extra bits on layers 0, 3, 6 and 7.
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    EXPECT_EQ(planned(plans, p + "ffn_down_exps.weight"),
              more ? TensorType::kQ6_K : TensorType::kQ4_K) << i;
    EXPECT_EQ(planned(plans, p + "attn_k.weight"), TensorType::kQ4_K) << i;
  }
  // Eight experts: K and V (small beside the experts) get Q8_0 in every mix.
  GgufFile eight = GgufFile::parse(moe_file(8)).value();
  for (QuantMix mix : {QuantMix::kQ4_0, QuantMix::kQ4_K_M}) {
    std::vector<TensorPlan> p8 = plan_quantization(eight, mix).value();
    EXPECT_EQ(planned(p8, "blk.2.attn_v.weight"), TensorType::kQ8_0);
    EXPECT_EQ(planned(p8, "blk.2.attn_k.weight"), TensorType::kQ8_0);
    EXPECT_EQ(planned(p8, "blk.2.attn_q.weight"), mix == QuantMix::kQ4_0 ? TensorType::kQ4_0
                                                                          : TensorType::kQ4_K);
  }
  // The stacks are encoded row by row: each expert's slice decodes near its input.
  GgufWriter out;
  ASSERT_TRUE(quantize_model(f, QuantMix::kQ8_0, out).ok());
  GgufFile q = GgufFile::parse(out.bytes()).value();
  const TensorInfo* up = q.tensor("blk.5.ffn_up_exps.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->type, TensorType::kQ8_0);
  EXPECT_EQ(up->dims, (std::vector<int64_t>{256, 256, 4}));
  EXPECT_EQ(q.tensor("blk.5.ffn_gate_inp.weight")->type, TensorType::kF32);
  const std::vector<float> v = q.tensor_f32("blk.5.ffn_up_exps.weight").value();
  ASSERT_EQ(v.size(), 256u * 256u * 4u);
  EXPECT_NEAR(v.back(), 0.25f, 1e-3f);
}

TEST(GgufQuantize, OutputCopiesMetadataSetsTheFileTypeAndDecodesCloseToTheInput) {
  GgufFile f = GgufFile::parse(eight_layer_file(false, TensorType::kF32)).value();
  GgufWriter w;
  QuantizeReport r = quantize_model(f, QuantMix::kQ4_K_M, w).value();
  GgufFile g = GgufFile::parse(w.bytes()).value();
  EXPECT_EQ(g.get_string("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(g.get_int("llama.block_count").value(), 8);
  EXPECT_EQ(g.get_int("general.file_type").value(), 15);  // MOSTLY_Q4_K_M
  EXPECT_EQ(g.tensors().size(), f.tensors().size());
  EXPECT_EQ(g.tensor("blk.3.attn_v.weight")->type, TensorType::kQ6_K);
  // 8 attn_norm + output_norm; 4 attn_v + output at Q6_K; 8 ffn_down at Q8_0; odd at F16.
  EXPECT_EQ(r.tensors_by_type[TensorType::kF32], 9);
  EXPECT_EQ(r.tensors_by_type[TensorType::kQ6_K], 5);
  EXPECT_EQ(r.tensors_by_type[TensorType::kQ8_0], 8);
  EXPECT_EQ(r.tensors_by_type[TensorType::kF16], 1);
  EXPECT_EQ(r.fallbacks, 9);
  const std::vector<float> a = f.tensor_f32("blk.5.attn_q.weight").value();
  const std::vector<float> b = g.tensor_f32("blk.5.attn_q.weight").value();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 0.02) << i;  // max |x| 0.08
}

TEST(GgufQuantize, QuantizedOrUnknownInputsAreRefusedNamingTheTensor) {
  GgufFile f = GgufFile::parse(eight_layer_file(false)).value();
  GgufWriter once;
  ASSERT_TRUE(quantize_model(f, QuantMix::kQ8_0, once).ok());
  GgufFile q = GgufFile::parse(once.bytes()).value();
  GgufWriter twice;
  Result<QuantizeReport> again = quantize_model(q, QuantMix::kQ4_0, twice);
  ASSERT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("tensor 'token_embd.weight' is already Q8_0"),
            std::string::npos) << again.status().message();
  EXPECT_TRUE(twice.bytes().size() < 64);  // untouched: an empty writer's header only
  EXPECT_EQ(parse_quant_mix("q4_k_m"), QuantMix::kQ4_K_M);
  EXPECT_FALSE(parse_quant_mix("q4_k_s").has_value());
}

// mxfp4: every matrix MXFP4 (ffn_down's rows of 96 are three 32-value blocks: no fallback),
// the output Q8_0, odd rows F16; file type 38. An expert stack [in, out, experts] is a matrix
// too: it keeps its three dimensions and decodes within MXFP4's error of the input. An MXFP4
// file is already quantized: refused, naming the tensor and its type.
TEST(GgufQuantize, Mxfp4EncodesEveryMatrixButTheOutputAndKeepsExpertStacksWhole) {
  GgufFile f = GgufFile::parse(eight_layer_file(/*tied=*/false)).value();
  std::vector<TensorPlan> plans = plan_quantization(f, QuantMix::kMxfp4).value();
  EXPECT_EQ(planned(plans, "output.weight"), TensorType::kQ8_0);
  EXPECT_EQ(planned(plans, "token_embd.weight"), TensorType::kMXFP4);
  EXPECT_EQ(planned(plans, "blk.3.attn_v.weight"), TensorType::kMXFP4);
  EXPECT_EQ(planned(plans, "blk.3.ffn_down.weight"), TensorType::kMXFP4);
  EXPECT_EQ(planned(plans, "blk.0.attn_norm.weight"), TensorType::kF32);
  EXPECT_EQ(planned(plans, "odd.weight"), TensorType::kF16);
  EXPECT_EQ(parse_quant_mix("mxfp4"), QuantMix::kMxfp4);
  EXPECT_EQ(file_type_of(QuantMix::kMxfp4), 38u);

  GgufWriter src;
  src.set_string("general.architecture", "llama");
  std::vector<float> experts(64 * 32 * 4);
  for (size_t i = 0; i < experts.size(); ++i) experts[i] = std::sin(0.05f * static_cast<float>(i));
  ASSERT_TRUE(src.add_tensor_f32("blk.0.ffn_up_exps.weight", {64, 32, 4}, experts,
                                 TensorType::kF32).ok());
  GgufFile in = GgufFile::parse(src.bytes()).value();
  GgufWriter w;
  QuantizeReport r = quantize_model(in, QuantMix::kMxfp4, w).value();
  EXPECT_EQ(r.tensors_by_type[TensorType::kMXFP4], 1);
  EXPECT_EQ(r.bytes_out, 128u * 2 * 17);  // 128 rows of two blocks
  GgufFile g = GgufFile::parse(w.bytes()).value();
  const TensorInfo* t = g.tensor("blk.0.ffn_up_exps.weight");
  EXPECT_EQ(t->type, TensorType::kMXFP4);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 32, 4}));
  const std::vector<float> back = g.tensor_f32(t->name).value();
  ASSERT_EQ(back.size(), experts.size());
  for (size_t i = 0; i < back.size(); ++i) ASSERT_NEAR(back[i], experts[i], 0.5) << i;
  GgufWriter twice;
  Result<QuantizeReport> again = quantize_model(g, QuantMix::kQ8_0, twice);
  ASSERT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("tensor 'blk.0.ffn_up_exps.weight' is already MXFP4"),
            std::string::npos) << again.status().message();
}

}  // namespace
}  // namespace kvcache::gguf
