// libFuzzer target for Hugging Face config.json: the text -> parse_config (geometry, sliding
// layers, KV sharing). An accepted config must yield a valid geometry with one entry per layer.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz_targets.h"
#include "program/hf_import.h"
#include "program/model_geometry.h"

int kvcache::fuzz::hf_config_one(const uint8_t* data, size_t size) {
  const auto* p = reinterpret_cast<const char*>(data);
  const nlohmann::json j = nlohmann::json::parse(p, p + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto c = hf::parse_config(j);
  if (!c.ok()) return 0;
  if (c->num_layers < 1 || c->num_layers > kMaxModelLayers) __builtin_trap();
  if (static_cast<int64_t>(c->sliding.size()) != c->num_layers) __builtin_trap();
  if (!validate_model_geometry(c->geometry).ok()) __builtin_trap();
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::hf_config_one)
