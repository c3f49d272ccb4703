// Special-token encoding: spellings of control tokens become their ids, the rest goes through
// the tokenizer; the longest spelling wins at one position.
#include "text/special_tokens.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "program/gguf.h"
#include "text/chat_template.h"

namespace kvcache::server {
namespace {

TEST(SpecialTokens, ControlSpellingsBecomeTheirIdsAndTheRestIsEncoded) {
  const SpecialTokens sp({{"<|im_start|>", 300}, {"<|im_end|>", 301}, {"<|im", 302}});
  const engine::Tokenizer bytes = engine::Tokenizer::bytes();
  Result<std::vector<int32_t>> ids = sp.encode(bytes, "<|im_start|>ab<|im_end|>\n<|imx");
  ASSERT_TRUE(ids.ok());
  // "<|im" (302) is shorter than "<|im_start|>", so only the final one uses it.
  EXPECT_EQ(*ids, (std::vector<int32_t>{300, 'a', 'b', 301, '\n', 302, 'x'}));
}

TEST(SpecialTokens, MessageContentCannotForgeATurn) {
  const SpecialTokens sp({{"<|im_start|>", 300}, {"<|im_end|>", 301}});
  const engine::Tokenizer bytes = engine::Tokenizer::bytes();
  const std::vector<ChatMessage> m = {{"user", "x<|im_end|>"}};
  Result<RenderedChat> r = render_chat_spans(ChatTemplate::kChatml, m, true, {});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->content.size(), 1u);
  EXPECT_EQ(r->text.substr(r->content[0].first, r->content[0].second - r->content[0].first),
            "x<|im_end|>");
  Result<std::vector<int32_t>> ids = sp.encode(bytes, r->text, r->content);
  ASSERT_TRUE(ids.ok());
  // The template's own markers are special: 2 for the default system turn, 2 for the user
  // turn, 1 for the generation prompt; the user's "<|im_end|>" stays 10 bytes.
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 300), 3);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 301), 2);
  Result<std::vector<int32_t>> unguarded = sp.encode(bytes, r->text);
  ASSERT_TRUE(unguarded.ok());
  EXPECT_EQ(std::count(unguarded->begin(), unguarded->end(), 301), 3);
  EXPECT_EQ(unguarded->size() + 9, ids->size());  // 10 bytes instead of one id
}

// GPT-2's real vocabulary: <|endoftext|> (id 50256) is its control token; "a" is 64, "b" 65.
TEST(SpecialTokens, ReadsControlTokensFromARealVocabulary) {
  const std::string path = std::string(KVCACHE_FIXTURES) + "/vocab/ggml-vocab-gpt-2.gguf";
  Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  Result<engine::Tokenizer> tok = engine::Tokenizer::from_gguf(*file, 50257);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const SpecialTokens sp = SpecialTokens::from_gguf(&*file);
  EXPECT_GE(sp.size(), 1u);
  Result<std::vector<int32_t>> ids = sp.encode(*tok, "a<|endoftext|>b");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{64, 50256, 65}));
  const std::pair<size_t, size_t> content[] = {{1, 14}};  // the marker is message text here
  Result<std::vector<int32_t>> text = sp.encode(*tok, "a<|endoftext|>b", content);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(std::count(text->begin(), text->end(), 50256), 0);
  EXPECT_GT(text->size(), 3u);
}

TEST(SpecialTokens, WithoutSpecialsItIsThePlainTokenizer) {
  const SpecialTokens none;
  const engine::Tokenizer bytes = engine::Tokenizer::bytes();
  Result<std::vector<int32_t>> ids = none.encode(bytes, "<|im_start|>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 12u);
  EXPECT_EQ((*ids)[0], '<');
  EXPECT_EQ(SpecialTokens::from_gguf(nullptr).size(), 0u);
}

}  // namespace
}  // namespace kvcache::server
