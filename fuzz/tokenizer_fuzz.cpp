// libFuzzer target for the tokenizers: the input is a GGUF file; when its tokenizer.ggml.*
// keys build a tokenizer, fixed texts and the input's own last bytes are encoded in every
// mode and decoded. Any crash, sanitizer report, id outside the vocabulary or a raw-byte
// round trip that differs is a bug. Also compiled into engine_tests to replay seeds.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"
#include "program/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcache;
  using namespace kvcache::text;
  auto file = gguf::GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok.ok()) return 0;
  const size_t tail = size < 64 ? size : 64;
  const std::string texts[] = {
      "", " ", "Hello world's  12345\n\n\tx", "<s>a</s><|im_end|>\xE4\xB8\xAD\xF0\x9F\x98\x80",
      std::string(reinterpret_cast<const char*>(data) + size - tail, tail)};
  for (const std::string& text : texts)
    for (int mode = 0; mode < 4; ++mode) {
      EncodeOptions o;
      o.add_special = (mode & 1) != 0;
      o.parse_special = (mode & 2) != 0;
      auto ids = tok->encode(text, o);
      if (!ids.ok()) continue;
      for (int32_t id : *ids)
        if (id < 0 || id >= tok->n_tokens()) __builtin_trap();
      const std::string back = tok->decode(*ids);
      if (tok->kind() == Tokenizer::Kind::kBytes && back != text) __builtin_trap();
      for (int32_t id : *ids) (void)tok->piece(id);
    }
  for (int32_t id : tok->eog_ids())
    if (id < 0 || id >= tok->n_tokens()) __builtin_trap();
  return 0;
}
