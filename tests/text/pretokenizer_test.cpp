// Pre-tokenizers: each named pre-tokenizer on strings that exercise its published regex
// (contractions, digits, CJK, emoji, whitespace runs, newlines), unknown names refused, and
// the Unicode tables the matchers stand on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/pretokenizer.h"
#include "text/unicode.h"

namespace kvcache::text {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view pre, std::string_view text) {
  Result<PreTokenizer> p = PreTokenizer::from_name(pre);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return {};
  Pieces out;
  std::string joined;
  for (std::string_view v : p->split(text)) {
    out.emplace_back(v);
    joined += v;
  }
  EXPECT_EQ(joined, text) << "the pieces must give the text back";
  return out;
}

// One text for the families: an upper-case contraction, a double space, five digits, CJK
// followed by an emoji and punctuation, a blank line, a tab and trailing spaces.
constexpr std::string_view kText = "I'M  Going 12345 \u4e2d\u6587\U0001F600!!\n\n  end's\tx  ";

TEST(PreTokenizer, Gpt2SplitsLettersDigitsAndLeavesTheLastSpaceToTheNextWord) {
  // 's matches only lower case, so "'" and "M" split; "\s+(?!\S)" takes "\n\n " and leaves
  // one space for " end"; digits stay one run; the emoji joins "!!" (neither L nor N).
  const Pieces want = {"I", "'", "M", " ", " Going", " 12345", " \u4e2d\u6587", "\U0001F600!!",
                       "\n\n ", " end", "'s", "\t", "x", "  "};
  EXPECT_EQ(split("gpt-2", kText), want);
  EXPECT_EQ(split("mpt", kText), want);       // mpt and gpt-neox publish the GPT-2 regex
  EXPECT_EQ(split("gpt-neox", kText), want);
}

TEST(PreTokenizer, Llama3FoldsContractionsGroupsThreeDigitsAndKeepsNewlinesWithPunctuation) {
  // (?i:'m) takes "'M"; \p{N}{1,3} cuts 12345 into 123|45 (the space before is alone: " ?"
  // exists only for punctuation); " ?[^\s\p{L}\p{N}]+[\r\n]*" swallows "\n\n" after "!!";
  // "[^\r\n\p{L}\p{N}]?\p{L}+" lets the tab lead "x".
  const Pieces want = {"I", "'M", " ", " Going", " ", "123", "45", " \u4e2d\u6587",
                       "\U0001F600!!\n\n", " ", " end", "'s", "\tx", "  "};
  EXPECT_EQ(split("llama-bpe", kText), want);
}

