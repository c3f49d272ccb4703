// Status plumbing: with_context, the propagation macros (the context is built only on
// failure) and str_cat.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/str_cat.h"

namespace kvcache {
namespace {

Result<int> half(int v) {
  if (v % 2 != 0) return invalid_argument(str_cat("v = ", v, ", expected even"));
  return v / 2;
}

Result<int> quarter(int v) {
  KVCACHE_ASSIGN_OR_RETURN(int h, half(v));
  KVCACHE_ASSIGN_OR_RETURN(h, half(h));
  return h;
}

Status check_even(int v, int& context_builds) {
  KVCACHE_RETURN_IF_ERROR_CTX(half(v).status(),
                              (++context_builds, str_cat("entry ", v)));
  return ok_status();
}

TEST(Status, WithContextPrefixesTheMessageAndKeepsTheCode) {
  Status s = with_context(not_found("no such key"), "gguf: llama.block_count");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "gguf: llama.block_count: no such key");
  EXPECT_TRUE(with_context(ok_status(), "ignored").ok());
  EXPECT_EQ(with_context(ok_status(), "ignored").message(), "");
}

TEST(Status, AssignOrReturnUnwrapsValuesAndPropagatesTheFirstError) {
  EXPECT_EQ(*quarter(12), 3);
  Result<int> r = quarter(6);  // 6 / 2 = 3 is odd: the second step fails
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "v = 3, expected even");
}

TEST(Status, ReturnIfErrorCtxBuildsItsContextOnlyOnFailure) {
  int builds = 0;
  EXPECT_TRUE(check_even(4, builds).ok());
  EXPECT_EQ(builds, 0);
  Status s = check_even(5, builds);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "entry 5: v = 5, expected even");
}

TEST(StrCat, JoinsStringsIntegersFloatsAndBools) {
  EXPECT_EQ(str_cat("capacity = ", int64_t{-3}, ", expected > 0"), "capacity = -3, expected > 0");
  EXPECT_EQ(str_cat(std::string("a"), 'b', std::string_view("c"), uint64_t{18446744073709551615u}),
            "abc18446744073709551615");
  EXPECT_EQ(str_cat(0.5, " ", 1e-9f, " ", true), "0.5 1e-09 true");
  EXPECT_EQ(str_cat(), "");
}

}  // namespace
}  // namespace kvcache
