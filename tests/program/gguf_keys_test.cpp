// The GGUF key table and its typed getters: names expand per architecture, defaults apply
// only to absent keys, and every error names the full key.
#include <gtest/gtest.h>

#include "program/gguf_keys.h"

namespace kvcache::gguf {
namespace {

GgufFile parse(const GgufWriter& w) {
  auto f = GgufFile::parse(w.bytes());
  EXPECT_TRUE(f.ok()) << f.status().message();
  return std::move(f).value();
}

TEST(GgufKeys, ArchitectureKeysExpandAndFixedNamesStay) {
  EXPECT_EQ(key_name(Key::kBlockCount, "llama"), "llama.block_count");
  EXPECT_EQ(key_name(Key::kRopeScalingFactor, "qwen2"), "qwen2.rope.scaling.factor");
  EXPECT_EQ(key_name(Key::kSlidingWindowPattern, "gemma3"),
            "gemma3.attention.sliding_window_pattern");
  EXPECT_EQ(key_name(Key::kGeneralArchitecture, "llama"), "general.architecture");
  EXPECT_EQ(key_name(Key::kCacheKvHeads, "llama"), "kvcache.cache.kv_heads");
  EXPECT_EQ(key_pattern(Key::kMaxStepTokens), "kvcache.max_step_tokens");
}

TEST(GgufKeys, OpenReadsTheArchitectureOrNamesItsKey) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3");
  GgufFile f = parse(w);  // a KeyReader borrows the file
  auto r = KeyReader::open(f);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->arch(), "qwen3");
  EXPECT_EQ(r->name(Key::kHeadCountKv), "qwen3.attention.head_count_kv");

  GgufWriter none;
  GgufFile empty = parse(none);
  auto missing = KeyReader::open(empty);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("general.architecture"), std::string::npos);
}

TEST(GgufKeys, FallbacksApplyOnlyToAbsentKeys) {
  GgufWriter w;
  w.set_uint32("llama.block_count", 12);
  w.set_float32("llama.rope.freq_base", 500000.0f);
  GgufFile f = parse(w);
  KeyReader keys(f, "llama");
  EXPECT_EQ(*keys.get_int_or(Key::kBlockCount, 3), 12);
  EXPECT_EQ(*keys.get_int_or(Key::kContextLength, 77), 77);
  EXPECT_DOUBLE_EQ(*keys.get_float_or(Key::kRopeFreqBase, 1.0), 500000.0);
  EXPECT_DOUBLE_EQ(*keys.get_float_or(Key::kRmsEpsilon, 1e-5), 1e-5);
  EXPECT_NE(keys.find(Key::kBlockCount), nullptr);
  EXPECT_EQ(keys.find(Key::kHeadCount), nullptr);
}

TEST(GgufKeys, WrongTypeIsAnErrorNamingTheFullKeyNotTheFallback) {
  GgufWriter w;
  w.set_string("gemma2.context_length", "long");
  w.set_string("gemma2.attention.layer_norm_rms_epsilon", "tiny");
  GgufFile f = parse(w);
  KeyReader keys(f, "gemma2");
  auto ctx = keys.get_int_or(Key::kContextLength, 0);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ctx.status().message().find("gemma2.context_length"), std::string::npos);
  auto eps = keys.get_float_or(Key::kRmsEpsilon, 1e-6);
  ASSERT_FALSE(eps.ok());
  EXPECT_NE(eps.status().message().find("gemma2.attention.layer_norm_rms_epsilon"),
            std::string::npos);
  auto blocks = keys.get_int(Key::kBlockCount);
  ASSERT_FALSE(blocks.ok());
  EXPECT_EQ(blocks.status().code(), StatusCode::kNotFound);
  EXPECT_NE(blocks.status().message().find("gemma2.block_count"), std::string::npos);
}

}  // namespace
}  // namespace kvcache::gguf

namespace kvcache::gguf {
namespace {

// The tokenizer keys are read through the same table (text layer: vocab, tokenizer; tools: the
// chat template), spelled as GGUF writers spell them.
TEST(GgufKeys, TokenizerKeysAreSpelledAsTheFormatSpellsThem) {
  EXPECT_EQ(key_pattern(Key::kTokenizerModel), "tokenizer.ggml.model");
  EXPECT_EQ(key_pattern(Key::kTokenizerPre), "tokenizer.ggml.pre");
  EXPECT_EQ(key_pattern(Key::kTokenizerTokens), "tokenizer.ggml.tokens");
  EXPECT_EQ(key_pattern(Key::kTokenizerTokenType), "tokenizer.ggml.token_type");
  EXPECT_EQ(key_pattern(Key::kTokenizerMerges), "tokenizer.ggml.merges");
  EXPECT_EQ(key_pattern(Key::kTokenizerBosId), "tokenizer.ggml.bos_token_id");
  EXPECT_EQ(key_pattern(Key::kTokenizerEomId), "tokenizer.ggml.eom_token_id");
  EXPECT_EQ(key_pattern(Key::kTokenizerAddSpacePrefix), "tokenizer.ggml.add_space_prefix");
  EXPECT_EQ(key_pattern(Key::kTokenizerChatTemplate), "tokenizer.chat_template");
  EXPECT_EQ(key_name(Key::kTokenizerScores, "llama"), "tokenizer.ggml.scores");  // fixed name
}

}  // namespace
}  // namespace kvcache::gguf
