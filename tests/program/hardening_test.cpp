// Hostile-input regressions of the program layer that need no checkpoint: config.json counts
// validated before allocating, tokenizer.json refused by kind and id range, safetensors
// conversion bounded by its bytes, big-endian GGUF named as such.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "program/gguf.h"
#include "program/hf_import.h"
#include "program/model_geometry.h"
#include "program/safetensors.h"

namespace kvcache {
namespace {

using nlohmann::json;

json llama_config() {
  return json{{"model_type", "llama"}, {"hidden_size", 64},        {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 128}};
}

TEST(HfConfigHardening, HugeLayerCountIsRefusedBeforeAnythingIsSizedByIt) {
  json c = llama_config();
  c["num_hidden_layers"] = 2147483647;  // a 600-byte file must not allocate gigabytes
  c["sliding_window"] = 4;
  ASSERT_LT(c.dump().size(), 600u);
  auto r = hf::parse_config(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"num_hidden_layers\" = 2147483647, expected 1..4096"),
            std::string::npos) << r.status().message();
  c["num_hidden_layers"] = kMaxModelLayers;
  EXPECT_TRUE(hf::parse_config(c).ok());
}

TEST(HfConfigHardening, NonFiniteAndNonPositiveFloatsAreRefused) {
  json c = llama_config();
  c["rope_theta"] = std::numeric_limits<double>::infinity();  // a caller-built json
  auto r = hf::parse_config(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"rope_theta\""), std::string::npos);
  c = llama_config();
  c["rope_theta"] = -10000.0;
  EXPECT_NE(hf::parse_config(c).status().message().find("\"rope_theta\" = -10000.0, expected a finite"),
            std::string::npos) << hf::parse_config(c).status().message();
  c = llama_config();
  c["rms_norm_eps"] = 0;
  EXPECT_NE(hf::parse_config(c).status().message().find("\"rms_norm_eps\" = 0, expected a finite"),
            std::string::npos);
}

TEST(HfConfigHardening, DeeplyNestedValuesAreNamedByKindNotDumped) {
  json c = llama_config();
  c["hidden_size"] = json::parse(std::string(100000, '[') + std::string(100000, ']'));
  auto r = hf::parse_config(c);
  EXPECT_NE(r.status().message().find("\"hidden_size\" = an array, expected an integer"),
            std::string::npos) << r.status().message().substr(0, 200);
}

json byte_level_bpe() {
  return json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", {"a b"}}}},
              {"decoder", {{"type", "ByteLevel"}}}};
}

TEST(TokenizerJson, OtherKindsAreUnimplementedAndNamed) {
  json u = {{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}};
  auto r = hf::parse_tokenizer_json(u.dump(), 0);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("model type 'Unigram' is not supported"), std::string::npos);
  json meta = byte_level_bpe();
  meta.erase("decoder");
  meta["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_EQ(hf::parse_tokenizer_json(meta.dump(), 0).status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(hf::parse_tokenizer_json("{not json", 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerJson, IdsAreBoundedByTheVocabBeforeTheTableIsSized) {
  json t = byte_level_bpe();
  t["model"]["vocab"]["z"] = 4000000;  // inside 2^22, but far past the model's vocab
  auto r = hf::parse_tokenizer_json(t.dump(), 256);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 4000000 out of range [0, 256) (the model's vocab)"),
            std::string::npos) << r.status().message();
  t["model"]["vocab"]["z"] = int64_t{1} << 22;
  EXPECT_EQ(hf::parse_tokenizer_json(t.dump(), 0).status().code(), StatusCode::kInvalidArgument);
  t["model"]["vocab"]["z"] = 3;
  auto ok = hf::parse_tokenizer_json(t.dump(), 256);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->tokens, (std::vector<std::string>{"a", "b", "[PAD2]", "z"}));
  EXPECT_EQ(ok->merges, (std::vector<std::string>{"a b"}));
}

TEST(SafetensorsHardening, ToF32ChecksDtypeAndBytesBeforeAllocating) {
  // Found by safetensors_fuzz: an unknown dtype skips the header's size check, and to_f32
  // allocated shape-many floats (here 2^31 * 20) before refusing the dtype.
  safetensors::TensorView t;
  t.name = "a";
  t.dtype = "F31F32";
  t.shape = {2147483647, 20};
  auto r = safetensors::to_f32(t);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("has dtype F31F32, expected F32, F16 or BF16"),
            std::string::npos);
  t.dtype = "F32";  // a known dtype whose bytes do not match its shape
  const std::vector<uint8_t> bytes(8);
  t.bytes = bytes;
  auto m = safetensors::to_f32(t);
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("holds 8 bytes, its shape needs"), std::string::npos);
  t.shape = {2};
  auto ok = safetensors::to_f32(t);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 2u);
}

TEST(GgufHardening, BigEndianFileIsNamedAsSuch) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 0, 0, 0, 3};  // version 3, big-endian
  b.resize(64, 0);
  auto r = gguf::GgufFile::parse(b);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("big-endian GGUF (version 3 byte-swapped)"),
            std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kvcache
