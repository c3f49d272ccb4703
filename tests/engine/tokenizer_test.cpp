// Tokenizers: raw bytes and GPT-2 byte-level BPE with a hand-made vocabulary and merges.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::engine {
namespace {

std::vector<std::string> byte_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
  return v;
}

TEST(Tokenizer, RawBytesRoundTripEveryByte) {
  Tokenizer t = Tokenizer::bytes();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::vector<int32_t> ids = *t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids[65], 65);
  EXPECT_EQ(t.decode(ids), all);
}

TEST(Tokenizer, ByteToUnicodeFollowsGpt2Alphabet) {
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ': the 33rd unprintable byte
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(byte_to_unicode(0xE9), "\xC3\xA9");  // printable Latin-1 maps to itself
}

TEST(Tokenizer, PretokenizerSplitsLikeGpt2) {
  std::vector<std::string_view> p = pretokenize("Hello world's  end!! 42\n");
  std::vector<std::string> got(p.begin(), p.end());
  EXPECT_EQ(got, (std::vector<std::string>{"Hello", " world", "'s", " ", " end", "!!", " 42",
                                           "\n"}));
}

TEST(Tokenizer, BpeAppliesMergesByRankAndRoundTrips) {
  std::vector<std::string> vocab = byte_vocab();
  for (const char* s : {"he", "ll", "hell", "\xC4\xA0w", "\xC4\xA0wo"}) vocab.push_back(s);
  // ids 256..260
  std::vector<std::string> merges = {"h e", "l l", "he ll", "\xC4\xA0 w", "\xC4\xA0w o"};
  Tokenizer t = *Tokenizer::bpe(vocab, merges);
  EXPECT_EQ(*t.encode("hello"), (std::vector<int32_t>{258, 'o'}));
  EXPECT_EQ(*t.encode("hello world"),
            (std::vector<int32_t>{258, 'o', 260, 'r', 'l', 'd'}));
  const std::string text = "well, hello  world!\n\xC3\xA9t\xC3\xA9";
  EXPECT_EQ(t.decode(*t.encode(text)), text);
}

TEST(Tokenizer, BpeWithoutByteTokensRefusesUnknownPieces) {
  Tokenizer t = *Tokenizer::bpe({"a", "b"}, {});
  EXPECT_EQ(*t.encode("ab"), (std::vector<int32_t>{0, 1}));
  Result<std::vector<int32_t>> r = t.encode("abc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(Tokenizer, MalformedMergeIsRefused) {
  Result<Tokenizer> t = Tokenizer::bpe(byte_vocab(), {"ab"});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("merges[0]"), std::string::npos);
}

TEST(Tokenizer, FromGgufPicksTheModel) {
  gguf::GgufWriter w;
  gguf::GgufFile none = gguf::GgufFile::parse(w.bytes()).value();
  EXPECT_EQ(Tokenizer::from_gguf(none, 300)->kind(), Tokenizer::Kind::kBytes);
  EXPECT_FALSE(Tokenizer::from_gguf(none, 100).ok());  // raw bytes need 256 ids
  std::vector<std::string> vocab = byte_vocab();
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", vocab);
  gguf::GgufFile gpt2 = gguf::GgufFile::parse(w.bytes()).value();
  Tokenizer t = *Tokenizer::from_gguf(gpt2, 256);
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kBpe);
  EXPECT_EQ(*t.encode("Hi there"), (std::vector<int32_t>{'H', 'i', ' ', 't', 'h', 'e', 'r', 'e'}));
  w.set_string("tokenizer.ggml.model", "llama");
  gguf::GgufFile sp = gguf::GgufFile::parse(w.bytes()).value();
  Result<Tokenizer> r = Tokenizer::from_gguf(sp, 256);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"llama\" is not supported"), std::string::npos);
}

}  // namespace
}  // namespace kvcache::engine
