// The fuzz targets' entry points, one function per input format. Layer: fuzz (test code).
// Each target file defines its function and, through KVCACHE_FUZZ_ENTRY, the libFuzzer entry
// when built as a fuzzer (KVCACHE_LIBFUZZER); the normal test builds call the functions
// directly to replay the committed corpora (tests/program/fuzz_replay.h).
// A target returns 0; any crash, sanitizer report or broken invariant (__builtin_trap) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvcache::fuzz {

int gguf_one(const uint8_t* data, size_t size);         // gguf_fuzz.cpp
int hf_config_one(const uint8_t* data, size_t size);    // hf_config_fuzz.cpp
int safetensors_one(const uint8_t* data, size_t size);  // safetensors_fuzz.cpp
int tokenizer_json_one(const uint8_t* data, size_t size);  // tokenizer_json_fuzz.cpp
int op_test_one(const uint8_t* data, size_t size);      // op_test_fuzz.cpp
int snapshot_one(const uint8_t* data, size_t size);     // snapshot_fuzz.cpp

}  // namespace kvcache::fuzz

#ifdef KVCACHE_LIBFUZZER
#define KVCACHE_FUZZ_ENTRY(fn)                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {    \
    return fn(data, size);                                                     \
  }
#else
#define KVCACHE_FUZZ_ENTRY(fn)
#endif
