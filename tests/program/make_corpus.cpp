// Writes the seed corpus for fuzz/gguf_fuzz.cpp: small valid files (kvcache keys, llama.cpp
// style with sliding patterns and KV sharing, every metadata type, every tensor type) and
// broken variants. Usage: program_make_corpus DIR. Files stay under 4 KiB (-max_len=4096).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "program/gguf.h"
#include "program/model_geometry.h"

using namespace kvcache;
using namespace kvcache::gguf;

namespace {

void save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& b) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  std::printf("%s/%s: %zu bytes\n", dir.c_str(), name.c_str(), b.size());
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  if (at + sizeof v <= b.size()) std::memcpy(b.data() + at, &v, sizeof v);
}

GgufWriter with_tensors() {
  GgufWriter w;
  const std::vector<float> v = {1, -2, 0.5f, 3, 4, 5, 6, 7};
  (void)w.add_tensor_f32("t.f32", {4, 2}, v);
  (void)w.add_tensor_f32("t.f16", {8}, v, TensorType::kF16);
  (void)w.add_tensor_f32("t.bf16", {2, 2, 2}, v, TensorType::kBF16);
  std::vector<uint8_t> q(34, 3);
  q[0] = 0x00;
  q[1] = 0x3C;
  (void)w.add_tensor("t.q8", TensorType::kQ8_0, {32}, q);
  return w;
}

