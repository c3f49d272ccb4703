// Tokenizers on hand-made vocabularies: raw bytes, GPT-2 byte-level BPE, SentencePiece merging
// by score with byte fallback, special-token parsing on and off, BOS/EOS flags, decoding, the
// end-of-generation set, and refusals that name the key or value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"
#include "program/gguf.h"

namespace kvcache::text {
namespace {

using Ids = std::vector<int32_t>;

std::vector<std::string> byte_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
  return v;
}

gguf::GgufFile parse(const gguf::GgufWriter& w) { return gguf::GgufFile::parse(w.bytes()).value(); }

Ids encode(const Tokenizer& t, std::string_view text, bool add_special = false,
           bool parse_special = true) {
  EncodeOptions o;
  o.add_special = add_special;
  o.parse_special = parse_special;
  Result<Ids> r = t.encode(text, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : Ids{};
}

TEST(Tokenizer, RawBytesRoundTripEveryByte) {
  Tokenizer t = Tokenizer::bytes();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  Ids ids = *t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids[65], 65);
  EXPECT_EQ(t.decode(ids), all);
  EXPECT_TRUE(t.eog_ids().empty());
  EXPECT_EQ(t.bos(), -1);
}

TEST(Tokenizer, ByteToUnicodeFollowsGpt2Alphabet) {
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ': the 33rd unprintable byte
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(byte_to_unicode(0xE9), "\xC3\xA9");  // printable Latin-1 maps to itself
  for (int b = 0; b < 256; ++b) {
    const std::string s = byte_to_unicode(static_cast<uint8_t>(b));
    const uint32_t cp = s.size() == 1 ? static_cast<unsigned char>(s[0])
                                      : ((static_cast<unsigned char>(s[0]) & 0x1F) << 6) |
                                            (static_cast<unsigned char>(s[1]) & 0x3F);
    EXPECT_EQ(byte_from_unicode(cp), b);
  }
  EXPECT_EQ(byte_from_unicode(0x4E2D), -1);
}

TEST(Tokenizer, BpeAppliesMergesByRankAndRoundTrips) {
  std::vector<std::string> vocab = byte_vocab();
  for (const char* s : {"he", "ll", "hell", "\xC4\xA0w", "\xC4\xA0wo"}) vocab.push_back(s);
  // ids 256..260
  std::vector<std::string> merges = {"h e", "l l", "he ll", "\xC4\xA0 w", "\xC4\xA0w o"};
  Tokenizer t = *Tokenizer::bpe(vocab, merges);
  EXPECT_EQ(*t.encode("hello"), (Ids{258, 'o'}));
  EXPECT_EQ(*t.encode("hello world"), (Ids{258, 'o', 260, 'r', 'l', 'd'}));
  const std::string text = "well, hello  world!\n\xC3\xA9t\xC3\xA9";
  EXPECT_EQ(t.decode(*t.encode(text)), text);
}

TEST(Tokenizer, BpeMergesTheLowestRankFirstNotTheLeftmost) {
  std::vector<std::string> vocab = byte_vocab();
  vocab.push_back("ab");  // 256
  vocab.push_back("bc");  // 257
  // "bc" has rank 0, so "abc" -> a + bc although "ab" is further left.
  Tokenizer t = *Tokenizer::bpe(vocab, {"b c", "a b"});
  EXPECT_EQ(*t.encode("abc"), (Ids{'a', 257}));
  EXPECT_EQ(*t.encode("abab"), (Ids{256, 256}));  // equal ranks: left to right
}

TEST(Tokenizer, BpeWithoutByteTokensRefusesUnknownPieces) {
  Tokenizer t = *Tokenizer::bpe({"a", "b"}, {});
  EXPECT_EQ(*t.encode("ab"), (Ids{0, 1}));
  Result<Ids> r = t.encode("abc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("0x63"), std::string::npos);  // names the byte 'c'
}

TEST(Tokenizer, MalformedMergeIsRefused) {
  Result<Tokenizer> t = Tokenizer::bpe(byte_vocab(), {"ab"});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("merges[0]"), std::string::npos);
}

// --- SentencePiece -------------------------------------------------------------------------

constexpr const char* kSp = "\xE2\x96\x81";  // U+2581

// <unk> <s> </s>, 256 byte tokens (ids 3..258), then scored pieces from id 259.
gguf::GgufWriter spm_writer(bool byte_tokens = true) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  if (byte_tokens)
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      tokens.push_back(name);
      scores.push_back(0);
      types.push_back(6);
    }
  const std::pair<std::string, float> pieces[] = {
      {kSp, -5}, {"a", -6}, {"b", -6}, {"c", -6}, {"ab", -2}, {"bc", -1},
      {std::string(kSp) + "a", -3}, {std::string(kSp) + "ab", -0.5f}, {"abc", -0.1f}};
  for (const auto& [s, score] : pieces) {
    tokens.push_back(s);
    scores.push_back(score);
    types.push_back(1);
  }
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_float32_array("tokenizer.ggml.scores", scores);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.set_uint32("tokenizer.ggml.bos_token_id", 1);
  w.set_uint32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

