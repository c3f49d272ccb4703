// Special-token encoding: spellings of control tokens become their ids, the rest goes through
// the tokenizer; the longest spelling wins at one position.
#include "server/special_tokens.h"

#include <gtest/gtest.h>

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
