// Export of a Hugging Face checkpoint directory to GGUF (docs/model_format.md): tensor names,
// {arch}.* hyperparameters, kvcache.* geometry keys and, when present, a byte-level BPE
// tokenizer. Matrices are stored in the requested dtype; 1-D tensors (norms, biases) stay F32.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/str_cat.h"
#include "program/file_bytes.h"
#include "program/gguf_keys.h"
#include "program/hf_import.h"
#include "program/safetensors.h"

namespace kvcache::hf {
namespace {

using nlohmann::json;
using gguf::TensorType;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += str_cat((i ? ", " : ""), s[i]);
  return r + "]";
}

struct Exporter {
  const HfConfig& cfg;
  const safetensors::Checkpoint& ck;
  TensorType dtype;
  gguf::GgufWriter& w;
  std::string name;  // general.name: the checkpoint directory's name
  int64_t n_tensors = 0;

  // Copies HF tensor `src` to GGUF `dst`. `rows` (when > 0) is the expected first torch dim
  // and `cols` the second (0 = 1-D). `rope_heads` > 0 permutes rows for interleaved RoPE.
  Status copy(const std::string& src, const std::string& dst, bool required, int64_t rows,
              int64_t cols, int64_t rope_heads = 0) {
    const safetensors::TensorView* t = ck.find(src);
    if (!t) {
      if (required) return not_found("export: tensor '" + src + "' is missing from the checkpoint");
      return ok_status();
    }
    std::vector<int64_t> expect;
    if (rows > 0) expect.push_back(rows);
    if (cols > 0) expect.push_back(cols);
    if (!expect.empty() && t->shape != expect)
      return invalid_argument("export: '" + src + "' has shape " + shape_str(t->shape) +
                              ", expected " + shape_str(expect));
    if (t->shape.empty() || t->shape.size() > 4)
      return invalid_argument(str_cat("export: '", src, "' has ", t->shape.size(),
                                      " dims, expected 1..4"));
    auto data = safetensors::to_f32(*t);
    if (!data.ok()) return data.status();
    std::vector<float> values = std::move(data).value();
    if (rope_heads > 0) {
      const int64_t c = t->shape.size() == 2 ? t->shape[1] : 1;
      values = permute_rope_rows(values, rope_heads, cfg.head_dim, c);
    }
    std::vector<int64_t> dims(t->shape.rbegin(), t->shape.rend());  // ggml order
    const TensorType store = t->shape.size() == 1 ? TensorType::kF32 : dtype;
    ++n_tensors;
    return w.add_tensor_f32(dst, std::move(dims), values, store);
  }

