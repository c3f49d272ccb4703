// Hugging Face import: config.json parsing (geometry + hyperparameters), the safetensors
// reader (single, sharded, malformed) and export of a tiny checkpoint to GGUF.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "program/hf_import.h"
#include "program/safetensors.h"
#include "test_util.h"

namespace kvcache {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

StTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  StTensor t{std::move(name), "F32", std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<uint8_t> make_safetensors(const std::vector<StTensor>& ts) {
  json header = json::object();
  uint64_t off = 0;
  for (const auto& t : ts) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  const std::string h = header.dump();
  std::vector<uint8_t> b(8 + h.size() + off);
  testing::poke<uint64_t>(b, 0, h.size());
  std::memcpy(b.data() + 8, h.data(), h.size());
  size_t at = 8 + h.size();
  for (const auto& t : ts) {
    if (!t.data.empty()) std::memcpy(b.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return b;
}

std::vector<int32_t> windows(const ModelGeometry& g) {
  std::vector<int32_t> out;
  for (const auto& l : g.cache.layers) out.push_back(l.window);
  return out;
}

// ---- config.json ---------------------------------------------------------------------------

TEST(HfConfig, LlamaDefaultsHeadDimAndKvHeads) {
  auto c = hf::parse_config(json{{"model_type", "llama"}, {"hidden_size", 64},
                                 {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                 {"intermediate_size", 128}, {"rope_theta", 500000.0},
                                 {"rms_norm_eps", 1e-5}, {"max_position_embeddings", 2048},
                                 {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->arch, "llama");
  EXPECT_EQ(c->head_dim, 16);     // 64 / 4
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_linear_factor, 2.0);
  EXPECT_EQ(c->geometry.cache.layers[0], (LayerGeometry{4, 16, 16, 0}));
  EXPECT_EQ(c->geometry.max_context, 2048);
}

TEST(HfConfig, Qwen3KeepsAnExplicitHeadDim) {
  auto c = hf::parse_config(json{{"model_type", "qwen3"}, {"hidden_size", 64},
                                 {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2}, {"head_dim", 32},
                                 {"sliding_window", nullptr}, {"use_sliding_window", false},
                                 {"layer_types", {"full_attention", "full_attention"}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->head_dim, 32);  // != 64 / 4
  EXPECT_EQ(c->geometry.cache.layers[1], (LayerGeometry{2, 32, 32, 0}));
}

TEST(HfConfig, Gemma3TextConfigSlidesEveryLayerButEachSixth) {
  auto c = hf::parse_config(json{
      {"model_type", "gemma3"},
      {"text_config", {{"model_type", "gemma3_text"}, {"hidden_size", 1152},
                       {"num_hidden_layers", 26}, {"num_attention_heads", 4},
                       {"num_key_value_heads", 1}, {"head_dim", 256}, {"sliding_window", 512},
                       {"sliding_window_pattern", 6}}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model_type, "gemma3_text");
  EXPECT_TRUE(c->arch.empty());  // parses, but does not export
  const auto w = windows(c->geometry);
  ASSERT_EQ(w.size(), 26u);
  for (size_t i = 0; i < 26; ++i) EXPECT_EQ(w[i], (i + 1) % 6 == 0 ? 0 : 512) << i;
}

TEST(HfConfig, Gemma3nSharesTheLastFifteenLayers) {
  json types = json::array();
  for (int i = 0; i < 35; ++i) types.push_back((i + 1) % 5 == 0 ? "full_attention" : "sliding_attention");
  auto c = hf::parse_config(json{
      {"model_type", "gemma3n"},
      {"text_config", {{"model_type", "gemma3n_text"}, {"hidden_size", 2048},
                       {"num_hidden_layers", 35}, {"num_attention_heads", 8},
                       {"num_key_value_heads", 2}, {"head_dim", 256}, {"sliding_window", 512},
                       {"layer_types", types}, {"num_kv_shared_layers", 15}}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const auto& g = c->geometry;
  ASSERT_EQ(g.cache.layers.size(), 20u);
  ASSERT_EQ(g.layer_cache.size(), 35u);
  for (int32_t i = 20; i < 35; ++i)
    EXPECT_EQ(g.layer_cache[i], (i + 1) % 5 == 0 ? 19 : 18) << "layer " << i;
  EXPECT_EQ(g.cache.layers[19].window, 0);
  EXPECT_EQ(g.cache.layers[18].window, 512);
}

TEST(HfConfig, ZeroSharedLayersKeepsEveryLayer) {
  auto c = hf::parse_config(json{{"model_type", "gemma3n_text"}, {"hidden_size", 64},
                                 {"num_hidden_layers", 5}, {"num_attention_heads", 2},
                                 {"sliding_window", 16}, {"num_kv_shared_layers", 0},
                                 {"layer_types", {"sliding_attention", "sliding_attention",
                                                  "sliding_attention", "sliding_attention",
                                                  "full_attention"}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->geometry.cache.layers.size(), 5u);
  EXPECT_EQ(windows(c->geometry), (std::vector<int32_t>{16, 16, 16, 16, 0}));
  EXPECT_EQ(c->geometry.layer_cache, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(HfConfig, MistralV01SlidesOnEveryLayerAndQwen2WithSlidingOffDoesNot) {
  json mistral = {{"model_type", "mistral"}, {"hidden_size", 64}, {"num_hidden_layers", 3},
                  {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"sliding_window", 4096}};
  auto m = hf::parse_config(mistral);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(windows(m->geometry), (std::vector<int32_t>{4096, 4096, 4096}));
  EXPECT_EQ(m->arch, "llama");
  json qwen2 = {{"model_type", "qwen2"}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                {"num_attention_heads", 4}, {"sliding_window", 32768},
                {"use_sliding_window", false}, {"max_window_layers", 28}};
  auto q = hf::parse_config(qwen2);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(windows(q->geometry), (std::vector<int32_t>{0, 0}));
}

TEST(HfConfig, MalformedConfigsNameTheField) {
  auto missing = hf::parse_config(json{{"hidden_size", 64}, {"num_hidden_layers", 2}});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("num_attention_heads"), std::string::npos);
  auto types = hf::parse_config(json{{"hidden_size", 64}, {"num_hidden_layers", 2},
                                     {"num_attention_heads", 4}, {"sliding_window", 8},
                                     {"layer_types", {"full_attention"}}});
  EXPECT_NE(types.status().message().find("layer_types"), std::string::npos);
  auto weird = hf::parse_config(json{{"hidden_size", 64}, {"num_hidden_layers", 1},
                                     {"num_attention_heads", 4}, {"sliding_window", 8},
                                     {"layer_types", {"linear_attention"}}});
  EXPECT_NE(weird.status().message().find("layer_types[0]"), std::string::npos);
  auto neg = hf::parse_config(json{{"hidden_size", 64}, {"num_hidden_layers", 2},
                                   {"num_attention_heads", -4}});
  EXPECT_NE(neg.status().message().find("num_attention_heads\" = -4"), std::string::npos);
  auto too_many = hf::parse_config(json{{"hidden_size", 64}, {"num_hidden_layers", 2},
                                        {"num_attention_heads", 4}, {"num_kv_shared_layers", 2}});
  EXPECT_NE(too_many.status().message().find("num_kv_shared_layers = 2"), std::string::npos);
}

// ---- safetensors -----------------------------------------------------------------------------

TEST(Safetensors, SingleFileConvertsF32F16AndBf16) {
  StTensor h{"h", "F16", {2}, {0x00, 0x3C, 0x00, 0xC0}};   // 1.0, -2.0
  StTensor b{"b", "BF16", {1}, {0xC0, 0x3F}};              // 1.5
  auto bytes = make_safetensors({f32_tensor("f", {2, 2}, {1, 2, 3, 4}), h, b});
  auto f = safetensors::SafetensorsFile::parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(*safetensors::to_f32(*f->find("f")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(*safetensors::to_f32(*f->find("h")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(*safetensors::to_f32(*f->find("b")), (std::vector<float>{1.5f}));
  EXPECT_EQ(f->find("f")->shape, (std::vector<int64_t>{2, 2}));
}

TEST(Safetensors, MalformedHeadersAreRefused) {
  auto good = make_safetensors({f32_tensor("f", {2}, {1, 2})});
  auto past = good;
  testing::poke<uint64_t>(past, 0, 1ull << 50);
  EXPECT_EQ(safetensors::SafetensorsFile::parse(past).status().code(), StatusCode::kDataLoss);
  auto not_json = good;
  not_json[8] = '[';
  EXPECT_EQ(safetensors::SafetensorsFile::parse(not_json).status().code(),
            StatusCode::kInvalidArgument);
  StTensor lying{"x", "F32", {3}, std::vector<uint8_t>(8)};  // 3 floats need 12 bytes
  auto mismatch = safetensors::SafetensorsFile::parse(make_safetensors({lying}));
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("'x'"), std::string::npos);
  auto truncated = good;
  truncated.resize(truncated.size() - 1);
  EXPECT_EQ(safetensors::SafetensorsFile::parse(truncated).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(safetensors::SafetensorsFile::parse(std::vector<uint8_t>(5)).status().code(),
            StatusCode::kDataLoss);
  StTensor ints{"i", "I64", {1}, std::vector<uint8_t>(8)};
  auto f = safetensors::SafetensorsFile::parse(make_safetensors({ints}));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(safetensors::to_f32(*f->find("i")).status().code(), StatusCode::kInvalidArgument);
}

TEST(Safetensors, ShardedCheckpointFindsEveryTensor) {
  auto dir = testing::temp_dir("sharded");
  testing::write_file(dir / "a.safetensors", make_safetensors({f32_tensor("x", {1}, {7})}));
  testing::write_file(dir / "b.safetensors", make_safetensors({f32_tensor("y", {2}, {8, 9})}));
  testing::write_text(dir / "model.safetensors.index.json",
                      R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  auto ck = safetensors::Checkpoint::open(dir.string());
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(*safetensors::to_f32(*ck->find("y")), (std::vector<float>{8, 9}));
  testing::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"x": "../a.safetensors"}})");
  EXPECT_EQ(safetensors::Checkpoint::open(dir.string()).status().code(),
            StatusCode::kInvalidArgument);
  testing::write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "c.safetensors"}})");
  EXPECT_EQ(safetensors::Checkpoint::open(dir.string()).status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
  EXPECT_EQ(safetensors::Checkpoint::open(dir.string()).status().code(), StatusCode::kNotFound);
}

// ---- export ----------------------------------------------------------------------------------

// Row r, column c of a [rows, cols] HF weight holds 100 * r + c, so rows are recognisable.
std::vector<float> labelled(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v.push_back(static_cast<float>(100 * r + c));
  return v;
}

// A 1-layer model: hidden 8, 2 q heads, 1 kv head, head_dim 4, ffn 6, vocab 5.
fs::path tiny_checkpoint(const std::string& name, const std::string& model_type, bool tied) {
  auto dir = testing::temp_dir(name);
  testing::write_text(dir / "config.json",
                      json{{"model_type", model_type}, {"hidden_size", 8}, {"num_hidden_layers", 1},
                           {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                           {"intermediate_size", 6}, {"vocab_size", 5},
                           {"tie_word_embeddings", tied}, {"max_position_embeddings", 128}}
                          .dump());
  const std::string l = "model.layers.0.";
  std::vector<StTensor> ts = {
      f32_tensor("model.embed_tokens.weight", {5, 8}, labelled(5, 8)),
      f32_tensor(l + "input_layernorm.weight", {8}, labelled(8, 1)),
      f32_tensor(l + "self_attn.q_proj.weight", {8, 8}, labelled(8, 8)),
      f32_tensor(l + "self_attn.k_proj.weight", {4, 8}, labelled(4, 8)),
      f32_tensor(l + "self_attn.k_proj.bias", {4}, labelled(4, 1)),
      f32_tensor(l + "self_attn.v_proj.weight", {4, 8}, labelled(4, 8)),
      f32_tensor(l + "self_attn.o_proj.weight", {8, 8}, labelled(8, 8)),
      f32_tensor(l + "post_attention_layernorm.weight", {8}, labelled(8, 1)),
      f32_tensor(l + "mlp.gate_proj.weight", {6, 8}, labelled(6, 8)),
      f32_tensor(l + "mlp.up_proj.weight", {6, 8}, labelled(6, 8)),
      f32_tensor(l + "mlp.down_proj.weight", {8, 6}, labelled(8, 6)),
      f32_tensor("model.norm.weight", {8}, labelled(8, 1)),
      f32_tensor("lm_head.weight", {5, 8}, labelled(5, 8)),
  };
  testing::write_file(dir / "model.safetensors", make_safetensors(ts));
  return dir;
}

TEST(HfExport, PermutationMovesRotateHalfRowsToInterleavedPairs) {
  // One head of width 4: out rows (0, 1, 2, 3) = in rows (0, 2, 1, 3).
  EXPECT_EQ(hf::permute_rope_rows({0, 1, 2, 3}, 1, 4, 1), (std::vector<float>{0, 2, 1, 3}));
  // Two heads of width 4, two columns.
  auto out = hf::permute_rope_rows(labelled(8, 2), 2, 4, 2);
  EXPECT_EQ(out[2 * 1 + 0], 200.0f);  // row 1 <- row 2
  EXPECT_EQ(out[2 * 5 + 1], 601.0f);  // row 5 <- row 6, column 1
}

TEST(HfExport, LlamaCheckpointExportsNamesKeysAndPermutedQK) {
  auto dir = tiny_checkpoint("export_llama", "llama", false);
  gguf::GgufWriter w;
  auto r = hf::export_hf_to_writer(dir.string(), gguf::TensorType::kF32, w);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->n_tensors, 13);
  auto f = gguf::GgufFile::parse(w.bytes());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.block_count"), 1);
  EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 1);
  EXPECT_EQ(*f->get_int("llama.context_length"), 128);
  auto g = read_model_geometry(*f);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->cache.layers[0], (LayerGeometry{1, 4, 4, 0}));
  EXPECT_EQ(g->max_context, 128);
  // q: GGUF dims [in, out]; row order permuted within each head: rows (0,2,1,3,4,6,5,7).
  const gguf::TensorInfo* q = f->tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<int64_t>{8, 8}));
  auto qv = *f->tensor_f32("blk.0.attn_q.weight");
  const int expect_rows[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r2 = 0; r2 < 8; ++r2) EXPECT_EQ(qv[r2 * 8 + 3], static_cast<float>(100 * expect_rows[r2] + 3)) << r2;
  auto kv = *f->tensor_f32("blk.0.attn_k.weight");
  EXPECT_EQ(kv[1 * 8], 200.0f);  // k row 1 <- HF row 2
  EXPECT_EQ(*f->tensor_f32("blk.0.attn_k.bias"), (std::vector<float>{0, 200, 100, 300}));
  auto vv = *f->tensor_f32("blk.0.attn_v.weight");
  EXPECT_EQ(vv[1 * 8], 100.0f);  // v is not permuted
  EXPECT_NE(f->tensor("output.weight"), nullptr);
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->dims, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(f->find("tokenizer.ggml.model"), nullptr);  // no tokenizer.json
  fs::remove_all(dir);
}

TEST(HfExport, Qwen2KeepsRotateHalfAndTiedEmbeddingsDropTheOutput) {
  auto dir = tiny_checkpoint("export_qwen", "qwen2", true);
  testing::write_text(dir / "tokenizer.json", json{
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", 4}, {"content", "<eos>"}}}}}.dump());
  const auto out = dir / "out.gguf";
  hf::ExportOptions o;
  o.hf_dir = dir.string();
  o.out_path = out.string();
  o.dtype = gguf::TensorType::kF16;
  auto r = hf::export_hf(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->tokenizer);
  auto f = gguf::GgufFile::open(out.string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f->tensor("output.weight"), nullptr);
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight")->type, gguf::TensorType::kF16);
  EXPECT_EQ(f->tensor("blk.0.attn_norm.weight")->type, gguf::TensorType::kF32);
  auto kv = *f->tensor_f32("blk.0.attn_k.weight");
  EXPECT_EQ(kv[1 * 8], 100.0f);  // no permutation for qwen
  EXPECT_EQ(*f->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"a", "b", "ab", "[PAD3]", "<eos>"}));
  EXPECT_EQ(*f->get_string_array("tokenizer.ggml.merges"), (std::vector<std::string>{"a b"}));
  fs::remove_all(dir);
}

TEST(HfExport, MissingTensorsWrongShapesAndUnsupportedModelsAreRefused) {
  auto dir = tiny_checkpoint("export_bad", "llama", false);
  testing::write_file(dir / "model.safetensors",
                      make_safetensors({f32_tensor("model.embed_tokens.weight", {5, 8}, labelled(5, 8))}));
  gguf::GgufWriter w;
  auto missing = hf::export_hf_to_writer(dir.string(), gguf::TensorType::kF32, w);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.layers.0.input_layernorm.weight"), std::string::npos);
  testing::write_file(dir / "model.safetensors",
                      make_safetensors({f32_tensor("model.embed_tokens.weight", {4, 8}, labelled(4, 8))}));
  gguf::GgufWriter v;
  auto shape = hf::export_hf_to_writer(dir.string(), gguf::TensorType::kF32, v);
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("expected [5, 8]"), std::string::npos);
  testing::write_text(dir / "config.json", json{{"model_type", "gemma3_text"}, {"hidden_size", 8},
                                               {"num_hidden_layers", 1}, {"num_attention_heads", 2}}
                                               .dump());
  gguf::GgufWriter u;
  auto unsupported = hf::export_hf_to_writer(dir.string(), gguf::TensorType::kF32, u);
  EXPECT_NE(unsupported.status().message().find("gemma3_text"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvcache

// ---- export hardening ------------------------------------------------------------------------

namespace kvcache {
namespace {

hf::ExportOptions options_for(const fs::path& dir, const fs::path& out) {
  hf::ExportOptions o;
  o.hf_dir = dir.string();
  o.out_path = out.string();
  return o;
}

TEST(HfExportHardening, AnUnsupportedTokenizerIsRefusedNotDropped) {
  auto dir = tiny_checkpoint("export_unigram", "llama", false);
  testing::write_text(dir / "tokenizer.json",
                      json{{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}}.dump());
  const auto out = dir / "out.gguf";
  auto r = hf::export_hf(options_for(dir, out));
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("tokenizer.json: model type 'Unigram' is not supported"),
            std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find((dir / "tokenizer.json").string()), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));
  hf::ExportOptions without = options_for(dir, out);
  without.with_tokenizer = false;  // asked for explicitly
  auto w = hf::export_hf(without);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_FALSE(w->tokenizer);
  auto f = gguf::GgufFile::open(out.string());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("tokenizer.ggml.model"), nullptr);
  fs::remove_all(dir);
}

TEST(HfExportHardening, TokenizerIdsPastTheConfigVocabAreRefused) {
  auto dir = tiny_checkpoint("export_tok_range", "llama", false);  // vocab_size 5
  testing::write_text(dir / "tokenizer.json",
                      json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 7}}}}},
                           {"decoder", {{"type", "ByteLevel"}}}}.dump());
  auto r = hf::export_hf(options_for(dir, dir / "out.gguf"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 7 out of range [0, 5)"), std::string::npos)
      << r.status().message();
  fs::remove_all(dir);
}

TEST(HfExportHardening, OutMayNeverBeOneOfTheCheckpointsOwnFiles) {
  auto dir = tiny_checkpoint("export_own_input", "llama", false);
  const auto before = fs::file_size(dir / "model.safetensors");
  for (const fs::path& target :
       {dir / "model.safetensors", dir / "config.json", dir / "." / "config.json"}) {
    auto r = hf::export_hf(options_for(dir, target));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << target;
    EXPECT_NE(r.status().message().find("is the checkpoint's own file"), std::string::npos)
        << r.status().message();
  }
  const auto link = dir.parent_path() / "kvcache_export_link.gguf";  // a symlink to an input
  fs::remove(link);
  fs::create_symlink(dir / "model.safetensors", link);
  EXPECT_EQ(hf::export_hf(options_for(dir, link)).status().code(), StatusCode::kInvalidArgument);
  fs::remove(link);
  EXPECT_EQ(fs::file_size(dir / "model.safetensors"), before);
  EXPECT_TRUE(hf::read_config(dir.string()).ok());
  fs::remove_all(dir);
}

TEST(HfExportHardening, AFileTheVerifierRefusesIsNeverLeftBehind) {
  auto dir = tiny_checkpoint("export_verify", "llama", false);
  const auto out = dir / "out.gguf";
  testing::write_text(out, "previous contents");
  hf::ExportOptions o = options_for(dir, out);
  std::string seen;
  o.verify = [&seen](const std::string& path) {
    seen = path;
    return invalid_argument("load model: refused for the test");
  };
  auto r = hf::export_hf(o);
  EXPECT_EQ(r.status().message(), "load model: refused for the test");
  EXPECT_EQ(seen, out.string() + ".partial");
  EXPECT_FALSE(fs::exists(seen));
  std::ifstream in(out);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "previous contents");  // the old file is untouched
  fs::remove_all(dir);
}

TEST(HfExportHardening, ShardsAndIndexMustStayInsideTheCheckpoint) {
  auto dir = tiny_checkpoint("export_escape", "llama", false);
  const auto outside = dir.parent_path() / "kvcache_outside.safetensors";
  fs::rename(dir / "model.safetensors", outside);
  fs::create_symlink(outside, dir / "model.safetensors");
  auto r = safetensors::Checkpoint::open(dir.string());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("outside the directory"), std::string::npos)
      << r.status().message();
  fs::remove(dir / "model.safetensors");
  fs::create_directory(dir / "model.safetensors");  // a directory where a file should be
  EXPECT_NE(safetensors::Checkpoint::open(dir.string()).status().message().find("is a directory"),
            std::string::npos);
  fs::remove(outside);
  fs::remove_all(dir);
}

TEST(HfExportHardening, ConfigJsonMustBeARegularFileInsideTheCheckpoint) {
  auto dir = tiny_checkpoint("export_config_kind", "llama", false);
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  auto r = hf::read_config(dir.string());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is a directory"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvcache
