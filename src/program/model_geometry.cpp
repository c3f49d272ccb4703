// The kvcache.* keys of SPEC §7: reading, writing and the one set of invariants both use.
// Values are checked as raw integers before any narrowing, so a message can quote the value
// exactly as the file holds it.
#include <limits>

#include "core/str_cat.h"
#include "program/gguf_keys.h"
#include "program/model_geometry.h"

namespace kvcache {
namespace {

// Fixed names from the key table (its entries are string literals, so .data() ends in NUL).
constexpr const char* kKvHeads = gguf::key_pattern(gguf::Key::kCacheKvHeads).data();
constexpr const char* kHeadDims = gguf::key_pattern(gguf::Key::kCacheHeadDims).data();
constexpr const char* kValueDims = gguf::key_pattern(gguf::Key::kCacheValueDims).data();
constexpr const char* kWindows = gguf::key_pattern(gguf::Key::kCacheWindows).data();
constexpr const char* kLayerCache = gguf::key_pattern(gguf::Key::kLayerCache).data();
constexpr const char* kMaxContext = gguf::key_pattern(gguf::Key::kMaxContext).data();
constexpr const char* kMaxStepTokens = gguf::key_pattern(gguf::Key::kMaxStepTokens).data();

struct RawGeometry {
  std::vector<int64_t> kv_heads, head_dims, value_dims, windows, layer_cache;
  bool has_value_dims = false;
  bool has_layer_cache = false;
  int64_t max_context = 0;
  int64_t max_step_tokens = 0;
};

std::string entry(const char* key, size_t i, int64_t v, const char* expected) {
  return str_cat(key, "[", i, "] = ", v, ", expected ",
                 expected);
}

Status check_raw(const RawGeometry& r, const std::string& who) {
  const size_t n = r.kv_heads.size();
  if (n == 0)
    return invalid_argument(who + std::string(kKvHeads) +
                            " is empty, expected one entry per cache layer");
  if (static_cast<int64_t>(n) > kMaxModelLayers)
    return invalid_argument(str_cat(who, kKvHeads, " has ", n, " entries, expected <= ",
                                    kMaxModelLayers));
  if (static_cast<int64_t>(r.layer_cache.size()) > kMaxModelLayers)
    return invalid_argument(str_cat(who, kLayerCache, " has ", r.layer_cache.size(),
                                    " entries, expected <= ", kMaxModelLayers));
  auto same_length = [&](const char* key, const std::vector<int64_t>& a) -> Status {
    if (a.size() == n) return ok_status();
    return invalid_argument(str_cat(who, key, " has ", a.size(),
                                    " entries, expected ", n, " (as ", kKvHeads, ")"));
  };
  KVCACHE_RETURN_IF_ERROR(same_length(kHeadDims, r.head_dims));
  KVCACHE_RETURN_IF_ERROR(same_length(kWindows, r.windows));
  if (r.has_value_dims) KVCACHE_RETURN_IF_ERROR(same_length(kValueDims, r.value_dims));
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < n; ++i) {
    if (r.kv_heads[i] <= 0 || r.kv_heads[i] > kMax)
      return invalid_argument(who + entry(kKvHeads, i, r.kv_heads[i], "> 0"));
    if (r.head_dims[i] <= 0 || r.head_dims[i] > kMax)
      return invalid_argument(who + entry(kHeadDims, i, r.head_dims[i], "> 0"));
    if (r.has_value_dims && (r.value_dims[i] <= 0 || r.value_dims[i] > kMax))
      return invalid_argument(who + entry(kValueDims, i, r.value_dims[i], "> 0"));
    if (r.windows[i] < 0 || r.windows[i] > kMax)
      return invalid_argument(who + entry(kWindows, i, r.windows[i], ">= 0 (0 = full)"));
  }
  if (r.has_layer_cache) {
    if (r.layer_cache.empty())
      return invalid_argument(who + kLayerCache + " is empty, expected one entry per model layer");
    const std::string range = str_cat("in [0, ", n, ")");
    for (size_t i = 0; i < r.layer_cache.size(); ++i)
      if (r.layer_cache[i] < 0 || r.layer_cache[i] >= static_cast<int64_t>(n))
        return invalid_argument(who + entry(kLayerCache, i, r.layer_cache[i], range.c_str()));
  }
  if (r.max_context < 0 || r.max_context > std::numeric_limits<uint32_t>::max())
    return invalid_argument(str_cat(who, kMaxContext, " = ", r.max_context,
                                    ", expected 0..4294967295 (0 = unknown)"));
  if (r.max_step_tokens < 0 || r.max_step_tokens > kMax)
    return invalid_argument(str_cat(who, kMaxStepTokens, " = ", r.max_step_tokens,
                                    ", expected 0..2147483647 (0 = unset)"));
  return ok_status();
}

ModelGeometry from_raw(const RawGeometry& r) {
  ModelGeometry g;
  for (size_t i = 0; i < r.kv_heads.size(); ++i) {
    LayerGeometry l;
    l.kv_heads = static_cast<int32_t>(r.kv_heads[i]);
    l.head_dim = static_cast<int32_t>(r.head_dims[i]);
    l.value_dim = static_cast<int32_t>(r.has_value_dims ? r.value_dims[i] : r.head_dims[i]);
    l.window = static_cast<int32_t>(r.windows[i]);
    g.cache.layers.push_back(l);
  }
  for (int64_t c : r.layer_cache) g.layer_cache.push_back(static_cast<int32_t>(c));
  g.max_context = r.max_context;
  g.max_step_tokens = r.max_step_tokens;
  return g;
}

RawGeometry to_raw(const ModelGeometry& g) {
  RawGeometry r;
  r.has_value_dims = true;
  r.has_layer_cache = true;
  for (const auto& l : g.cache.layers) {
    r.kv_heads.push_back(l.kv_heads);
    r.head_dims.push_back(l.head_dim);
    r.value_dims.push_back(l.value_dim);
    r.windows.push_back(l.window);
  }
  r.layer_cache.assign(g.layer_cache.begin(), g.layer_cache.end());
  r.max_context = g.max_context;
  r.max_step_tokens = g.max_step_tokens;
  return r;
}

std::string type_name(const gguf::Value& v) {
  if (v.type == gguf::ValueType::kArray)
    return "ARRAY of " + std::string(gguf::to_string(v.elem_type));
  return std::string(gguf::to_string(v.type));
}

// An INT32 array key, exactly: any other type is refused (INT32 is part of the contract).
Status read_i32_array(const gguf::GgufFile& f, const char* key, std::vector<int64_t>* out) {
  const gguf::Value* v = f.find(key);
  if (v->type != gguf::ValueType::kArray || v->elem_type != gguf::ValueType::kInt32)
    return invalid_argument("gguf: " + std::string(key) + " has type " + type_name(*v) +
                            ", expected ARRAY of INT32");
  for (const auto& e : std::get<std::vector<gguf::Value>>(v->data))
    out->push_back(std::get<int64_t>(e.data));
  return ok_status();
}

// An optional UINT32 key; 0 when absent.
Status read_u32(const gguf::GgufFile& f, const char* key, int64_t* out) {
  const gguf::Value* v = f.find(key);
  if (!v) return ok_status();
  if (v->type != gguf::ValueType::kUint32)
    return invalid_argument("gguf: " + std::string(key) + " has type " + type_name(*v) +
                            ", expected UINT32");
  *out = static_cast<int64_t>(std::get<uint64_t>(v->data));
  return ok_status();
}

// {arch}.block_count when the file has both; nullopt otherwise.
std::optional<int64_t> block_count(const gguf::GgufFile& f) {
  auto keys = gguf::KeyReader::open(f);
  if (!keys.ok()) return std::nullopt;
  auto n = keys->get_int(gguf::Key::kBlockCount);
  if (!n.ok()) return std::nullopt;
  return *n;
}

Result<ModelGeometry> read_kvcache_keys(const gguf::GgufFile& f) {
  for (const char* key : {kKvHeads, kHeadDims, kWindows})
    if (!f.find(key))
      return invalid_argument(std::string("gguf: ") + key + " is missing; " + kKvHeads + ", " +
                              kHeadDims + " and " + kWindows + " go together");
  RawGeometry r;
  KVCACHE_RETURN_IF_ERROR(read_i32_array(f, kKvHeads, &r.kv_heads));
  KVCACHE_RETURN_IF_ERROR(read_i32_array(f, kHeadDims, &r.head_dims));
  KVCACHE_RETURN_IF_ERROR(read_i32_array(f, kWindows, &r.windows));
  if (f.find(kValueDims)) {
    r.has_value_dims = true;
    KVCACHE_RETURN_IF_ERROR(read_i32_array(f, kValueDims, &r.value_dims));
  }
  r.has_layer_cache = f.find(kLayerCache) != nullptr;
  if (r.has_layer_cache) KVCACHE_RETURN_IF_ERROR(read_i32_array(f, kLayerCache, &r.layer_cache));
  KVCACHE_RETURN_IF_ERROR(read_u32(f, kMaxContext, &r.max_context));
  KVCACHE_RETURN_IF_ERROR(read_u32(f, kMaxStepTokens, &r.max_step_tokens));
  KVCACHE_RETURN_IF_ERROR(check_raw(r, "gguf: "));
  const auto n_layers = block_count(f);
  if (!r.has_layer_cache) {
    // Default: every model layer owns its cache layer.
    if (n_layers && *n_layers != static_cast<int64_t>(r.kv_heads.size()))
      return invalid_argument(str_cat("gguf: ", kLayerCache, " is missing and block_count = ",
                                      *n_layers, " differs from the ",
                                      r.kv_heads.size(), " cache layers"));
    for (size_t i = 0; i < r.kv_heads.size(); ++i) r.layer_cache.push_back(static_cast<int64_t>(i));
  } else if (n_layers && *n_layers != static_cast<int64_t>(r.layer_cache.size())) {
    return invalid_argument(str_cat("gguf: ", kLayerCache, " has ",
                                    r.layer_cache.size(), " entries, expected ",
                                    *n_layers, " (block_count)"));
  }
  ModelGeometry g = from_raw(r);
  if (auto why = why_invalid(g.cache)) return invalid_argument("gguf: kvcache.cache: " + why->message());
  return g;
}

// Learned attention sinks: a cache layer has them when the model layer owning it (the first
// that reads it) carries blk.N.attn_sinks.weight. Every model layer reading one cache layer
// must agree, since the cache applies one flag per layer. The tensor's shape is the engine's
// to check.
Status mark_sinks(const gguf::GgufFile& f, ModelGeometry& g) {
  std::vector<int32_t> owner(g.cache.layers.size(), -1);
  for (size_t i = 0; i < g.layer_cache.size(); ++i) {
    const auto c = static_cast<size_t>(g.layer_cache[i]);
    const bool has = f.tensor(sink_tensor_name(static_cast<int64_t>(i))) != nullptr;
    if (owner[c] < 0) {
      owner[c] = static_cast<int32_t>(i);
      g.cache.layers[c].sinks = has;
    } else if (g.cache.layers[c].sinks != has) {
      return invalid_argument(str_cat(
          "gguf: ", sink_tensor_name(static_cast<int64_t>(i)), " is ", has ? "present" : "absent",
          " but ", sink_tensor_name(owner[c]), " is ", has ? "absent" : "present",
          "; model layers ", owner[c], " and ", i, " read cache layer ", c,
          ", which applies one sinks flag"));
    }
  }
  return ok_status();
}

}  // namespace