  Status tensors() {
    const int64_t d = cfg.hidden_size, hd = cfg.head_dim;
    const int64_t q_rows = cfg.num_heads * hd, kv_rows = cfg.num_kv_heads * hd;
    const bool llama = cfg.arch == "llama";
    if (llama && hd % 2 != 0)
      return invalid_argument(str_cat("export: head_dim = ", hd,
                                      " is odd; RoPE pairing needs an even head_dim"));
    const int64_t vocab_rows = cfg.vocab_size, vocab_cols = cfg.vocab_size > 0 ? d : 0;
    KVCACHE_RETURN_IF_ERROR(copy("model.embed_tokens.weight", "token_embd.weight", true,
                                 vocab_rows, vocab_cols));
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      const std::string h = str_cat("model.layers.", i, ".");
      const std::string g = str_cat("blk.", i, ".");
      const bool owns_cache = cfg.geometry.layer_cache[static_cast<size_t>(i)] == i;
      KVCACHE_RETURN_IF_ERROR(copy(h + "input_layernorm.weight", g + "attn_norm.weight", true, d, 0));
      KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.q_proj.weight", g + "attn_q.weight", true,
                                   q_rows, d, llama ? cfg.num_heads : 0));
      KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.q_proj.bias", g + "attn_q.bias", false, q_rows,
                                   0, llama ? cfg.num_heads : 0));
      if (owns_cache) {
        KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.k_proj.weight", g + "attn_k.weight", true,
                                     kv_rows, d, llama ? cfg.num_kv_heads : 0));
        KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.k_proj.bias", g + "attn_k.bias", false,
                                     kv_rows, 0, llama ? cfg.num_kv_heads : 0));
        KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.v_proj.weight", g + "attn_v.weight", true,
                                     kv_rows, d));
        KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.v_proj.bias", g + "attn_v.bias", false,
                                     kv_rows, 0));
      }
      KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", false, hd, 0));
      KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", false, hd, 0));
      KVCACHE_RETURN_IF_ERROR(copy(h + "self_attn.o_proj.weight", g + "attn_output.weight", true,
                                   d, q_rows));
      KVCACHE_RETURN_IF_ERROR(copy(h + "post_attention_layernorm.weight", g + "ffn_norm.weight", true, d, 0));
      const int64_t ff = cfg.intermediate_size;
      KVCACHE_RETURN_IF_ERROR(copy(h + "mlp.gate_proj.weight", g + "ffn_gate.weight", true, ff, d));
      KVCACHE_RETURN_IF_ERROR(copy(h + "mlp.up_proj.weight", g + "ffn_up.weight", true, ff, d));
      KVCACHE_RETURN_IF_ERROR(copy(h + "mlp.down_proj.weight", g + "ffn_down.weight", true, d, ff));
    }
    KVCACHE_RETURN_IF_ERROR(copy("model.norm.weight", "output_norm.weight", true, d, 0));
    if (!cfg.tie_word_embeddings)
      KVCACHE_RETURN_IF_ERROR(copy("lm_head.weight", "output.weight", false, vocab_rows,
                                   vocab_cols));
    return ok_status();
  }

  void hyperparameters() {
    using gguf::Key;
    auto k = [this](Key key) { return gguf::key_name(key, cfg.arch); };
    auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    w.set_string(k(Key::kGeneralArchitecture), cfg.arch);
    if (!name.empty()) w.set_string(k(Key::kGeneralName), name);
    w.set_uint32(k(Key::kBlockCount), u32(cfg.num_layers));
    w.set_uint32(k(Key::kEmbeddingLength), u32(cfg.hidden_size));
    if (cfg.intermediate_size > 0)
      w.set_uint32(k(Key::kFeedForwardLength), u32(cfg.intermediate_size));
    if (cfg.max_position_embeddings > 0)
      w.set_uint32(k(Key::kContextLength), u32(cfg.max_position_embeddings));
    if (cfg.vocab_size > 0) w.set_uint32(k(Key::kVocabSize), u32(cfg.vocab_size));
    w.set_uint32(k(Key::kHeadCount), u32(cfg.num_heads));
    w.set_uint32(k(Key::kHeadCountKv), u32(cfg.num_kv_heads));
    w.set_uint32(k(Key::kKeyLength), u32(cfg.head_dim));
    w.set_uint32(k(Key::kValueLength), u32(cfg.head_dim));
    w.set_float32(k(Key::kRmsEpsilon), static_cast<float>(cfg.rms_norm_eps));
    w.set_float32(k(Key::kRopeFreqBase), static_cast<float>(cfg.rope_theta));
    w.set_uint32(k(Key::kRopeDimensionCount), u32(cfg.head_dim));
    if (cfg.rope_linear_factor) {
      w.set_string(k(Key::kRopeScalingType), "linear");
      w.set_float32(k(Key::kRopeScalingFactor), static_cast<float>(*cfg.rope_linear_factor));
    }
    bool any_sliding = false;
    for (bool s : cfg.sliding) any_sliding = any_sliding || s;
    if (any_sliding) w.set_uint32(k(Key::kSlidingWindow), u32(cfg.sliding_window));
  }
};

bool is_byte_level(const json* x) {
  if (!x || !x->is_object()) return false;
  auto type_is = [](const json& o) {
    auto t = o.find("type");
    return t != o.end() && t->is_string() && *t == "ByteLevel";
  };
  if (type_is(*x)) return true;
  for (const char* list : {"pretokenizers", "decoders"})
    if (auto it = x->find(list); it != x->end() && it->is_array())
      for (const auto& e : *it)
        if (e.is_object() && type_is(e)) return true;
  return false;
}

