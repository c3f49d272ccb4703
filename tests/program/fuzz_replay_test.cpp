// Replays the program layer's fuzz corpora (GGUF, HF config.json, safetensors, tokenizer.json)
// and any saved crashers through the libFuzzer entry functions (fuzz/fuzz_targets.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fuzz_replay.h"
#include "fuzz_targets.h"

namespace {

using kvcache::testing::replay_target;
namespace fz = kvcache::fuzz;

TEST(FuzzReplay, GgufCorpusRunsCleanly) { EXPECT_GE(replay_target(fz::gguf_one, "gguf"), 10); }

TEST(FuzzReplay, HfConfigCorpusRunsCleanly) {
  EXPECT_GE(replay_target(fz::hf_config_one, "hf_config"), 10);
}

TEST(FuzzReplay, SafetensorsCorpusRunsCleanly) {
  EXPECT_GE(replay_target(fz::safetensors_one, "safetensors"), 5);
}

TEST(FuzzReplay, TokenizerCorpusRunsCleanly) {
  EXPECT_GE(replay_target(fz::tokenizer_json_one, "tokenizer_json"), 5);
}

TEST(FuzzReplay, EmptyAndTinyInputsRunCleanly) {
  for (auto entry : {fz::gguf_one, fz::hf_config_one, fz::safetensors_one, fz::tokenizer_json_one})
    EXPECT_EQ(entry(nullptr, 0), 0);
  const uint8_t magic[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  EXPECT_EQ(fz::gguf_one(magic, sizeof magic), 0);
  const std::string deep = std::string(100000, '[');  // nesting must not recurse per level
  const auto* d = reinterpret_cast<const uint8_t*>(deep.data());
  EXPECT_EQ(fz::hf_config_one(d, deep.size()), 0);
  EXPECT_EQ(fz::tokenizer_json_one(d, deep.size()), 0);
}

}  // namespace
