// libFuzzer target for the GGUF reader: parse, derive the geometry (kvcache.* keys or the
// llama.cpp path), convert every tensor of a computable type (others must be refused by type),
// render the summary. Any crash, sanitizer report or
// huge allocation is a bug. Also compiled into program_tests to replay the corpus.
#include <cstddef>
#include <cstdint>
#include <span>

#include "program/cache_summary.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"
#include "program/model_geometry.h"
#include "fuzz_targets.h"

int kvcache::fuzz::gguf_one(const uint8_t* data, size_t size) {
  auto file = gguf::GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  for (const auto& t : file->tensors()) {
    auto values = file->tensor_f32(t.name);
    if (!gguf::is_computable(t.type)) {  // parsed, but refused by type
      if (values.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
      continue;
    }
    if (!values.ok() || static_cast<int64_t>(values->size()) != t.n_elements()) __builtin_trap();
  }
  auto geometry = read_model_geometry(*file);
  if (!geometry.ok()) return 0;
  if (!validate_model_geometry(*geometry).ok()) __builtin_trap();  // reader and writer agree
  SummaryOptions options;
  options.config.capacity = 64;
  (void)cache_summary_json(*geometry, options);
  gguf::GgufWriter writer;
  if (!write_model_geometry(*geometry, writer).ok()) __builtin_trap();
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::gguf_one)
