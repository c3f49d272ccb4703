// Hugging Face checkpoint import: config.json -> geometry and hyperparameters, and the export
// of a checkpoint directory (config.json + safetensors) to a GGUF file per
// docs/model_format.md. Layer: program. The CLI (`kvcache export`) is a thin front over this.
// Exports llama/mistral (as arch "llama", q/k rows permuted to interleaved RoPE pairs) and
// qwen2/qwen3 (kept rotate-half). Other model types parse (geometry) but do not export.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "program/gguf.h"
#include "program/model_geometry.h"

namespace kvcache::hf {

struct HfConfig {
  std::string model_type;  // of the text model (after text_config nesting)
  std::string arch;        // GGUF general.architecture; empty when export is unsupported
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;    // default num_heads
  int64_t head_dim = 0;        // default hidden_size / num_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;  // 0 = unknown
  int64_t sliding_window = 0;           // 0 = none
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  std::optional<double> rope_linear_factor;  // rope_scaling {type: linear, factor}
  std::string rope_scaling_type;             // "" = none; not "linear": export refuses
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  std::string hidden_act;  // "" when absent (SiLU assumed)
  std::vector<bool> sliding;  // per model layer
  ModelGeometry geometry;
};

// InvalidArgument naming the field when the config is malformed or unsupported (e.g. a
// rope_scaling type other than linear, layer_types of the wrong length).
Result<HfConfig> parse_config(const nlohmann::json& config);
// Reads DIR/config.json. NotFound when missing.
Result<HfConfig> read_config(const std::string& dir);

// llama.cpp's q/k row permutation for arch "llama": HF rotate-half rows -> interleaved pairs.
// `w` is [n_heads * head_dim, cols] row-major (cols = 1 for a bias). Within each head,
// out row 2j + s = in row s * head_dim/2 + j. head_dim must be even.
std::vector<float> permute_rope_rows(const std::vector<float>& w, int64_t n_heads,
                                     int64_t head_dim, int64_t cols);

struct ExportOptions {
  std::string hf_dir;
  std::string out_path;  // never one of the checkpoint's own files (refused)
  gguf::TensorType dtype = gguf::TensorType::kF32;  // for matrices; 1-D tensors stay F32
  // false: write no tokenizer even when tokenizer.json exists. true: an unsupported or
  // malformed tokenizer.json refuses the export (never a silent raw-bytes fallback).
  bool with_tokenizer = true;
  // Called on the written file before it is renamed to out_path (e.g. the engine's loader,
  // so a file it would refuse is never left behind); empty = none.
  std::function<Status(const std::string& path)> verify;
};

struct ExportReport {
  std::string arch;
  int64_t n_tensors = 0;
  bool tokenizer = false;  // a byte-level BPE tokenizer.json was embedded
  ModelGeometry geometry;
};

// Builds the GGUF in memory (all tensors are held until written), writes out_path.partial,
// runs options.verify on it and renames it to out_path; on any failure nothing is left.
Result<ExportReport> export_hf(const ExportOptions& options);
// The same without writing: fills `writer` (tests, other front ends).
Result<ExportReport> export_hf_to_writer(const std::string& hf_dir, gguf::TensorType dtype,
                                         gguf::GgufWriter& writer, bool with_tokenizer = true);

// A byte-level BPE vocabulary from tokenizer.json text. Unimplemented for another tokenizer
// kind (named); InvalidArgument when malformed or when an id is outside [0, vocab) (vocab <= 0:
// [0, kMaxTokenizerVocab)), checked before the token table is sized.
inline constexpr int64_t kMaxTokenizerVocab = int64_t{1} << 22;
struct TokenizerVocab {
  std::vector<std::string> tokens;  // by id; ids the file skips are "[PAD<id>]"
  std::vector<std::string> merges;  // "a b"
};
Result<TokenizerVocab> parse_tokenizer_json(std::string_view text, int64_t vocab);

}  // namespace kvcache::hf
