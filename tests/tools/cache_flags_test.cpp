// The CLI's byte sizes (--kv-memory): parse_byte_size's units and refusals, and the flag as
// CLI11 sees it (the refusal names the flag; --kv-memory excludes the capacity flags).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cache_flags.h"

namespace kvcache::tools {
namespace {

TEST(ByteSize, BinaryAndDecimalUnitsAreExact) {
  EXPECT_EQ(*parse_byte_size("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(*parse_byte_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*parse_byte_size("3KiB"), 3072);
  EXPECT_EQ(*parse_byte_size("2TiB"), int64_t{2} << 40);
  EXPECT_EQ(*parse_byte_size("1.5GB"), 1500000000);
  EXPECT_EQ(*parse_byte_size("4GB"), 4000000000);
  EXPECT_EQ(*parse_byte_size("7KB"), 7000);
  EXPECT_EQ(*parse_byte_size("2MB"), 2000000);
  EXPECT_EQ(*parse_byte_size("1TB"), 1000000000000);
  EXPECT_EQ(*parse_byte_size("4096"), 4096);
  EXPECT_EQ(*parse_byte_size("4096B"), 4096);
  EXPECT_EQ(*parse_byte_size("4gib"), int64_t{4} << 30);  // units are case-insensitive
}

TEST(ByteSize, FractionsOfAByteRoundDown) {
  EXPECT_EQ(*parse_byte_size("1.5KiB"), 1536);
  EXPECT_EQ(*parse_byte_size("0.001KiB"), 1);  // 1.024 bytes
  EXPECT_EQ(*parse_byte_size("0.1MiB"), 104857);  // 104857.6
  // 2^63 - 1 bytes exactly, and one more is refused.
  EXPECT_EQ(*parse_byte_size("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_byte_size("9223372036854775808").ok());
}

TEST(ByteSize, MalformedSizesAreRefusedQuotingTheText) {
  const auto message = [](const char* text) {
    Result<int64_t> r = parse_byte_size(text);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(message("4XB"),
            "\"4XB\" has an unknown unit \"XB\" (expected B, KB, MB, GB, TB: powers of 1000, or "
            "KiB, MiB, GiB, TiB: powers of 1024)");
  EXPECT_EQ(message("-1GiB"),
            "\"-1GiB\" is not a size: expected a number and an optional unit, e.g. 4GiB, 1.5GB");
  EXPECT_EQ(message("0"), "\"0\" is 0 bytes, expected > 0");
  EXPECT_EQ(message("0.0001KB"), "\"0.0001KB\" is 0 bytes, expected > 0");
  EXPECT_EQ(message("99999999999GiB"), "\"99999999999GiB\" is more than 2^63 - 1 bytes");
  EXPECT_EQ(message("1.5"), "\"1.5\" is not a whole number of bytes");
  EXPECT_EQ(message("4 GiB"), "\"4 GiB\" has an unknown unit \" GiB\" (expected B, KB, MB, GB, "
                              "TB: powers of 1000, or KiB, MiB, GiB, TiB: powers of 1024)");
  for (const char* bad : {"", "GiB", ".5GiB", "1.GiB", "+1GiB", "0x10"})
    EXPECT_FALSE(parse_byte_size(bad).ok()) << bad;
}

// Parses `args` (without the program name) on an app with the run flags.
std::string parse_error(std::vector<std::string> args, CacheFlags& f) {
  CLI::App app;
  add_cache_flags(&app, f, {CacheFlag::kCapacity, CacheFlag::kMaxSessions, CacheFlag::kKvMemory});
  refuse_beside_kv_memory(&app);
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(KvMemoryFlag, SetsTheBudgetAndNamesItselfWhenRefused) {
  CacheFlags f;
  EXPECT_EQ(parse_error({"--kv-memory", "1.5GB"}, f), "");
  EXPECT_EQ(f.kv_memory, 1500000000);
  EXPECT_EQ(cache_options(f).kv_memory, 1500000000);
  CacheFlags g;
  EXPECT_EQ(parse_error({"--kv-memory", "0"}, g), "--kv-memory: \"0\" is 0 bytes, expected > 0");
  EXPECT_FALSE(g.kv_memory.has_value());
  // CLI11 names the pair in declaration order, whichever comes first on the line.
  EXPECT_EQ(parse_error({"--kv-memory", "4GiB", "--capacity", "64"}, g),
            "--capacity excludes --kv-memory");
  EXPECT_EQ(parse_error({"--max-sessions", "4", "--kv-memory", "4GiB"}, g),
            "--max-sessions excludes --kv-memory");
}

TEST(KvMemoryFlag, OnlyABudgetRefusalIsAUsageExit) {
  EXPECT_EQ(plan_exit_code(resource_exhausted("cache options: kv_memory = 5 bytes holds no cache")),
            2);
  EXPECT_EQ(plan_exit_code(resource_exhausted("cell_layout.seq_new: all 256 ids are live")), 1);
  EXPECT_EQ(plan_exit_code(invalid_argument("cache options: kv_memory = 0, expected > 0 bytes")),
            1);
}

}  // namespace
}  // namespace kvcache::tools
