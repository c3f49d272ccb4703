// The runtime builder. See runtime.h.
#include "engine/runtime.h"

#include <filesystem>
#include <utility>

#include "engine/embedded_model.h"

namespace kvcache::engine {

Result<LoadedModel> load_model(const ModelSource& source, const LoadOptions& options) {
  LoadedModel l;
  std::span<const uint8_t> bytes = source.bytes;
  const bool embedded = source.path.empty() && bytes.empty();
  if (embedded) bytes = embedded_model();
  if (source.path.empty() && bytes.empty())
    return not_found("no model given and this build embeds no default model "
                     "(models/tiny.gguf was absent when cmake ran)");
  const auto placement = options.huge_pages ? gguf::GgufFile::Placement::kHugePages
                                             : gguf::GgufFile::Placement::kMapped;
  KVCACHE_ASSIGN_OR_RETURN(gguf::GgufFile file,
                           source.path.empty() ? gguf::GgufFile::parse(bytes)
                                               : gguf::GgufFile::open(source.path, placement));
  l.file = std::make_unique<gguf::GgufFile>(std::move(file));
  KVCACHE_ASSIGN_OR_RETURN(Model model, Model::load(*l.file, options));
  l.model = std::make_unique<Model>(std::move(model));
  KVCACHE_ASSIGN_OR_RETURN(l.tokenizer, text::Tokenizer::from_gguf(*l.file, l.model->hparams().vocab));
  l.eog_ids = l.tokenizer->eog_ids();
  l.name = !source.path.empty() ? std::filesystem::path(source.path).stem().string()
           : embedded           ? "tiny"
                                : "memory";
  return l;
}

Result<CachedEngine> build_engine(const Model& model, const CacheOptions& options) {
  CachedEngine c;
  KVCACHE_ASSIGN_OR_RETURN(c.setup, plan_cache(model, options));
  KVCACHE_ASSIGN_OR_RETURN(c.cache, build_cache(c.setup));
  KVCACHE_ASSIGN_OR_RETURN(c.seq, c.cache->open_seq());
  KVCACHE_ASSIGN_OR_RETURN(c.engine, Engine::create(model, c.cache));
  return c;
}

Result<Runtime> open_runtime(const ModelSource& source, const CacheOptions& options,
                             const LoadOptions& load) {
  Runtime r;
  KVCACHE_ASSIGN_OR_RETURN(static_cast<LoadedModel&>(r), load_model(source, load));
  KVCACHE_ASSIGN_OR_RETURN(static_cast<CachedEngine&>(r), build_engine(*r.model, options));
  return r;
}

}  // namespace kvcache::engine
