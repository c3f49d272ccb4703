// Helpers shared by the program tests: small GGUF files built with the writer, raw byte
// patching, and temporary directories.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "program/gguf.h"

namespace kvcache::testing {

// A fresh, empty directory under the system temp dir, unique per test.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("kvcache_program_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p);
  out << s;
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// A valid file with a few keys and two F32 tensors [2,3] and [4] (ggml dims).
inline std::vector<uint8_t> small_valid_file() {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", 2);
  w.set_uint32("llama.attention.head_count", 4);
  w.set_uint32("llama.attention.head_count_kv", 2);
  w.set_uint32("llama.embedding_length", 32);
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const float b[4] = {-1, -2, -3, -4};
  (void)w.add_tensor_f32("a", {3, 2}, a);
  (void)w.add_tensor_f32("b", {4}, b);
  return w.bytes();
}

}  // namespace kvcache::testing