GgufWriter llama_style(const std::string& arch, uint32_t layers, uint32_t window) {
  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_uint32(arch + ".block_count", layers);
  w.set_uint32(arch + ".embedding_length", 64);
  w.set_uint32(arch + ".attention.head_count", 4);
  w.set_uint32(arch + ".attention.head_count_kv", 2);
  if (window) w.set_uint32(arch + ".attention.sliding_window", window);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: program_make_corpus DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  ModelGeometry g;
  g.cache.layers = {{8, 64, 64, 0}, {4, 80, 80, 512}, {2, 96, 96, 128}};
  g.layer_cache = {0, 1, 2, 1};
  g.max_context = 4096;
  g.max_step_tokens = 64;
  GgufWriter kv = with_tensors();
  kv.set_string("general.architecture", "llama");
  (void)write_model_geometry(g, kv);
  const auto valid = kv.bytes();
  save(dir, "valid_kvcache.gguf", valid);

  save(dir, "valid_gemma3.gguf", llama_style("gemma3", 7, 512).bytes());
  save(dir, "valid_gemma2.gguf", llama_style("gemma2", 3, 64).bytes());
  save(dir, "valid_cohere2.gguf", llama_style("cohere2", 5, 64).bytes());
  save(dir, "valid_gpt_oss.gguf", llama_style("gpt-oss", 4, 128).bytes());
  GgufWriter n3 = llama_style("gemma3n", 10, 32);
  n3.set_uint32("gemma3n.attention.shared_kv_layers", 4);
  save(dir, "valid_gemma3n_shared.gguf", n3.bytes());
  GgufWriter arr = llama_style("llama", 3, 0);
  arr.set_int32_array("llama.attention.head_count_kv", std::vector<int32_t>{8, 4, 2});
  arr.set("llama.attention.sliding_window_pattern",
          array_value(ValueType::kBool, {bool_value(true), bool_value(false), bool_value(true)}));
  arr.set_uint32("llama.attention.sliding_window", 16);
  save(dir, "valid_headcount_array.gguf", arr.bytes());

  GgufWriter all;
  all.set("u8", uint_value(ValueType::kUint8, 1));
  all.set("i8", int_value(ValueType::kInt8, -1));
  all.set("u16", uint_value(ValueType::kUint16, 2));
  all.set("i16", int_value(ValueType::kInt16, -2));
  all.set("i64", int_value(ValueType::kInt64, -3));
  all.set("u64", uint_value(ValueType::kUint64, 3));
  all.set("f64", float_value(ValueType::kFloat64, 0.25));
  all.set_float32("f32", 0.5f);
  all.set_bool("b", true);
  all.set_string_array("s", std::vector<std::string>{"x", "yy"});
  all.set("nested", array_value(ValueType::kArray,
                                {array_value(ValueType::kInt8, {int_value(ValueType::kInt8, 1)})}));
  save(dir, "valid_all_types.gguf", all.bytes());
  GgufWriter aligned(64);
  (void)aligned.add_tensor_f32("x", {2}, std::vector<float>{1, 2});
  save(dir, "valid_align64.gguf", aligned.bytes());
  // Block types the engine computes with, and a known (Q3_K) and an unknown (77) type it only
  // parses: the fuzzer mutates block headers, scales and type numbers from here.
  GgufWriter quant;
  std::vector<float> ramp(256);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 23) * 0.1f - 1.0f;
  for (TensorType t : {TensorType::kQ4_0, TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K,
                       TensorType::kQ6_K})
    (void)quant.add_tensor_f32("t." + to_string(t), {256}, ramp, t);
  (void)quant.add_tensor("t.q3k", TensorType::kQ3_K, {256}, std::vector<uint8_t>(110, 7));
  save(dir, "valid_quant_types.gguf", quant.bytes());
  GgufWriter unknown;
  (void)unknown.add_tensor_f32("a", {2}, std::vector<float>{1, 2});
  (void)unknown.add_tensor_f32("b", {4}, std::vector<float>{1, 2, 3, 4});
  auto u = unknown.bytes();
  for (size_t i = 0; i + 12 <= u.size(); ++i)  // 'b' is 1-D: name "b", n_dims 1, dim 4, type 0
    if (u[i] == 'b' && u[i + 1] == 1 && u[i + 5] == 4) {
      poke<uint32_t>(u, i + 13, 77);
      break;
    }
  save(dir, "valid_unknown_type.gguf", u);

  auto b = valid;
  b[0] = 'X';
  save(dir, "bad_magic.gguf", b);
  b = valid;
  poke<uint32_t>(b, 4, 1);
  save(dir, "bad_version1.gguf", b);
  save(dir, "bad_truncated.gguf", std::vector<uint8_t>(valid.begin(), valid.begin() + valid.size() / 2));
  b = valid;
  poke<uint64_t>(b, 16, uint64_t{1} << 60);
  save(dir, "bad_kv_count.gguf", b);
  GgufWriter big;
  big.set_int32_array("arr", std::vector<int32_t>{1, 2});
  b = big.bytes();
  poke<uint64_t>(b, 24 + 8 + 3 + 4 + 4, uint64_t{1} << 60);
  save(dir, "bad_array_count.gguf", b);
  GgufWriter dup;
  dup.set_uint32("aa", 1);
  dup.set_uint32("ab", 2);
  b = dup.bytes();
  for (size_t i = 0; i + 1 < b.size(); ++i)
    if (b[i] == 'a' && b[i + 1] == 'b') b[i + 1] = 'a';
  save(dir, "bad_duplicate_key.gguf", b);
  GgufWriter fl;
  fl.set_float32_array("kvcache.cache.kv_heads", std::vector<float>{8});
  fl.set_int32_array("kvcache.cache.head_dims", std::vector<int32_t>{64});
  fl.set_int32_array("kvcache.cache.windows", std::vector<int32_t>{0});
  save(dir, "bad_float_geometry.gguf", fl.bytes());
  GgufWriter lc;
  lc.set_int32_array("kvcache.cache.kv_heads", std::vector<int32_t>{8});
  lc.set_int32_array("kvcache.cache.head_dims", std::vector<int32_t>{64});
  lc.set_int32_array("kvcache.cache.windows", std::vector<int32_t>{0});
  lc.set_int32_array("kvcache.layer_cache", std::vector<int32_t>{0, 1});
  save(dir, "bad_layer_cache.gguf", lc.bytes());
  GgufWriter two;
  (void)two.add_tensor_f32("a", {8}, std::vector<float>(8, 1.0f));
  (void)two.add_tensor_f32("b", {8}, std::vector<float>(8, 2.0f));
  const auto tb = two.bytes();
  for (uint64_t off : {uint64_t{0}, uint64_t{4}, uint64_t{1} << 40}) {
    b = tb;
    // tensor "b" info: name length 1, 'b', n_dims 1, dim 8, type 0, offset
    for (size_t i = 0; i + 9 < b.size(); ++i)
      if (b[i] == 1 && b[i + 8] == 'b' && b[i + 9] == 1) {
        poke<uint64_t>(b, i + 8 + 1 + 4 + 8 + 4, off);
        break;
      }
    save(dir, "bad_tensor_offset_" + std::to_string(off) + ".gguf", b);
  }
  return 0;
}
