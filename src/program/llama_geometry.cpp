// Cache geometry from llama.cpp's standard keys (files without kvcache.* keys).
// Sliding layers: {arch}.attention.sliding_window gives W; which layers slide comes from
// {arch}.attention.sliding_window_pattern when present (a period, read as llama.cpp's
// set_swa_pattern: layer i slides iff period == 0 or (i + 1) % period != 0; or a BOOL array
// per layer, true = sliding), else from the architecture: gemma2 2, gemma3 6, gemma3n 5,
// cohere2 4, gpt-oss 2 (all with the same period rule); every other architecture: no layer
// slides. A gemma2 file without sliding_window slides at 4096 (Gemma 2's window, as
// llama.cpp). {arch}.attention.shared_kv_layers: the last N layers own no cache (share_kv_layers).
#include <limits>
#include <map>

#include "core/str_cat.h"
#include "program/gguf_keys.h"
#include "program/model_geometry.h"

namespace kvcache {
namespace {

using gguf::Key;

constexpr int64_t kMaxLayers = kMaxModelLayers;

// A per-layer integer key: a scalar broadcast to every layer or an array of n_layers.
// NotFound when absent (callers supply defaults).
Result<std::vector<int64_t>> per_layer_ints(const gguf::KeyReader& keys, Key k,
                                            int64_t n_layers) {
  const std::string key = keys.name(k);
  const gguf::Value* v = keys.find(k);
  if (!v) return not_found("gguf: " + key + " is missing");
  if (v->type == gguf::ValueType::kArray) {
    auto a = keys.get_int_array(k);
    if (!a.ok()) return a.status();
    if (static_cast<int64_t>(a->size()) != n_layers)
      return invalid_argument(str_cat("gguf: ", key, " has ", a->size(),
                                      " entries, expected ", n_layers, " (block_count)"));
    return a;
  }
  auto s = keys.get_int(k);
  if (!s.ok()) return s.status();
  return std::vector<int64_t>(static_cast<size_t>(n_layers), *s);
}

std::string at(const std::string& key, const gguf::Value* v, size_t i) {
  return v && v->type == gguf::ValueType::kArray ? str_cat(key, "[", i, "]") : key;
}

// Range-checks per-layer values: > 0 and <= INT32_MAX. A 0 head count is llama.cpp's marker
// for a layer without attention, which kvcache does not run.
Status check_positive(const gguf::GgufFile& f, const std::string& key,
                      const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0 && key.find("head_count") != std::string::npos)
      return invalid_argument("gguf: " + at(key, f.find(key), i) +
                              " = 0: layers without attention are not supported (kvcache runs "
                              "attention on every layer)");
    if (v[i] <= 0 || v[i] > std::numeric_limits<int32_t>::max())
      return invalid_argument(str_cat("gguf: ", at(key, f.find(key), i), " = ", v[i],
                                      ", expected > 0"));
  }
  return ok_status();
}

// Period used when the file names a sliding window but no pattern; 1 = no layer slides.
int64_t arch_period(const std::string& arch) {
  static const std::map<std::string, int64_t> kPeriods = {
      {"gemma2", 2}, {"gemma3", 6}, {"gemma3n", 5}, {"cohere2", 4}, {"gpt-oss", 2}};
  auto it = kPeriods.find(arch);
  return it == kPeriods.end() ? 1 : it->second;
}

// The window used when {arch}.attention.sliding_window is absent; 0 = no sliding layer.
int64_t arch_default_window(const std::string& arch) { return arch == "gemma2" ? 4096 : 0; }