struct SpmIds {  // ids of the scored pieces in spm_writer(true)
  static constexpr int32_t kSpace = 259, kA = 260, kAb = 263, kBc = 264, kSpA = 265,
                           kSpAb = 266, kAbc = 267;
  static constexpr int32_t byte(int b) { return 3 + b; }
};

TEST(SentencePiece, MergesBestScoreFirstAndOnlyIntoTokens) {
  Tokenizer t = *Tokenizer::from_gguf(parse(spm_writer()));
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kSpm);
  // "▁abc": pairs ▁a(-3) ab(-2) bc(-1): bc first; then a+bc = "abc"(-0.1); "▁abc" is no token.
  EXPECT_EQ(encode(t, "abc"), (Ids{SpmIds::kSpace, SpmIds::kAbc}));
  // "▁ab": ab(-2) beats ▁a(-3), then ▁+ab = "▁ab"(-0.5).
  EXPECT_EQ(encode(t, "ab"), (Ids{SpmIds::kSpAb}));
  // Inner spaces become ▁ too: "▁ab▁a" -> "▁ab" "▁a".
  EXPECT_EQ(encode(t, "ab a"), (Ids{SpmIds::kSpAb, SpmIds::kSpA}));
  EXPECT_TRUE(encode(t, "").empty());
}

TEST(SentencePiece, UnknownCharactersFallBackToByteTokens) {
  Tokenizer t = *Tokenizer::from_gguf(parse(spm_writer()));
  // "▁a" merges; \x01 and é (C3 A9) have no piece: their bytes' <0xNN> tokens.
  EXPECT_EQ(encode(t, "a\x01\xC3\xA9"),
            (Ids{SpmIds::kSpA, SpmIds::byte(1), SpmIds::byte(0xC3), SpmIds::byte(0xA9)}));
  EXPECT_EQ(t.decode(encode(t, "a\x01\xC3\xA9")), " a\x01\xC3\xA9");
}

TEST(SentencePiece, WithoutByteTokensUnknownCharactersBecomeTheUnknownToken) {
  Tokenizer t = *Tokenizer::from_gguf(parse(spm_writer(false)));
  // ids shift down by 256 without byte tokens: ▁a = 9; "é" is two bytes -> two <unk>.
  EXPECT_EQ(encode(t, "a\xC3\xA9"), (Ids{9, 0, 0}));
}

TEST(SentencePiece, SpacePrefixFollowsTheFileFlag) {
  gguf::GgufWriter w = spm_writer();
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  Tokenizer t = *Tokenizer::from_gguf(parse(w));
  EXPECT_EQ(encode(t, "abc"), (Ids{SpmIds::kAbc}));
  EXPECT_EQ(encode(t, " abc"), (Ids{SpmIds::kSpace, SpmIds::kAbc}));
}

