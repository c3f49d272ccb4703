// Special-token matching, its one home (Tokenizer::encode): spellings of control tokens become
// their ids outside the plain ranges, message content stays text, the rest is encoded.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "program/gguf.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvcache::text {
namespace {

// GPT-2's real vocabulary: <|endoftext|> (id 50256) is its control token; "a" is 64, "b" 65.
class Gpt2Specials : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(KVCACHE_FIXTURES) + "/vocab/ggml-vocab-gpt-2.gguf";
    Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    Result<Tokenizer> tok = Tokenizer::from_gguf(*file, 50257);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    tok_ = std::move(*tok);
  }
  Tokenizer tok_ = Tokenizer::bytes();
};

TEST_F(Gpt2Specials, ControlSpellingsBecomeTheirIdsOutsidePlainRanges) {
  Result<std::vector<int32_t>> ids = tok_.encode("a<|endoftext|>b", chat_prompt_options({}));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{64, 50256, 65}));
}

TEST_F(Gpt2Specials, AControlSpellingInsideMessageContentStaysText) {
  const std::pair<size_t, size_t> content[] = {{1, 14}};  // "<|endoftext|>b"
  Result<std::vector<int32_t>> ids = tok_.encode("a<|endoftext|>b", chat_prompt_options(content));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 50256), 0);
  EXPECT_GT(ids->size(), 3u);
  // Plain text alone encodes the same bytes the same way.
  EncodeOptions plain;
  plain.add_special = false;
  plain.parse_special = false;
  Result<std::vector<int32_t>> text = tok_.encode("a<|endoftext|>b", plain);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*ids, *text);
}

TEST_F(Gpt2Specials, AControlSpellingOverlappingContentIsNotMatched) {
  // The marker starts outside the content range [5, 20) but would end inside it.
  const std::pair<size_t, size_t> content[] = {{5, 20}};
  Result<std::vector<int32_t>> ids =
      tok_.encode("<|endoftext|>b and more", chat_prompt_options(content));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 50256), 0);
  // Without the range the same text starts with the token.
  Result<std::vector<int32_t>> free = tok_.encode("<|endoftext|>b and more", chat_prompt_options({}));
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(free->front(), 50256);
}

TEST_F(Gpt2Specials, MessageContentCannotForgeATurn) {
  const std::vector<ChatMessage> m = {{"user", "x<|endoftext|>"}};
  Result<RenderedChat> r =
      render_chat_spans(ChatTemplate::kChatml, m, true, {});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->content.size(), 1u);
  EXPECT_EQ(r->text.substr(r->content[0].first, r->content[0].second - r->content[0].first),
            "x<|endoftext|>");
  Result<std::vector<int32_t>> guarded = tok_.encode(r->text, chat_prompt_options(r->content));
  ASSERT_TRUE(guarded.ok());
  EXPECT_EQ(std::count(guarded->begin(), guarded->end(), 50256), 0);
  Result<std::vector<int32_t>> unguarded = tok_.encode(r->text, chat_prompt_options({}));
  ASSERT_TRUE(unguarded.ok());
  EXPECT_EQ(std::count(unguarded->begin(), unguarded->end(), 50256), 1);
}

TEST(SpecialTokens, TheByteTokenizerHasNoSpecials) {
  const Tokenizer bytes = Tokenizer::bytes();
  Result<std::vector<int32_t>> ids = bytes.encode("<|im_start|>", chat_prompt_options({}));
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 12u);
  EXPECT_EQ((*ids)[0], '<');
}

}  // namespace
}  // namespace kvcache::text
