// Replays the tokenizer fuzz entry (fuzz/tokenizer_fuzz.cpp) on hostile vocabularies made from
// two small valid ones (SentencePiece with byte tokens, BPE with merges and special tokens):
// the seeds, every truncation and single-byte corruptions. Also replays fuzz/corpus/tokenizer.
// KVCACHE_WRITE_TOKENIZER_SEEDS=DIR writes the two seeds there (how the corpus was made).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "text/tokenizer_bpe.h"
#include "program/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvcache::text {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> spm_seed() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; b += 17) {  // some byte tokens, not all
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const char* s : {"\xE2\x96\x81", "a", "l", "\xE2\x96\x81H", "el", "lo", "ello", "<0xZZ>"}) {
    tokens.push_back(s);
    scores.push_back(-static_cast<float>(tokens.size()));
    types.push_back(s[0] == '<' ? 6 : 1);
  }
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_float32_array("tokenizer.ggml.scores", scores);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.set_uint32("tokenizer.ggml.bos_token_id", 1);
  w.set_uint32("tokenizer.ggml.eos_token_id", 2);
  return w.bytes();
}

std::vector<uint8_t> bpe_seed() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
  for (const char* s : {"He", "ll", "llo", "\xC4\xA0w", "<|im_end|>", "<tool>"})
    tokens.push_back(s);
  std::vector<int32_t> types(tokens.size(), 1);
  types[260] = 3;
  types[261] = 4;
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "llama-bpe");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges",
                     std::vector<std::string>{"H e", "l l", "ll o", "\xC4\xA0 w", "x y"});
  w.set_uint32("tokenizer.ggml.eos_token_id", 260);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  return w.bytes();
}

int run(const std::vector<uint8_t>& b) { return LLVMFuzzerTestOneInput(b.data(), b.size()); }

TEST(TokenizerFuzzReplay, SeedsTruncationsAndCorruptionsRunCleanly) {
  int inputs = 0;
  for (const std::vector<uint8_t>& seed : {spm_seed(), bpe_seed()}) {
    ASSERT_EQ(run(seed), 0);
    for (size_t n = 0; n < seed.size(); n += 11) {
      EXPECT_EQ(run(std::vector<uint8_t>(seed.begin(), seed.begin() + static_cast<long>(n))), 0);
      ++inputs;
    }
    for (size_t i = 0; i < seed.size(); i += 5)
      for (uint8_t x : {uint8_t{0xFF}, uint8_t{0x01}, uint8_t{0x80}}) {
        std::vector<uint8_t> bad = seed;
        bad[i] ^= x;
        EXPECT_EQ(run(bad), 0) << "byte " << i << " ^ " << int{x};
        ++inputs;
      }
  }
  EXPECT_GT(inputs, 1000);
  if (const char* dir = std::getenv("KVCACHE_WRITE_TOKENIZER_SEEDS")) {
    auto write = [&](const char* name, const std::vector<uint8_t>& b) {
      std::ofstream(fs::path(dir) / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(b.data()), static_cast<long>(b.size()));
    };
    write("seed_spm.gguf", spm_seed());
    write("seed_bpe.gguf", bpe_seed());
  }
}

TEST(TokenizerFuzzReplay, CorpusFilesRunCleanly) {
  const fs::path dir = KVCACHE_TOKENIZER_CORPUS_DIR;
  int n = 0;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(run(b), 0);
      ++n;
    }
  EXPECT_GE(n, 2);  // the two seeds are checked in
}

}  // namespace
}  // namespace kvcache::text
