// Export of a Hugging Face checkpoint directory to GGUF (docs/model_format.md): tensor names,
// {arch}.* hyperparameters, kvcache.* geometry keys and, when present, a byte-level BPE
// tokenizer. Matrices are stored in the requested dtype; 1-D tensors (norms, biases) stay F32.
#include <fstream>
#include <sstream>

#include "program/hf_import.h"
#include "program/safetensors.h"

namespace kvcache::hf {
namespace {

using nlohmann::json;
using gguf::TensorType;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
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
      return invalid_argument("export: '" + src + "' has " + std::to_string(t->shape.size()) +
                              " dims, expected 1..4");
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
      return invalid_argument("export: head_dim = " + std::to_string(hd) +
                              " is odd; RoPE pairing needs an even head_dim");
    const int64_t vocab_rows = cfg.vocab_size, vocab_cols = cfg.vocab_size > 0 ? d : 0;
    KVCACHE_RETURN_IF_ERROR(copy("model.embed_tokens.weight", "token_embd.weight", true,
                                 vocab_rows, vocab_cols));
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      const std::string h = "model.layers." + std::to_string(i) + ".";
      const std::string g = "blk." + std::to_string(i) + ".";
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
    const std::string p = cfg.arch + ".";
    auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    w.set_string("general.architecture", cfg.arch);
    if (!name.empty()) w.set_string("general.name", name);
    w.set_uint32(p + "block_count", u32(cfg.num_layers));
    w.set_uint32(p + "embedding_length", u32(cfg.hidden_size));
    if (cfg.intermediate_size > 0) w.set_uint32(p + "feed_forward_length", u32(cfg.intermediate_size));
    if (cfg.max_position_embeddings > 0)
      w.set_uint32(p + "context_length", u32(cfg.max_position_embeddings));
    if (cfg.vocab_size > 0) w.set_uint32(p + "vocab_size", u32(cfg.vocab_size));
    w.set_uint32(p + "attention.head_count", u32(cfg.num_heads));
    w.set_uint32(p + "attention.head_count_kv", u32(cfg.num_kv_heads));
    w.set_uint32(p + "attention.key_length", u32(cfg.head_dim));
    w.set_uint32(p + "attention.value_length", u32(cfg.head_dim));
    w.set_float32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(cfg.rms_norm_eps));
    w.set_float32(p + "rope.freq_base", static_cast<float>(cfg.rope_theta));
    w.set_uint32(p + "rope.dimension_count", u32(cfg.head_dim));
    if (cfg.rope_linear_factor) {
      w.set_string(p + "rope.scaling.type", "linear");
      w.set_float32(p + "rope.scaling.factor", static_cast<float>(*cfg.rope_linear_factor));
    }
    bool any_sliding = false;
    for (bool s : cfg.sliding) any_sliding = any_sliding || s;
    if (any_sliding) w.set_uint32(p + "attention.sliding_window", u32(cfg.sliding_window));
  }
};

// Byte-level BPE from tokenizer.json; false when absent or of another kind.
Result<bool> add_tokenizer(const std::string& dir, gguf::GgufWriter& w) {
  std::ifstream in(dir + "/tokenizer.json");
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto is_byte_level = [](const json* x) {
    if (!x || !x->is_object()) return false;
    if (x->value("type", "") == "ByteLevel") return true;
    for (const char* list : {"pretokenizers", "decoders"})
      if (auto it = x->find(list); it != x->end() && it->is_array())
        for (const auto& e : *it)
          if (e.is_object() && e.value("type", "") == "ByteLevel") return true;
    return false;
  };
  auto find = [&](const char* k) -> const json* {
    auto it = j.find(k);
    return it == j.end() ? nullptr : &*it;
  };
  const json* model = find("model");
  if (!model || !model->is_object() || model->value("type", "") != "BPE") return false;
  if (!is_byte_level(find("pre_tokenizer")) && !is_byte_level(find("decoder"))) return false;
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) return false;
  std::vector<std::pair<int64_t, std::string>> entries;
  for (const auto& [tok, id] : vocab->items())
    if (id.is_number_integer()) entries.emplace_back(id.get<int64_t>(), tok);
  if (const json* added = find("added_tokens"); added && added->is_array())
    for (const auto& a : *added)
      if (a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
          a.contains("content") && a["content"].is_string())
        entries.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
  int64_t max_id = -1;
  for (const auto& [id, tok] : entries) {
    if (id < 0 || id >= (1 << 22))
      return invalid_argument("export: tokenizer.json token id " + std::to_string(id) +
                              " out of range [0, 2^22)");
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) return false;
  std::vector<std::string> tokens(static_cast<size_t>(max_id + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [id, tok] : entries) tokens[static_cast<size_t>(id)] = tok;
  std::vector<std::string> merges;
  if (auto m = model->find("merges"); m != model->end() && m->is_array())
    for (const auto& e : *m) {
      if (e.is_string()) merges.push_back(e.get<std::string>());
      else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
        merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
    }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_string_array("tokenizer.ggml.merges", merges);
  return true;
}

}  // namespace

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
                                         gguf::GgufWriter& writer) {
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
    return invalid_argument("export: num_attention_heads = " + std::to_string(cfg->num_heads) +
                            " is not a multiple of num_key_value_heads = " +
                            std::to_string(cfg->num_kv_heads));
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
  KVCACHE_RETURN_IF_ERROR(e.tensors());
  auto tok = add_tokenizer(hf_dir, writer);
  if (!tok.ok()) return tok.status();
  ExportReport r;
  r.arch = cfg->arch;
  r.n_tensors = e.n_tensors;
  r.tokenizer = *tok;
  r.geometry = cfg->geometry;
  return r;
}

Result<ExportReport> export_hf(const ExportOptions& options) {
  gguf::GgufWriter writer;
  auto r = export_hf_to_writer(options.hf_dir, options.dtype, writer);
  if (!r.ok()) return r.status();
  KVCACHE_RETURN_IF_ERROR(writer.write(options.out_path));
  return r;
}

}  // namespace kvcache::hf
