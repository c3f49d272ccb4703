// The cache geometry a model file publishes: from the kvcache.* keys of SPEC §7 when present,
// else derived from llama.cpp's standard keys and per-architecture layer patterns.
// Layer: program. Reader and writer enforce the same invariants; errors name key, index, value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"
#include "program/gguf.h"

namespace kvcache {

// Most model layers (and cache layers) a file may declare; real models have a few hundred.
inline constexpr int64_t kMaxModelLayers = 4096;

struct ModelGeometry {
  CacheGeometry cache;               // one entry per cache layer
  std::vector<int32_t> layer_cache;  // per model layer: the cache layer it reads
  int64_t max_context = 0;           // 0 = unknown
  int64_t max_step_tokens = 0;       // 0 = unset
  friend bool operator==(const ModelGeometry&, const ModelGeometry&) = default;
};

// InvalidArgument naming the field/index/value when inconsistent (also runs valid(cache)).
Status validate_model_geometry(const ModelGeometry& g);

// kvcache.* keys when present; else llama.cpp-style keys under general.architecture. Either
// way a cache layer's `sinks` flag is set when the model layer owning it carries the tensor
// sink_tensor_name(layer); model layers sharing a cache layer must agree (else InvalidArgument
// naming both tensors).
Result<ModelGeometry> read_model_geometry(const gguf::GgufFile& file);
// "blk.<layer>.attn_sinks.weight": learned attention-sink logits, one f32 per query head.
std::string sink_tensor_name(int64_t layer);
// Writes the kvcache.* keys; refuses what the reader would refuse.
Status write_model_geometry(const ModelGeometry& g, gguf::GgufWriter& writer);

// --- added -------------------------------------------------------------------------------
// The llama.cpp-style derivation alone (ignores kvcache.* keys). See llama_geometry.cpp for
// the per-architecture sliding patterns.
Result<ModelGeometry> derive_llama_geometry(const gguf::GgufFile& file);

// Per model layer geometry plus a KV-sharing count -> ModelGeometry: the first
// n_layers - shared_kv_layers layers own a cache each; each of the last shared_kv_layers
// layers reads the last earlier owning layer of the same type (sliding vs full).
// InvalidArgument (prefixed by `what`) when shared_kv_layers is out of [0, n_layers) or a
// shared layer has no earlier owner of its type.
Result<ModelGeometry> share_kv_layers(const std::vector<LayerGeometry>& per_layer,
                                      int64_t shared_kv_layers, const std::string& what);

// Sliding layer pattern with a period, as llama.cpp's set_swa_pattern: layer i slides iff
// period == 0 or (i % period) < period - 1, i.e. (i + 1) % period != 0.
bool sliding_by_period(int64_t layer, int64_t period);

// The one window override (run, inspect, the engine's cache plan): replaces only the
// policies, cache layer c gets windows[c % windows.size()] (0 = Full); max_step_tokens stays
// (a step may be wider than a window). InvalidArgument naming the field ("windows = {}",
// "windows[1] = -2") for an empty list or a negative entry.
Result<ModelGeometry> with_windows(const ModelGeometry& g, std::span<const int32_t> windows);

// A built-in example (the inspect tool's): Gemma-3-like, 26 layers, 4 kv heads, head_dim 256,
// five Sliding(512) layers then one Full, max_context 32768.
ModelGeometry example_model_geometry();

}  // namespace kvcache
