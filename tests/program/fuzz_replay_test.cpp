// Replays the GGUF fuzz corpus (fuzz/corpus/gguf) and any saved crashers (fuzz/crashers)
// through the libFuzzer entry point, compiled here with the normal toolchain.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

int replay(const fs::path& dir) {
  int n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(b.data(), b.size()), 0);
    ++n;
  }
  return n;
}

TEST(FuzzReplay, EveryCorpusFileRunsCleanly) {
  EXPECT_GE(replay(KVCACHE_FUZZ_CORPUS_DIR), 10);  // the seed corpus is checked in
  replay(KVCACHE_FUZZ_CRASHERS_DIR);
}

TEST(FuzzReplay, EmptyAndTinyInputsRunCleanly) {
  EXPECT_EQ(LLVMFuzzerTestOneInput(nullptr, 0), 0);
  const uint8_t magic[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  EXPECT_EQ(LLVMFuzzerTestOneInput(magic, sizeof magic), 0);
}

}  // namespace