TEST(SentencePiece, BosByDefaultAndControlTokensParsedFromText) {
  Tokenizer t = *Tokenizer::from_gguf(parse(spm_writer()));
  // add_bos_token absent: SentencePiece adds BOS; the raw run after "<s>" gets the space.
  EXPECT_EQ(encode(t, "<s>ab</s>", true), (Ids{1, 1, SpmIds::kSpAb, 2}));
  EXPECT_EQ(encode(t, "<s>ab</s>", false), (Ids{1, SpmIds::kSpAb, 2}));
  const Ids plain = encode(t, "<s>ab</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(plain.front(), SpmIds::kSpace);
  EXPECT_EQ(plain[1], SpmIds::byte('<'));  // "<" has no piece: its byte token
  EXPECT_EQ(t.decode(plain), " <s>ab</s>");
}

TEST(SentencePiece, DecodeSkipsControlTokensAndRestoresSpacesAndBytes) {
  Tokenizer t = *Tokenizer::from_gguf(parse(spm_writer()));
  EXPECT_EQ(t.decode(Ids{1, SpmIds::kSpAb, SpmIds::byte('!'), SpmIds::kSpA, 2}), " ab! a");
  EXPECT_EQ(t.piece(SpmIds::kSpAb), std::string(kSp) + "ab");
  EXPECT_EQ(t.piece(SpmIds::byte(10)), "<0x0A>");
  EXPECT_EQ(t.eog_ids(), (Ids{2}));
}

// --- special tokens, BOS/EOS, end of generation (BPE) --------------------------------------

// Byte tokens 0..255, then <|endoftext|> (256, CONTROL, eos), <|im_end|> (257, CONTROL),
// <tool> (258, USER_DEFINED), <|im_start|> (259, CONTROL, bos).
gguf::GgufWriter bpe_special_writer() {
  std::vector<std::string> tokens = byte_vocab();
  std::vector<int32_t> types(256, 1);
  for (const char* s : {"<|endoftext|>", "<|im_end|>", "<tool>", "<|im_start|>"})
    tokens.push_back(s);
  for (int32_t ty : {3, 3, 4, 3}) types.push_back(ty);
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
  w.set_uint32("tokenizer.ggml.eos_token_id", 256);
  w.set_uint32("tokenizer.ggml.bos_token_id", 259);
  return w;
}

TEST(SpecialTokens, ControlTokensParseOnlyWhenAskedUserDefinedAlways) {
  Tokenizer t = *Tokenizer::from_gguf(parse(bpe_special_writer()));
  EXPECT_EQ(t.kind_name(), "bpe (qwen2)");
  EXPECT_EQ(encode(t, "a<|im_end|>b<tool>"), (Ids{'a', 257, 'b', 258}));
  // Off: "<|im_end|>" is ten plain bytes; <tool> is a vocabulary word and stays one token.
  const Ids off = encode(t, "a<|im_end|>b<tool>", false, false);
  EXPECT_EQ(off.size(), 1u + 10u + 1u + 1u);
  EXPECT_EQ(off[1], '<');
  EXPECT_EQ(off.back(), 258);
  // Longest match wins and text around it is encoded normally.
  EXPECT_EQ(encode(t, "<|im_start|><|im_end|>"), (Ids{259, 257}));
}

TEST(SpecialTokens, BosAndEosFollowTheFileFlags) {
  gguf::GgufWriter w = bpe_special_writer();
  Tokenizer none = *Tokenizer::from_gguf(parse(w));  // BPE: no BOS unless the file says so
  EXPECT_EQ(encode(none, "a", true), (Ids{'a'}));
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  Tokenizer both = *Tokenizer::from_gguf(parse(w));
  EXPECT_EQ(encode(both, "a", true), (Ids{259, 'a', 256}));
  EXPECT_EQ(encode(both, "a", false), (Ids{'a'}));
  EXPECT_EQ(encode(both, "", true), (Ids{259, 256}));
}

TEST(SpecialTokens, DecodeNeverPrintsControlTokens) {
  Tokenizer t = *Tokenizer::from_gguf(parse(bpe_special_writer()));
  EXPECT_EQ(t.decode(Ids{259, 'h', 'i', 258, 257, 256}), "hi<tool>");
  EXPECT_EQ(t.decode_one(256), "");
  EXPECT_EQ(t.piece(256), "<|endoftext|>");
  EXPECT_EQ(t.decode(Ids{-1, 9999, 'x'}), "x");  // out of range: nothing
}

TEST(SpecialTokens, EndOfGenerationSetHasEosEotAndTurnEnds) {
  gguf::GgufWriter w = bpe_special_writer();
  Tokenizer t = *Tokenizer::from_gguf(parse(w));
  // eos 256 plus <|im_end|> (CONTROL, a turn end); <tool> is not one.
  EXPECT_EQ(t.eog_ids(), (Ids{256, 257}));
  EXPECT_TRUE(t.is_eog(257));
  EXPECT_FALSE(t.is_eog(258));
  w.set_uint32("tokenizer.ggml.eot_token_id", 'x');
  w.set_uint32("tokenizer.ggml.eom_token_id", 'y');
  EXPECT_EQ(Tokenizer::from_gguf(parse(w))->eog_ids(), (Ids{'x', 'y', 256, 257}));
}

// gpt-oss's vocabulary: <|return|> (256, eos), <|call|>, <|end|>, <|start|>, <|channel|>,
// <|message|> (257..261), all CONTROL.
TEST(SpecialTokens, HarmonyEndsAtReturnAndCallAndPrintsItsChannelFraming) {
  std::vector<std::string> tokens = byte_vocab();
  for (const char* s : {"<|return|>", "<|call|>", "<|end|>", "<|start|>", "<|channel|>",
                        "<|message|>"})
    tokens.push_back(s);
  std::vector<int32_t> types(256, 1);
  types.resize(tokens.size(), 3);
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
  w.set_uint32("tokenizer.ggml.eos_token_id", 256);
  Tokenizer t = *Tokenizer::from_gguf(parse(w));
  // <|end|> closes the analysis message, after which the model goes on: not an end.
  EXPECT_EQ(t.eog_ids(), (Ids{256, 257}));
  EXPECT_EQ(t.decode(Ids{260, 'a', 261, 'x', 258, 259, 'a', 260, 'f', 261, 'y', 256}),
            "<|channel|>a<|message|>x<|end|><|start|>a<|channel|>f<|message|>y");
  // Without <|call|> it is not harmony's vocabulary: <|end|> is a turn end, printed as nothing.
  tokens[257] = "<|other|>";
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  Tokenizer phi = *Tokenizer::from_gguf(parse(w));
  EXPECT_EQ(phi.eog_ids(), (Ids{256, 258}));
  EXPECT_EQ(phi.decode(Ids{260, 'a', 258}), "a");
}

// --- choosing and refusing -----------------------------------------------------------------

TEST(Tokenizer, FromGgufPicksTheModel) {
  gguf::GgufWriter w;
  gguf::GgufFile none = parse(w);
  EXPECT_EQ(Tokenizer::from_gguf(none, 300)->kind(), Tokenizer::Kind::kBytes);
  EXPECT_FALSE(Tokenizer::from_gguf(none, 100).ok());  // raw bytes need 256 ids
  for (const char* vocabless : {"none", "no_vocab"}) {  // llama.cpp's names for no vocabulary
    gguf::GgufWriter v;
    v.set_string("tokenizer.ggml.model", vocabless);
    Result<Tokenizer> raw = Tokenizer::from_gguf(parse(v), 300);
    ASSERT_TRUE(raw.ok()) << vocabless << ": " << raw.status().to_string();
    EXPECT_EQ(raw->kind(), Tokenizer::Kind::kBytes);
    EXPECT_EQ(*raw->encode("Hi"), (Ids{'H', 'i'}));
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", byte_vocab());
  Tokenizer t = *Tokenizer::from_gguf(parse(w), 256);
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kBpe);
  EXPECT_EQ(t.kind_name(), "bpe (gpt-2)");  // no pre key: GPT-2's
  EXPECT_EQ(*t.encode("Hi there"), (Ids{'H', 'i', ' ', 't', 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(Tokenizer::from_gguf(parse(w))->n_tokens(), 256);  // vocab-only: the list's length
  Result<Tokenizer> small = Tokenizer::from_gguf(parse(w), 200);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("256 entries"), std::string::npos);
}

TEST(Tokenizer, UnknownTokenizerModelIsRefusedByName) {
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_string_array("tokenizer.ggml.tokens", byte_vocab());
  Result<Tokenizer> r = Tokenizer::from_gguf(parse(w));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokenizer.ggml.model = \"bert\" is not supported"),
            std::string::npos);
}

TEST(Tokenizer, UnknownPreTokenizerIsRefusedByName) {
  gguf::GgufWriter w = bpe_special_writer();
  w.set_string("tokenizer.ggml.pre", "jais-2");
  Result<Tokenizer> r = Tokenizer::from_gguf(parse(w));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokenizer.ggml.pre = \"jais-2\""), std::string::npos);
}