const json* member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// Adds tokenizer.json's vocabulary to `w`; false when the directory holds none.
Result<bool> add_tokenizer(const std::string& dir, int64_t vocab, gguf::GgufWriter& w) {
  const std::string path = dir + "/tokenizer.json";
  Result<std::string> text = read_file(path, {"tokenizer.json", file_limits::kTokenizerJson, dir});
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return false;
  if (!text.ok()) return text.status();
  Result<TokenizerVocab> v = parse_tokenizer_json(*text, vocab);
  if (!v.ok())
    return Status(v.status().code(), v.status().message() + " (file '" + path + "')");
  w.set_string(std::string(gguf::key_pattern(gguf::Key::kTokenizerModel)), "gpt2");
  w.set_string_array(std::string(gguf::key_pattern(gguf::Key::kTokenizerTokens)), v->tokens);
  w.set_string_array(std::string(gguf::key_pattern(gguf::Key::kTokenizerMerges)), v->merges);
  return true;
}

}  // namespace

Result<TokenizerVocab> parse_tokenizer_json(std::string_view text, int64_t vocab) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("tokenizer.json: not a JSON object");
  const json* model = member(j, "model");
  if (!model || !model->is_object())
    return invalid_argument("tokenizer.json: \"model\" is missing or not an object");
  const json* type = member(*model, "type");
  const std::string kind = type && type->is_string() ? type->get<std::string>() : "";
  if (kind != "BPE")
    return unimplemented("tokenizer.json: model type '" + kind.substr(0, 64) +
                         "' is not supported, expected a byte-level BPE");
  if (!is_byte_level(member(j, "pre_tokenizer")) && !is_byte_level(member(j, "decoder")))
    return unimplemented("tokenizer.json: a BPE without a ByteLevel pre_tokenizer or decoder is "
                         "not supported, expected a byte-level BPE");
  const json* vocab_map = member(*model, "vocab");
  if (!vocab_map || !vocab_map->is_object())
    return invalid_argument("tokenizer.json: model.vocab is missing or not an object");
  const int64_t limit = vocab > 0 ? std::min<int64_t>(vocab, kMaxTokenizerVocab) : kMaxTokenizerVocab;
  std::vector<std::pair<int64_t, std::string>> entries;
  auto add = [&](const json& id, const std::string& tok) -> Status {
    if (!id.is_number_integer())
      return invalid_argument("tokenizer.json: token '" + tok.substr(0, 64) + "' has a non-integer id");
    const int64_t x = id.get<int64_t>();
    if (x < 0 || x >= limit)  // checked before anything is sized by it
      return invalid_argument(str_cat("tokenizer.json: token id ", x, " out of range [0, ",
                                      limit, ")", (vocab > 0 ? " (the model's vocab)" : "")));
    entries.emplace_back(x, tok);
    return ok_status();
  };
  for (const auto& [tok, id] : vocab_map->items()) KVCACHE_RETURN_IF_ERROR(add(id, tok));
  if (const json* added = member(j, "added_tokens"); added && added->is_array())
    for (const auto& a : *added)
      if (a.is_object() && a.contains("id") && a.contains("content") && a["content"].is_string())
        KVCACHE_RETURN_IF_ERROR(add(a["id"], a["content"].get<std::string>()));
  if (entries.empty()) return invalid_argument("tokenizer.json: model.vocab is empty");
  int64_t max_id = 0;
  for (const auto& e : entries) max_id = std::max(max_id, e.first);
  TokenizerVocab out;
  out.tokens.resize(static_cast<size_t>(max_id + 1));
  for (size_t i = 0; i < out.tokens.size(); ++i) out.tokens[i] = str_cat("[PAD", i, "]");
  for (auto& [id, tok] : entries) out.tokens[static_cast<size_t>(id)] = std::move(tok);
  if (const json* m = member(*model, "merges"); m && m->is_array())
    for (const auto& e : *m) {
      if (e.is_string()) out.merges.push_back(e.get<std::string>());
      else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
        out.merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
      else return invalid_argument("tokenizer.json: model.merges entries must be \"a b\" or [a, b]");
    }
  return out;
}

std::vector<float> permute_rope_rows(const std::vector<float>& w, int64_t n_heads,
                                     int64_t head_dim, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t dst = h * head_dim + 2 * j + s;
        const int64_t src = h * head_dim + s * half + j;
        for (int64_t c = 0; c < cols; ++c)
          out[static_cast<size_t>(dst * cols + c)] = w[static_cast<size_t>(src * cols + c)];
      }
  return out;
}

