// Opens the model a subcommand names (or the embedded tiny one) with its tokenizer. Layer:
// tools. The file stays open beside the model: the model may borrow its bytes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::tools {

struct LoadedModel {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<engine::Model> model;
  std::optional<engine::Tokenizer> tokenizer;
  std::string name;  // the file's stem, or "tiny" for the embedded model
  std::vector<int32_t> eog_ids;  // end-of-generation ids (the tokenizer's set)
};

// path empty = the embedded model (NotFound when this build has none).
Result<LoadedModel> load_model(const std::string& path);

}  // namespace kvcache::tools