TEST(Tokenizer, MalformedVocabularyKeysAreRefusedNamingTheKey) {
  struct Case {
    const char* what;
    void (*edit)(gguf::GgufWriter&);
    const char* expect;
  };
  const Case cases[] = {
      {"bos out of range",
       [](gguf::GgufWriter& w) { w.set_uint32("tokenizer.ggml.bos_token_id", 999); },
       "tokenizer.ggml.bos_token_id = 999"},
      {"short token_type", [](gguf::GgufWriter& w) {
         w.set_int32_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1}); },
       "tokenizer.ggml.token_type has 2 entries"},
      {"bad token type", [](gguf::GgufWriter& w) {
         std::vector<int32_t> ty(260, 1);
         ty[5] = 9;
         w.set_int32_array("tokenizer.ggml.token_type", ty); },
       "tokenizer.ggml.token_type[5] = 9"},
      {"short scores", [](gguf::GgufWriter& w) {
         w.set_float32_array("tokenizer.ggml.scores", std::vector<float>{0.f}); },
       "tokenizer.ggml.scores has 1 entries"},
      {"tokens not strings", [](gguf::GgufWriter& w) {
         w.set_int32_array("tokenizer.ggml.tokens", std::vector<int32_t>{1}); },
       "tokenizer.ggml.tokens"},
      {"add_eos without eos", [](gguf::GgufWriter& w) {
         w.set("tokenizer.ggml.eos_token_id", gguf::string_value("x"));
         w.set_bool("tokenizer.ggml.add_eos_token", true); },
       "tokenizer.ggml.eos_token_id"},
  };
  for (const Case& c : cases) {
    gguf::GgufWriter w = bpe_special_writer();
    c.edit(w);
    Result<Tokenizer> r = Tokenizer::from_gguf(parse(w));
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace kvcache::text
