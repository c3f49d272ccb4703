// Conformance: every ggml-vocab-*.gguf that has .inp/.out beside it, in the shared fixtures
// folder and in tests/text/data/vocab (the pre-tokenizers beyond gpt-2, kept as test data), is
// tokenized case by case (no BOS/EOS, special-token text as plain text) and compared with the
// reference ids. A new triple dropped into either folder is picked up without code changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::text {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Texts separated by "\n__ggml_vocab_test__\n"; the file ends with one separator.
std::vector<std::string> read_inputs(const fs::path& p) {
  const std::string all = read_all(p);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t next = all.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(all.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_outputs(const fs::path& p) {
  std::vector<std::vector<int32_t>> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id = 0;
    while (ls >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::vector<fs::path> vocab_files() {
  std::vector<fs::path> out;
  for (const fs::path dir : {fs::path(KVCACHE_FIXTURES_DIR) / "vocab",
                             fs::path(KVCACHE_TEST_VOCAB_DIR)}) {
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ggml-vocab-", 0) != 0 || e.path().extension() != ".gguf") continue;
      if (fs::exists(e.path().string() + ".inp") && fs::exists(e.path().string() + ".out"))
        out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return out;
}

TEST(TokenizerConformance, FindsTheSharedAndTheCheckedInVocabularies) {
  std::vector<std::string> names;
  for (const fs::path& p : vocab_files()) names.push_back(p.filename().string());
  ASSERT_FALSE(names.empty()) << "no ggml-vocab-*.gguf triples under " << KVCACHE_FIXTURES_DIR;
  // The two shared ones (SentencePiece, gpt-2) and one per pre-tokenizer checked in here.
  for (const char* want : {"llama-spm", "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
                           "mpt", "refact", "starcoder", "phi-3"}) {
    const std::string file = std::string("ggml-vocab-") + want + ".gguf";
    EXPECT_NE(std::find(names.begin(), names.end(), file), names.end()) << file;
  }
}

TEST(TokenizerConformance, EveryCaseOfEveryVocabularyMatchesTheReference) {
  EncodeOptions plain;
  plain.add_special = false;
  plain.parse_special = false;
  for (const fs::path& path : vocab_files()) {
    SCOPED_TRACE(path.filename().string());
    Result<gguf::GgufFile> file = gguf::GgufFile::open(path.string());
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    Result<Tokenizer> tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const std::vector<std::string> texts = read_inputs(path.string() + ".inp");
    const std::vector<std::vector<int32_t>> want = read_outputs(path.string() + ".out");
    ASSERT_EQ(texts.size(), want.size()) << "case count of .inp vs .out";
    ASSERT_GT(texts.size(), 10u);
    int failures = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      Result<std::vector<int32_t>> got = tok->encode(texts[i], plain);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      if (*got != want[i]) ++failures;
      EXPECT_EQ(*got, want[i]) << "case " << i << ": text \"" << texts[i] << "\"\n  got: "
                               << join(*got) << "\n want: " << join(want[i]);
    }
    EXPECT_EQ(failures, 0);
  }
}

}  // namespace
}  // namespace kvcache::text
