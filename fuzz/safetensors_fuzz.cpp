// libFuzzer target for safetensors files: header length, JSON header, offsets, then every
// tensor of a convertible dtype through to_f32 (whose size must match the shape).
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_targets.h"
#include "program/safetensors.h"

int kvcache::fuzz::safetensors_one(const uint8_t* data, size_t size) {
  auto file = safetensors::SafetensorsFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  for (const auto& t : file->tensors()) {
    if (file->find(t.name) == nullptr) __builtin_trap();
    auto values = safetensors::to_f32(t);
    const bool convertible = t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16";
    if (values.ok() != convertible) __builtin_trap();
    if (values.ok() && static_cast<int64_t>(values->size()) != t.n_elements()) __builtin_trap();
  }
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::safetensors_one)
