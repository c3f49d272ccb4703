// Replays a fuzz target's committed corpus (fuzz/corpus/<name>) and saved crashers
// (fuzz/crashers/<name>) through its entry function, compiled with the normal toolchain.
// Shared by program_tests and op_test_tests; KVCACHE_FUZZ_DIR is the repo's fuzz/ folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kvcache::testing {

using FuzzEntry = int (*)(const uint8_t*, size_t);

// Every regular file in `dir` through `entry`; returns how many ran.
inline int replay_dir(FuzzEntry entry, const std::filesystem::path& dir) {
  int n = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(entry(b.data(), b.size()), 0);
    ++n;
  }
  return n;
}

// The corpus and crashers of target `name`; returns the corpus size.
inline int replay_target(FuzzEntry entry, const std::string& name) {
  const std::filesystem::path root = KVCACHE_FUZZ_DIR;
  replay_dir(entry, root / "crashers" / name);
  return replay_dir(entry, root / "corpus" / name);
}

}  // namespace kvcache::testing