TEST(PreTokenizer, Qwen2IsLlama3WithOneDigitPerPiece) {
  // As llama-bpe, but \p{N} takes one digit at a time.
  const Pieces want = {"I", "'M", " ", " Going", " ", "1", "2", "3", "4", "5", " \u4e2d\u6587",
                       "\U0001F600!!\n\n", " ", " end", "'s", "\tx", "  "};
  EXPECT_EQ(split("qwen2", kText), want);
  EXPECT_EQ(split("qwen2", "a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));  // \s*[\r\n]+
}

TEST(PreTokenizer, StarcoderFamilyIsolatesEveryDigitFirst) {
  // \p{N} splits digits out first; the GPT-2 regex then runs on what is left, so " " before
  // the digits stands alone.
  const Pieces want = {"I", "'", "M", " ", " Going", " ", "1", "2", "3", "4", "5",
                       " \u4e2d\u6587", "\U0001F600!!", "\n\n ", " end", "'s", "\t", "x", "  "};
  EXPECT_EQ(split("starcoder", kText), want);
  EXPECT_EQ(split("refact", kText), want);
  EXPECT_EQ(split("smollm", kText), want);
}

TEST(PreTokenizer, FalconIsolatesPunctuationRunsThenGroupsThreeDigits) {
  // [\p{P}$+<=>^~|`]+ isolates "'", "+", "=", "$", "^" first (so "c's" loses its contraction);
  // [0-9]{3} then cuts 12345 into 123|45.
  EXPECT_EQ(split("falcon", "a+b=12345 $x^2 c's"),
            (Pieces{"a", "+", "b", "=", "123", "45", " ", "$", "x", "^", "2", " c", "'", "s"}));
  // The emoji is a symbol, not punctuation: the GPT-2 stage joins it with the space.
  EXPECT_EQ(split("falcon", kText),
            (Pieces{"I", "'", "M", " ", " Going", " ", "123", "45", " \u4e2d\u6587", "\U0001F600",
                    "!!", "\n\n ", " end", "'", "s", "\t", "x", "  "}));
}

TEST(PreTokenizer, DeepseekCoderSplitsNewlinesLettersPunctuationCjkAndDigits) {
  // [\r\n] first; "\s?\p{L}+" takes " done" and "x"; "\s?\p{P}+" takes " //"; "+", "=" are
  // symbols (\p{S}) so they stay between; the CJK run and each digit are pieces.
  EXPECT_EQ(split("deepseek-coder", "x=1+2; // \u6771\u4eac done\n"),
            (Pieces{"x", "=", "1", "+", "2", ";", " //", " ", "\u6771\u4eac", " done", "\n"}));
  // On kText: each "\n" alone; "\s?\p{L}+" takes " \u4e2d\u6587" and "\tx", then the CJK
  // stage re-splits that piece into " " and the CJK run; the emoji (\p{S}) and "!!" (\p{P})
  // part; no contractions: "'" and "M" / "s" split.
  EXPECT_EQ(split("deepseek-coder", kText),
            (Pieces{"I", "'", "M", " ", " Going", " ", "1", "2", "3", "4", "5", " ", "\u4e2d\u6587",
                    "\U0001F600", "!!", "\n", "\n", " ", " end", "'", "s", "\tx", "  "}));
}

TEST(PreTokenizer, DeepseekLlmUsesItsLetterAndPunctuationClasses) {
  // The letter stage keeps "Straße" whole (U+00DF is in U+00D8-U+00F6), but the next stage's
  // class [!-/:-~] also covers ASCII letters, so it takes "Stra" and "e" out and "ß" stays
  // between; "\s+$" keeps the final spaces; \p{N}+ keeps "12"; "！" (U+FF01) is its own run.
  EXPECT_EQ(split("deepseek-llm", "Stra\u00dfe, \u6771\u4eac\uff01  \n12 Ab  "),
            (Pieces{"Stra", "\u00df", "e", ",", " ", "\u6771\u4eac", "\uff01", "  ", "\n", "12",
                    " Ab", "  "}));
  // On kText: as deepseek-coder's stages but \p{N}+ keeps "12345" whole; the emoji is in no
  // class and stays between "\u4e2d\u6587" and "!!".
  EXPECT_EQ(split("deepseek-llm", kText),
            (Pieces{"I", "'", "M", " ", " Going", " ", "12345", " ", "\u4e2d\u6587", "\U0001F600",
                    "!!", "\n", "\n", " ", " end", "'", "s", "\tx", "  "}));
}

TEST(PreTokenizer, TekkenSplitsCamelCaseAndKeepsSlashWithNewlines) {
  // First alternative: U* takes "HTMLP", W+ "arser" -> one piece; " camel" (space leads, U*
  // empty), "Case"; " ÉCOLE" has no lower case: the second alternative (U+ W*); \p{N} one
  // digit each; " ?[^\s\p{L}\p{N}]+[\r\n/]*" gives "." and "/\n".
  EXPECT_EQ(split("tekken", "HTMLParser camelCase \u00c9COLE na\u00efve 3.14/\n"),
            (Pieces{"HTMLParser", " camel", "Case", " \u00c9COLE", " na\u00efve", " ", "3", ".",
                    "1", "4", "/\n"}));
  // On kText: no contraction rule, but "'" may lead a letter run ("'M" by the second
  // alternative, "'s" by the first); otherwise as qwen2 (one digit each, "!!\n\n" together).
  EXPECT_EQ(split("tekken", kText),
            (Pieces{"I", "'M", " ", " Going", " ", "1", "2", "3", "4", "5", " \u4e2d\u6587",
                    "\U0001F600!!\n\n", " ", " end", "'s", "\tx", "  "}));
}

TEST(PreTokenizer, EmptyTextHasNoPieces) {
  for (const std::string& name : PreTokenizer::names())
    EXPECT_TRUE(split(name, "").empty()) << name;
}

TEST(PreTokenizer, InvalidUtf8BytesStayInThePieces) {
  // A stray continuation byte decodes to U+FFFD (a symbol): it joins the punctuation run.
  const Pieces p = split("gpt-2", "ab\x80\xff!");
  EXPECT_EQ(p, (Pieces{"ab", "\x80\xff!"}));
}

TEST(PreTokenizer, UnknownNameIsRefusedByName) {
  Result<PreTokenizer> p = PreTokenizer::from_name("llama3-turbo");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("\"llama3-turbo\""), std::string::npos);
  EXPECT_NE(p.status().message().find("qwen2"), std::string::npos);  // lists what is accepted
}

TEST(Unicode, CategoriesFromTheGeneratedTable) {
  EXPECT_EQ(unicode_cat('A'), UnicodeCat::kLu);
  EXPECT_EQ(unicode_cat('z'), UnicodeCat::kLl);
  EXPECT_EQ(unicode_cat(0x01C5), UnicodeCat::kLt);   // ǅ
  EXPECT_EQ(unicode_cat(0x02B0), UnicodeCat::kLm);   // ʰ
  EXPECT_EQ(unicode_cat(0x4E2D), UnicodeCat::kLo);   // 中
  EXPECT_EQ(unicode_cat(0x0301), UnicodeCat::kMark); // combining acute
  EXPECT_EQ(unicode_cat(0x0663), UnicodeCat::kNumber);  // Arabic-Indic three
  EXPECT_EQ(unicode_cat(0x216B), UnicodeCat::kNumber);  // Roman numeral twelve (Nl)
  EXPECT_EQ(unicode_cat('!'), UnicodeCat::kPunct);
  EXPECT_EQ(unicode_cat('$'), UnicodeCat::kSymbol);
  EXPECT_EQ(unicode_cat(0x1F600), UnicodeCat::kSymbol);
  EXPECT_EQ(unicode_cat(0x3000), UnicodeCat::kSeparator);
  EXPECT_EQ(unicode_cat(0x0378), UnicodeCat::kUnassigned);
  EXPECT_EQ(unicode_cat(0x10FFFF), UnicodeCat::kUnassigned);  // noncharacter, unassigned
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_FALSE(is_white_space(0x200B));  // zero-width space is not White_Space
  EXPECT_FALSE(is_white_space(0x1C));    // a separator control, not White_Space
}

TEST(Unicode, DecodeKeepsEveryByteInOneCodePoint) {
  const CodePoints d = utf8_decode("a\xC3\xA9\xF0\x9F\x98\x80\xE4");
  EXPECT_EQ(d.cps, (std::vector<uint32_t>{'a', 0xE9, 0x1F600, 0xFFFD}));
  EXPECT_EQ(d.offsets, (std::vector<uint32_t>{0, 1, 3, 7, 8}));
  EXPECT_EQ(utf8_encode(0x1F600), "\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace kvcache::text