Result<std::vector<bool>> sliding_layers(const gguf::KeyReader& keys, int64_t n_layers) {
  const std::string key = keys.name(Key::kSlidingWindowPattern);
  std::vector<bool> out(static_cast<size_t>(n_layers));
  const gguf::Value* v = keys.find(Key::kSlidingWindowPattern);
  if (v && v->type == gguf::ValueType::kArray) {
    if (v->elem_type != gguf::ValueType::kBool)
      return invalid_argument("gguf: " + key + " has type ARRAY of " +
                              std::string(gguf::to_string(v->elem_type)) +
                              ", expected ARRAY of BOOL or an integer period");
    const auto& es = std::get<std::vector<gguf::Value>>(v->data);
    if (static_cast<int64_t>(es.size()) != n_layers)
      return invalid_argument(str_cat("gguf: ", key, " has ", es.size(),
                                      " entries, expected ", n_layers, " (block_count)"));
    for (size_t i = 0; i < es.size(); ++i) out[i] = std::get<bool>(es[i].data);
    return out;
  }
  int64_t period = arch_period(keys.arch());
  if (v) {
    auto p = keys.get_int(Key::kSlidingWindowPattern);
    if (!p.ok()) return p.status();
    if (*p < 0)
      return invalid_argument(str_cat("gguf: ", key, " = ", *p, ", expected >= 0"));
    period = *p;
  }
  for (int64_t i = 0; i < n_layers; ++i) out[static_cast<size_t>(i)] = sliding_by_period(i, period);
  return out;
}

}  // namespace

bool sliding_by_period(int64_t layer, int64_t period) {
  return period == 0 || (layer + 1) % period != 0;
}

Result<ModelGeometry> share_kv_layers(const std::vector<LayerGeometry>& per_layer,
                                      int64_t shared_kv_layers, const std::string& what) {
  const auto n = static_cast<int64_t>(per_layer.size());
  if (shared_kv_layers < 0 || shared_kv_layers >= n)
    return invalid_argument(str_cat(what, " = ", shared_kv_layers, ", expected 0..",
                                    n - 1, " (fewer than the ", n,
                                    " layers)"));
  const int64_t n_cache = n - shared_kv_layers;
  ModelGeometry g;
  for (int64_t i = 0; i < n_cache; ++i) {
    g.cache.layers.push_back(per_layer[static_cast<size_t>(i)]);
    g.layer_cache.push_back(static_cast<int32_t>(i));
  }
  // The last owning layer of each type; O(n) overall.
  int64_t last_owner[2] = {-1, -1};  // [full, sliding]
  for (int64_t i = 0; i < n_cache; ++i) last_owner[per_layer[static_cast<size_t>(i)].sliding()] = i;
  for (int64_t i = n_cache; i < n; ++i) {
    const bool sliding = per_layer[static_cast<size_t>(i)].sliding();
    const int64_t owner = last_owner[sliding];
    if (owner < 0)
      return invalid_argument(str_cat(what, ": shared layer ", i, " is ",
                                      (sliding ? "sliding" : "full"),
                                      " but no earlier layer of that type owns a cache"));
    g.layer_cache.push_back(static_cast<int32_t>(owner));
  }
  return g;
}

