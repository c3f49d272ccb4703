// What leaves the engine as text or is accepted as sampling parameters: UTF-8 sanitizing and
// streaming (engine/utf8.h) and check_sampler_config (engine/sampler.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "text/utf8.h"

namespace kvcache::engine {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidTextIsUnchanged) {
  const std::string s = "plain, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80";
  EXPECT_EQ(text::utf8_sanitize(s), s);
  EXPECT_EQ(text::utf8_complete_prefix(s), s.size());
}

TEST(Utf8, EachMaximalInvalidSubsequenceBecomesOneReplacement) {
  EXPECT_EQ(text::utf8_sanitize("a\x80z"), "a" + kFffd + "z");             // stray continuation
  EXPECT_EQ(text::utf8_sanitize("a\xC0\xAFz"), "a" + kFffd + kFffd + "z");  // overlong lead C0
  EXPECT_EQ(text::utf8_sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // a surrogate
  EXPECT_EQ(text::utf8_sanitize("\xE2\x82z"), kFffd + "z");                 // truncated, then ASCII
  EXPECT_EQ(text::utf8_sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(text::utf8_sanitize("\xFF"), kFffd);
  EXPECT_EQ(text::utf8_sanitize("\xF0\x9F\x98"), kFffd);  // unfinished at the end
}

TEST(Utf8, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(text::utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\x80"), 3u);        // invalid, not unfinished: let it go
  EXPECT_EQ(text::utf8_complete_prefix("ab\xE2\x28"), 4u);    // can no longer complete
  EXPECT_EQ(text::utf8_complete_prefix(""), 0u);
}

TEST(Utf8, StreamJoinsACharacterSplitAcrossTokens) {
  text::Utf8Stream s;
  EXPECT_EQ(s.push("a\xE2"), "a");
  EXPECT_EQ(s.push("\x82"), "");
  EXPECT_EQ(s.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.finish(), kFffd);  // never finished
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.push("\x80x"), kFffd + "x");
}

TEST(Utf8, MaximalSubpartsFollowTheWellFormedTable) {
  EXPECT_EQ(text::utf8_sanitize("a\xFF" "b"), "a" + kFffd + "b");
  // E0 A0 is a valid start whose third byte is missing before 'x': one replacement.
  EXPECT_EQ(text::utf8_sanitize("\xE0\xA0x"), kFffd + "x");
  EXPECT_EQ(text::utf8_sanitize("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // overlong 3-byte
  EXPECT_EQ(text::utf8_sanitize("\x80\x80"), kFffd + kFffd);              // two lone continuations
  EXPECT_EQ(text::utf8_sanitize("z\xF0\x9F"), "z" + kFffd);
}

TEST(Utf8, StreamReplacesInvalidBytesAndFinishesAnUnfinishedTail) {
  text::Utf8Stream s;
  EXPECT_EQ(s.push("a\xFF"), "a" + kFffd);
  EXPECT_EQ(s.push("\xC3"), "");
  EXPECT_EQ(s.push("x"), kFffd + "x");  // the lead byte was not continued
  EXPECT_EQ(s.push("h\xF0"), "h");
  EXPECT_EQ(s.push("\x9F"), "");
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(s.push("\xE2\x9C"), "");
  EXPECT_EQ(s.finish(), kFffd);
}

TEST(Utf8, SanitizedBytesAlwaysSerializeAsJson) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  nlohmann::json j;
  j["text"] = text::utf8_sanitize(all + all.substr(0, 200) + "\xE2\x82");
  EXPECT_NO_THROW((void)j.dump());
}

TEST(SamplerConfigCheck, NonFiniteAndOutOfRangeValuesNameTheField) {
  SamplerConfig c;
  EXPECT_TRUE(check_sampler_config(c).ok());
  c.temperature = std::nanf("");
  Status t = check_sampler_config(c);
  EXPECT_EQ(t.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.message().find("temperature = nan"), std::string::npos) << t.message();
  c.temperature = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(check_sampler_config(c).ok());
  c.temperature = 0.7f;
  c.top_p = std::nanf("");
  EXPECT_NE(check_sampler_config(c).message().find("top_p = nan"), std::string::npos);
  c.top_p = 0.0f;
  EXPECT_FALSE(check_sampler_config(c).ok());
  c.top_p = 1.0f;
  c.top_k = -1;
  EXPECT_NE(check_sampler_config(c).message().find("top_k = -1"), std::string::npos);
}

}  // namespace
}  // namespace kvcache::engine