std::string sink_tensor_name(int64_t layer) {
  return str_cat("blk.", layer, ".attn_sinks.weight");
}

Status validate_model_geometry(const ModelGeometry& g) {
  KVCACHE_RETURN_IF_ERROR(check_raw(to_raw(g), ""));
  if (auto why = why_invalid(g.cache)) return invalid_argument("kvcache.cache: " + why->message());
  return ok_status();
}

Result<ModelGeometry> read_model_geometry(const gguf::GgufFile& file) {
  for (const char* key : {kKvHeads, kHeadDims, kValueDims, kWindows, kLayerCache})
    if (file.find(key)) {
      Result<ModelGeometry> g = read_kvcache_keys(file);
      if (g.ok()) KVCACHE_RETURN_IF_ERROR(mark_sinks(file, *g));
      return g;
    }
  auto derived = derive_llama_geometry(file);
  if (!derived.ok()) return derived.status();
  ModelGeometry g = std::move(derived).value();
  int64_t max_context = 0, max_step = 0;
  KVCACHE_RETURN_IF_ERROR(read_u32(file, kMaxContext, &max_context));
  KVCACHE_RETURN_IF_ERROR(read_u32(file, kMaxStepTokens, &max_step));
  if (max_context > 0) g.max_context = max_context;
  if (max_step > 0) g.max_step_tokens = max_step;
  KVCACHE_RETURN_IF_ERROR(mark_sinks(file, g));
  Status s = validate_model_geometry(g);
  if (!s.ok()) return Status(s.code(), "gguf: " + s.message());
  return g;
}

Status write_model_geometry(const ModelGeometry& g, gguf::GgufWriter& writer) {
  Status s = validate_model_geometry(g);
  if (!s.ok()) return Status(s.code(), "write_model_geometry: " + s.message());
  std::vector<int32_t> heads, dims, vdims, windows;
  for (const auto& l : g.cache.layers) {
    heads.push_back(l.kv_heads);
    dims.push_back(l.head_dim);
    vdims.push_back(l.value_dim);
    windows.push_back(l.window);
  }
  writer.set_int32_array(kKvHeads, heads);
  writer.set_int32_array(kHeadDims, dims);
  writer.set_int32_array(kValueDims, vdims);
  writer.set_int32_array(kWindows, windows);
  writer.set_int32_array(kLayerCache, g.layer_cache);
  if (g.max_context > 0) writer.set_uint32(kMaxContext, static_cast<uint32_t>(g.max_context));
  if (g.max_step_tokens > 0)
    writer.set_uint32(kMaxStepTokens, static_cast<uint32_t>(g.max_step_tokens));
  return ok_status();
}

}  // namespace kvcache
