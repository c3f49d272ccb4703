// The model fingerprint: one 64-bit value naming a model file's architecture and weights, so
// cached K/V (snapshots, shared prefix blocks) made by one model is never used by another.
// Layer: program. Specified byte for byte in docs/snapshot.md ("Model fingerprint").
#pragma once

#include <cstdint>

#include "program/gguf.h"

namespace kvcache {

// XXH3-64 (seed 0) over the canonical record described in docs/snapshot.md: the architecture
// name, every `<arch>.*` metadata key with its value, and per tensor its name, type, dims,
// data offset and an XXH3-64 of up to its first and last 4096 data bytes (so two fine-tunes
// of one base differ while the hash reads ~8 KiB per tensor). Deterministic across processes
// and machines; metadata order in the file does not matter (keys are sorted).
uint64_t model_fingerprint(const gguf::GgufFile& file);

}  // namespace kvcache
