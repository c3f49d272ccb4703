// Hugging Face config.json -> HfConfig (geometry + hyperparameters). Which layers slide, in
// order of precedence: layer_types; else, with sliding_window set: sliding_window_pattern
// P (layer i slides iff (i + 1) % P != 0, Gemma 3), Gemma 2's alternation (P = 2),
// use_sliding_window == false (none, Qwen2) or max_window_layers (Qwen2: i >= it slides),
// else every layer (Mistral v0.1). num_kv_shared_layers: see share_kv_layers.
#include <cmath>
#include <limits>

#include "core/str_cat.h"
#include "program/file_bytes.h"
#include "program/hf_import.h"

namespace kvcache::hf {
namespace {

using nlohmann::json;

// Looks a field up in the text config first, then at the top level (vocab_size and
// tie_word_embeddings sometimes live outside text_config). Null counts as absent.
struct Fields {
  const json& text;
  const json& root;
  const json* get(const char* key) const {
    for (const json* j : {&text, &root})
      if (auto it = j->find(key); it != j->end() && !it->is_null()) return &*it;
    return nullptr;
  }
};

// A value for an error message: scalars as JSON text (long ones cut), containers by kind only
// (a hostile file may nest them deeply).
std::string brief(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 64 ? s.substr(0, 64) + "..." : s;
}

Status get_int(const Fields& f, const char* key, int64_t* out, bool required, int64_t min_value,
               int64_t max_value = std::numeric_limits<int32_t>::max()) {
  const json* v = f.get(key);
  if (!v) {
    if (required) return invalid_argument(std::string("config.json: \"") + key + "\" is missing");
    return ok_status();
  }
  if (!v->is_number_integer())
    return invalid_argument(std::string("config.json: \"") + key + "\" = " + brief(*v) +
                            ", expected an integer");
  const int64_t x = v->get<int64_t>();
  if (x < min_value || x > max_value)
    return invalid_argument(str_cat("config.json: \"", key, "\" = ", x,
                                    ", expected ", min_value, "..",
                                    max_value));
  *out = x;
  return ok_status();
}

Status get_double(const Fields& f, const char* key, double* out) {
  const json* v = f.get(key);
  if (!v) return ok_status();
  if (!v->is_number())
    return invalid_argument(std::string("config.json: \"") + key + "\" = " + brief(*v) +
                            ", expected a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x <= 0.0)
    return invalid_argument(std::string("config.json: \"") + key + "\" = " + brief(*v) +
                            ", expected a finite number > 0");
  *out = x;
  return ok_status();
}

Status get_bool(const Fields& f, const char* key, bool* out) {
  const json* v = f.get(key);
  if (!v) return ok_status();
  if (!v->is_boolean())
    return invalid_argument(std::string("config.json: \"") + key + "\" = " + brief(*v) +
                            ", expected true or false");
  *out = v->get<bool>();
  return ok_status();
}

Result<std::vector<bool>> sliding_layers(const Fields& f, const HfConfig& c) {
  const auto n = static_cast<size_t>(c.num_layers);
  std::vector<bool> out(n, false);
  if (const json* types = f.get("layer_types")) {
    if (!types->is_array() || types->size() != n)
      return invalid_argument(str_cat("config.json: \"layer_types\" must be an array of ",
                                      n, " strings (num_hidden_layers)"));
    for (size_t i = 0; i < n; ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") out[i] = true;
      else if (t != "full_attention")
        return invalid_argument(str_cat("config.json: layer_types[", i, "] = ", brief(t),
                                        ", expected \"sliding_attention\" or \"full_attention\""));
    }
    for (size_t i = 0; i < n; ++i)
      if (out[i] && c.sliding_window <= 0)
        return invalid_argument(
            str_cat("config.json: layer_types[", i,
                    "] is sliding_attention but \"sliding_window\" is not set"));
    return out;
  }
  if (c.sliding_window <= 0) return out;
  int64_t pattern = c.model_type == "gemma2" ? 2 : 0;
  KVCACHE_RETURN_IF_ERROR(get_int(f, "sliding_window_pattern", &pattern, false, 1));
  bool use_sliding = true;
  KVCACHE_RETURN_IF_ERROR(get_bool(f, "use_sliding_window", &use_sliding));
  if (pattern > 0) {
    for (size_t i = 0; i < n; ++i) out[i] = sliding_by_period(static_cast<int64_t>(i), pattern);
  } else if (use_sliding) {
    int64_t from = 0;  // Qwen2: layers >= max_window_layers slide
    if (f.get("use_sliding_window")) KVCACHE_RETURN_IF_ERROR(get_int(f, "max_window_layers", &from, false, 0));
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(i) >= from;
  }
  return out;
}

std::string gguf_arch(const std::string& model_type) {
  if (model_type == "llama" || model_type == "mistral") return "llama";
  if (model_type == "qwen2" || model_type == "qwen3") return model_type;
  return "";
}

}  // namespace

Result<HfConfig> parse_config(const json& root) {
  if (!root.is_object()) return invalid_argument("config.json: not a JSON object");
  auto tc = root.find("text_config");
  const bool nested = tc != root.end() && tc->is_object();
  const Fields f{nested ? *tc : root, root};
  HfConfig c;
  if (const json* mt = f.get("model_type"); mt && mt->is_string()) c.model_type = mt->get<std::string>();
  c.arch = gguf_arch(c.model_type);
  KVCACHE_RETURN_IF_ERROR(get_int(f, "hidden_size", &c.hidden_size, true, 1));
  // Bounded before anything is sized by it (per-layer vectors below).
  KVCACHE_RETURN_IF_ERROR(get_int(f, "num_hidden_layers", &c.num_layers, true, 1, kMaxModelLayers));
  KVCACHE_RETURN_IF_ERROR(get_int(f, "num_attention_heads", &c.num_heads, true, 1));
  c.num_kv_heads = c.num_heads;
  KVCACHE_RETURN_IF_ERROR(get_int(f, "num_key_value_heads", &c.num_kv_heads, false, 1));
  c.head_dim = c.hidden_size / c.num_heads;
  KVCACHE_RETURN_IF_ERROR(get_int(f, "head_dim", &c.head_dim, false, 1));
  if (c.head_dim <= 0)
    return invalid_argument("config.json: hidden_size / num_attention_heads = 0 and no \"head_dim\"");
  KVCACHE_RETURN_IF_ERROR(get_int(f, "intermediate_size", &c.intermediate_size, false, 1));
  KVCACHE_RETURN_IF_ERROR(get_int(f, "vocab_size", &c.vocab_size, false, 1));
  KVCACHE_RETURN_IF_ERROR(get_int(f, "max_position_embeddings", &c.max_position_embeddings, false, 1));
  KVCACHE_RETURN_IF_ERROR(get_int(f, "sliding_window", &c.sliding_window, false, 0));
  KVCACHE_RETURN_IF_ERROR(get_double(f, "rope_theta", &c.rope_theta));
  KVCACHE_RETURN_IF_ERROR(get_double(f, "rms_norm_eps", &c.rms_norm_eps));
  KVCACHE_RETURN_IF_ERROR(get_bool(f, "tie_word_embeddings", &c.tie_word_embeddings));
  KVCACHE_RETURN_IF_ERROR(get_bool(f, "attention_bias", &c.attention_bias));
  KVCACHE_RETURN_IF_ERROR(get_bool(f, "mlp_bias", &c.mlp_bias));
  for (const char* k : {"hidden_act", "hidden_activation"})
    if (const json* a = f.get(k); a && a->is_string()) c.hidden_act = a->get<std::string>();
  if (const json* rs = f.get("rope_scaling")) {
    if (!rs->is_object()) return invalid_argument("config.json: \"rope_scaling\" is not an object");
    std::string type;
    for (const char* k : {"rope_type", "type"})
      if (auto it = rs->find(k); it != rs->end() && it->is_string()) type = it->get<std::string>();
    c.rope_scaling_type = type == "default" ? "" : type;
    if (type == "linear") {
      auto fac = rs->find("factor");
      if (fac == rs->end() || !fac->is_number() || !std::isfinite(fac->get<double>()) ||
          fac->get<double>() <= 0)
        return invalid_argument("config.json: rope_scaling.factor must be a finite number > 0");
      c.rope_linear_factor = fac->get<double>();
    }
  }
  auto sliding = sliding_layers(f, c);
  if (!sliding.ok()) return sliding.status();
  c.sliding = *sliding;
  std::vector<LayerGeometry> per_layer;
  for (bool s : c.sliding)
    per_layer.push_back({static_cast<int32_t>(c.num_kv_heads), static_cast<int32_t>(c.head_dim),
                         static_cast<int32_t>(c.head_dim),
                         s ? static_cast<int32_t>(c.sliding_window) : 0});
  int64_t shared = 0;
  KVCACHE_RETURN_IF_ERROR(get_int(f, "num_kv_shared_layers", &shared, false, 0));
  auto g = share_kv_layers(per_layer, shared, "config.json: num_kv_shared_layers");
  if (!g.ok()) return g.status();
  c.geometry = std::move(g).value();
  c.geometry.max_context = c.max_position_embeddings;
  KVCACHE_RETURN_IF_ERROR(validate_model_geometry(c.geometry));
  return c;
}

Result<HfConfig> read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  Result<std::string> text = read_file(path, {"config.json", file_limits::kJson, dir});
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("config.json: '" + path + "' is not valid JSON");
  return parse_config(j);
}

}  // namespace kvcache::hf
