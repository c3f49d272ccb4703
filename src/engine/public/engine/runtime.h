// The one runtime builder: opens a model (a GGUF file, GGUF bytes, or the embedded tiny model)
// with its tokenizer, and builds the cache + engine over it from cache options. Layer: engine.
// Used by every CLI subcommand that runs a model, the tests and the benchmarks. It reads no
// flags and prints nothing: errors name option fields (tools map them to flag names).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/cache.h"
#include "core/status.h"
#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "text/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::engine {

// Where the model comes from: `path` when set, else `bytes` (copied by the parse), else (both
// empty) the model embedded in this build.
struct ModelSource {
  std::string path;
  std::span<const uint8_t> bytes;

  static ModelSource file(std::string path) {  // "" = the embedded model
    ModelSource s;
    s.path = std::move(path);
    return s;
  }
  static ModelSource memory(std::span<const uint8_t> bytes) {
    ModelSource s;
    s.bytes = bytes;
    return s;
  }
};

// A loaded model. Move-only; the file stays open beside the model (the model may borrow its
// bytes), so keep them together. Thread-safety: immutable after loading.
struct LoadedModel {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Model> model;
  std::optional<text::Tokenizer> tokenizer;  // the file's; engaged after a successful load
  std::string name;                    // the file's stem, "tiny" (embedded) or "memory" (bytes)
  std::vector<int32_t> eog_ids;        // end-of-generation ids (the tokenizer's set)
};

// A cache and an engine over a model. The engine borrows the model, which must outlive it.
struct CachedEngine {
  CacheSetup setup;              // the planned geometry, config and prefill chunk
  std::shared_ptr<Cache> cache;
  std::unique_ptr<Engine> engine;
  int32_t seq = 0;               // the sequence to run: open_seq()'s id
};

// Everything a single-stream run needs.
struct Runtime : LoadedModel, CachedEngine {};

// NotFound when the source is empty and this build embeds no model; otherwise the errors of
// GgufFile::open/parse, Model::load and Tokenizer::from_gguf.
Result<LoadedModel> load_model(const ModelSource& source, const LoadOptions& options = {});

// plan_cache + build_cache + Engine::create, and a first sequence for the cell layout.
// InvalidArgument naming the CacheOptions field (kind, capacity, initial_capacity,
// max_step_tokens, windows) as plan_cache does.
Result<CachedEngine> build_engine(const Model& model, const CacheOptions& options);

// load_model, then build_engine over it.
Result<Runtime> open_runtime(const ModelSource& source, const CacheOptions& options,
                             const LoadOptions& load = {});

}  // namespace kvcache::engine
