// The ~100M-parameter benchmark model: a random-weight llama GGUF with f16 matrices (d=768,
// 12 layers, 12 q / 4 kv heads of 64, ff 2048, vocab 32000, tied embeddings), written to a
// temporary file. Layer: bench. The engine and serve benchmarks load the same model so their
// figures compare.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/runtime.h"
#include "program/gguf.h"

namespace kvcache::bench {

struct BenchModel {
  static constexpr int kD = 768, kLayers = 12, kHeads = 12, kKvHeads = 4, kHeadDim = 64;
  static constexpr int kFf = 2048, kVocab = 32000, kChunk = 512;
};

// The model's GGUF bytes with the given max_context (empty when building them failed).
std::vector<uint8_t> bench_model_bytes(int64_t max_context);
// Writes them to a fresh temporary path and returns it; empty when writing failed. The caller
// removes the file.
std::string write_bench_model(int64_t max_context);

// The model loaded from such a file by engine::load_model (the file stays open beside it;
// the tokenizer is the raw-bytes one), once per max_context for the process; `error` says why
// not.
struct LoadedBenchModel : engine::LoadedModel {
  std::string error;
};
const LoadedBenchModel& load_bench_model(int64_t max_context);

}  // namespace kvcache::bench
