// See load_model.h.
#include "load_model.h"

#include <filesystem>
#include <utility>

#include "engine/embedded_model.h"

namespace kvcache::tools {

Result<LoadedModel> load_model(const std::string& path) {
  LoadedModel l;
  std::span<const uint8_t> bytes = engine::embedded_model();
  if (path.empty() && bytes.empty())
    return not_found("no MODEL given and this build embeds no default model "
                     "(models/tiny.gguf was absent when cmake ran)");
  Result<gguf::GgufFile> file =
      path.empty() ? gguf::GgufFile::parse(bytes) : gguf::GgufFile::open(path);
  if (!file.ok()) return file.status();
  l.file = std::make_unique<gguf::GgufFile>(std::move(*file));
  Result<engine::Model> model = engine::Model::load(*l.file);
  if (!model.ok()) return model.status();
  l.model = std::make_unique<engine::Model>(std::move(*model));
  Result<engine::Tokenizer> tok = engine::Tokenizer::from_gguf(*l.file, l.model->hparams().vocab);
  if (!tok.ok()) return tok.status();
  l.tokenizer = std::move(*tok);
  l.eog_ids = l.tokenizer->eog_ids();
  l.name = path.empty() ? "tiny" : std::filesystem::path(path).stem().string();
  return l;
}

}  // namespace kvcache::tools
