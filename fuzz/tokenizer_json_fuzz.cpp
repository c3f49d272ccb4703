// libFuzzer target for tokenizer.json as export reads it: the first byte picks the model's
// vocab bound (0 = none, else 1..255 * 16), the rest is the JSON text. An accepted vocabulary
// stays inside the bound and holds a string for every id.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_targets.h"
#include "program/hf_import.h"

int kvcache::fuzz::tokenizer_json_one(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t vocab = int64_t{data[0]} * 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto v = hf::parse_tokenizer_json(text, vocab);
  if (!v.ok()) return 0;
  const int64_t bound = vocab > 0 ? vocab : hf::kMaxTokenizerVocab;
  if (v->tokens.empty() || static_cast<int64_t>(v->tokens.size()) > bound) __builtin_trap();
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::tokenizer_json_one)