Result<ExportReport> export_hf_to_writer(const std::string& hf_dir, TensorType dtype,
                                         gguf::GgufWriter& writer, bool with_tokenizer) {
  if (dtype != TensorType::kF32 && dtype != TensorType::kF16 && dtype != TensorType::kBF16)
    return invalid_argument("export: dtype " + std::string(gguf::to_string(dtype)) +
                            ", expected f32, f16 or bf16");
  auto cfg = read_config(hf_dir);
  if (!cfg.ok()) return cfg.status();
  if (cfg->arch.empty())
    return invalid_argument("export: model_type '" + cfg->model_type +
                            "' is not supported, expected llama, mistral, qwen2 or qwen3");
  if (!cfg->rope_scaling_type.empty() && cfg->rope_scaling_type != "linear")
    return invalid_argument("export: rope_scaling type '" + cfg->rope_scaling_type +
                            "' is not supported, expected linear (or none)");
  if (cfg->num_heads % cfg->num_kv_heads != 0)
    return invalid_argument(str_cat("export: num_attention_heads = ", cfg->num_heads,
                                    " is not a multiple of num_key_value_heads = ",
                                    cfg->num_kv_heads));
  if (!cfg->hidden_act.empty() && cfg->hidden_act != "silu")
    return invalid_argument("export: hidden_act '" + cfg->hidden_act +
                            "' is not supported, expected silu (SwiGLU MLP)");
  if (cfg->mlp_bias)
    return invalid_argument("export: mlp_bias = true is not supported (the MLP has no biases)");
  if (cfg->intermediate_size <= 0)
    return invalid_argument("export: config.json: \"intermediate_size\" is missing");
  auto ck = safetensors::Checkpoint::open(hf_dir);
  if (!ck.ok()) return ck.status();
  std::string name = hf_dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);
  Exporter e{*cfg, *ck, dtype, writer, name};
  e.hyperparameters();
  KVCACHE_RETURN_IF_ERROR(write_model_geometry(cfg->geometry, writer));
  // The tokenizer before the tensors: a refusal comes before the long work. Token ids are
  // bounded by the model's vocab (config, else the embedding's rows, checked again below).
  bool tok = false;
  if (with_tokenizer) {
    const safetensors::TensorView* embd = ck->find("model.embed_tokens.weight");
    const int64_t vocab = cfg->vocab_size > 0 ? cfg->vocab_size
                          : embd && !embd->shape.empty() ? embd->shape[0] : 0;
    Result<bool> added = add_tokenizer(hf_dir, vocab, writer);
    if (!added.ok()) return added.status();
    tok = *added;
  }
  KVCACHE_RETURN_IF_ERROR(e.tensors());
  ExportReport r;
  r.arch = cfg->arch;
  r.n_tensors = e.n_tensors;
  r.tokenizer = tok;
  r.geometry = cfg->geometry;
  return r;
}

namespace {

// InvalidArgument when `out` already exists as one of the checkpoint's input files (every
// *.json and *.safetensors in `dir`; same inode, so also through a symlink or a hard link):
// an export never overwrites its own input. An earlier export's output may be replaced.
Status check_not_input(const std::string& dir, const std::string& out) {
  struct stat o {};
  if (::stat(out.c_str(), &o) != 0) return ok_status();  // a new file
  auto is_input = [](const std::filesystem::path& p) {
    return p.extension() == ".json" || p.extension() == ".safetensors";
  };
  std::error_code ec;  // no exceptions: a listing error ends the walk
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    struct stat i {};
    if (is_input(p) && ::stat(p.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino)
      return invalid_argument("export: the output '" + out + "' is the checkpoint's own file '" +
                              p.string() + "'; choose another output path");
  }
  return ok_status();
}

}  // namespace

Result<ExportReport> export_hf(const ExportOptions& options) {
  KVCACHE_RETURN_IF_ERROR(check_not_input(options.hf_dir, options.out_path));
  gguf::GgufWriter writer;
  auto r = export_hf_to_writer(options.hf_dir, options.dtype, writer, options.with_tokenizer);
  if (!r.ok()) return r.status();
  // Written beside the target and renamed into place only once it is whole and verified.
  const std::string partial = options.out_path + ".partial";
  Status s = writer.write(partial);
  if (s.ok() && options.verify) s = options.verify(partial);
  if (s.ok() && std::rename(partial.c_str(), options.out_path.c_str()) != 0)
    s = data_loss("export: renaming '" + partial + "' to '" + options.out_path + "' failed: " +
                  std::strerror(errno));
  if (!s.ok()) {
    std::remove(partial.c_str());
    return s;
  }
  return r;
}

}  // namespace kvcache::hf