Result<ModelGeometry> derive_llama_geometry(const gguf::GgufFile& f) {
  auto opened = gguf::KeyReader::open(f);
  if (!opened.ok())
    return Status(opened.status().code(),
                  "gguf: no kvcache.* keys and no usable general.architecture to derive the cache "
                  "geometry from (" + opened.status().message() + ")");
  const gguf::KeyReader& keys = *opened;
  auto n_r = keys.get_int(Key::kBlockCount);
  if (!n_r.ok()) return n_r.status();
  const int64_t n = *n_r;
  if (n <= 0 || n > kMaxLayers)
    return invalid_argument(str_cat("gguf: ", keys.name(Key::kBlockCount), " = ", n,
                                    ", expected 1..", kMaxLayers));
  auto heads = per_layer_ints(keys, Key::kHeadCount, n);
  if (!heads.ok()) return heads.status();
  KVCACHE_RETURN_IF_ERROR(check_positive(f, keys.name(Key::kHeadCount), *heads));
  std::vector<int64_t> kv_heads = *heads;
  if (keys.find(Key::kHeadCountKv)) {
    auto kv = per_layer_ints(keys, Key::kHeadCountKv, n);
    if (!kv.ok()) return kv.status();
    kv_heads = *kv;
  }
  KVCACHE_RETURN_IF_ERROR(check_positive(f, keys.name(Key::kHeadCountKv), kv_heads));

  auto embd = keys.get_int_or(Key::kEmbeddingLength, 0);
  if (!embd.ok()) return embd.status();
  auto key_len = keys.get_int_or(Key::kKeyLength, 0);
  if (!key_len.ok()) return key_len.status();
  auto value_len = keys.get_int_or(Key::kValueLength, 0);
  if (!value_len.ok()) return value_len.status();
  auto window = keys.get_int_or(Key::kSlidingWindow, arch_default_window(keys.arch()));
  if (!window.ok()) return window.status();
  if (*window < 0 || *window > std::numeric_limits<int32_t>::max())
    return invalid_argument(str_cat("gguf: ", keys.name(Key::kSlidingWindow), " = ",
                                    *window, ", expected >= 0"));
  std::vector<bool> sliding(static_cast<size_t>(n), false);
  if (*window > 0) {
    auto s = sliding_layers(keys, n);
    if (!s.ok()) return s.status();
    sliding = *s;
  }

  std::vector<LayerGeometry> per_layer;
  for (int64_t i = 0; i < n; ++i) {
    const auto ui = static_cast<size_t>(i);
    const int64_t fallback = (*embd > 0) ? *embd / (*heads)[ui] : 0;
    const int64_t k = *key_len > 0 ? *key_len : fallback;
    const int64_t v = *value_len > 0 ? *value_len : fallback;
    if (k <= 0 || v <= 0 || k > std::numeric_limits<int32_t>::max() ||
        v > std::numeric_limits<int32_t>::max())
      return invalid_argument(str_cat("gguf: layer ", i, ": key/value width ", k, "/", v, " from ",
                                      keys.name(Key::kKeyLength),
                                      "/value_length or embedding_length / head_count, "
                                      "expected > 0"));
    LayerGeometry l;
    l.kv_heads = static_cast<int32_t>(kv_heads[ui]);
    l.head_dim = static_cast<int32_t>(k);
    l.value_dim = static_cast<int32_t>(v);
    l.window = sliding[ui] ? static_cast<int32_t>(*window) : 0;
    per_layer.push_back(l);
  }
  auto shared = keys.get_int_or(Key::kSharedKvLayers, 0);
  if (!shared.ok()) return shared.status();
  auto g = share_kv_layers(per_layer, *shared, "gguf: " + keys.name(Key::kSharedKvLayers));
  if (!g.ok()) return g.status();
  auto ctx = keys.get_int_or(Key::kContextLength, 0);
  if (ctx.ok() && *ctx > 0 && *ctx <= std::numeric_limits<uint32_t>::max()) g->max_context = *ctx;
  return g;
}

}  // namespace kvcache

namespace kvcache {

Result<ModelGeometry> with_windows(const ModelGeometry& g, std::span<const int32_t> windows) {
  if (windows.empty())
    return invalid_argument("windows = {}, expected a non-empty list, e.g. {0, 512} (0 = Full)");
  for (size_t i = 0; i < windows.size(); ++i)
    if (windows[i] < 0)
      return invalid_argument(
          str_cat("windows[", i, "] = ", windows[i], ", expected >= 0 (0 = Full)"));
  ModelGeometry r = g;
  for (size_t c = 0; c < r.cache.layers.size(); ++c)
    r.cache.layers[c].window = windows[c % windows.size()];
  return r;
}

ModelGeometry example_model_geometry() {
  ModelGeometry g;
  for (int32_t i = 0; i < 26; ++i) {
    g.cache.layers.push_back({4, 256, 256, sliding_by_period(i, 6) ? 512 : 0});
    g.layer_cache.push_back(i);
  }
  g.max_context = 32768;
  return g;
}

}  // namespace kvcache
