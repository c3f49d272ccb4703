// UTF-8 helpers: sequence lengths at the edges of the well-formed table, U+FFFD replacement
// of maximal ill-formed subparts, and the stream that holds back split characters.
#include "server/utf8.h"

#include <string>

#include <gtest/gtest.h>

namespace kvcache::server {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, SequenceLengthFollowsTheWellFormedTable) {
  EXPECT_EQ(utf8_sequence_length("A"), 1);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9"), 2);
  EXPECT_EQ(utf8_sequence_length("\xE2\x9C\x93"), 3);
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80"), 4);
  EXPECT_EQ(utf8_sequence_length("\xC3"), -1);              // needs one more byte
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98"), -1);
  EXPECT_EQ(utf8_sequence_length("\xC0\x80"), 0);           // overlong
  EXPECT_EQ(utf8_sequence_length("\xE0\x80\x80"), 0);       // overlong 3-byte
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80"), 0);       // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80"), 0);   // above U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\x80"), 0);               // lone continuation
  EXPECT_EQ(utf8_sequence_length("\xFF"), 0);
}

TEST(Utf8, ValidAcceptsTextAndRefusesBrokenBytes) {
  EXPECT_TRUE(utf8_valid("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_TRUE(utf8_valid(""));
  EXPECT_FALSE(utf8_valid("caf\xC3"));
  EXPECT_FALSE(utf8_valid("a\xFF" "b"));
}

TEST(Utf8, SanitizeReplacesEachMaximalIllFormedSubpart) {
  EXPECT_EQ(utf8_sanitize("ok"), "ok");
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a" + kFffd + "b");
  // E0 A0 is a valid start whose third byte is missing before 'x': one replacement.
  EXPECT_EQ(utf8_sanitize("\xE0\xA0x"), kFffd + "x");
  // Two lone continuation bytes: two replacements.
  EXPECT_EQ(utf8_sanitize("\x80\x80"), kFffd + kFffd);
  // An incomplete sequence at the end is replaced too.
  EXPECT_EQ(utf8_sanitize("z\xF0\x9F"), "z" + kFffd);
  EXPECT_TRUE(utf8_valid(utf8_sanitize("\xC0\xAF\xED\xA0\x80\xF5")));
}

TEST(Utf8, StreamHoldsBackASplitCharacterUntilComplete) {
  Utf8Stream s;
  EXPECT_EQ(s.push("h\xF0"), "h");
  EXPECT_EQ(s.held(), 1u);
  EXPECT_EQ(s.push("\x9F"), "");
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(s.held(), 0u);
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8, StreamReplacesInvalidBytesAndFlushesAnUnfinishedTail) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xFF"), "a" + kFffd);
  EXPECT_EQ(s.push("\xC3"), "");
  EXPECT_EQ(s.push("x"), kFffd + "x");  // the lead byte was not continued
  EXPECT_EQ(s.push("\xE2\x9C"), "");
  EXPECT_EQ(s.flush(), kFffd);
  EXPECT_EQ(s.held(), 0u);
}

}  // namespace
}  // namespace kvcache::server
