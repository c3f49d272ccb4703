// The model fingerprint: stable for the same architecture and weights whatever the metadata
// order, different when an architecture key, a tensor's type, shape or bytes change.
#include <gtest/gtest.h>

#include <vector>

#include "program/fingerprint.h"

namespace kvcache {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

struct Spec {
  bool swap_keys = false;
  uint32_t layers = 2;
  float weight0 = 1.0f;
  gguf::TensorType store = gguf::TensorType::kF32;
  std::string name = "tiny";
};

uint64_t fingerprint_of(const Spec& s) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", s.name);  // not an architecture key
  if (s.swap_keys) {
    w.set_uint32("llama.embedding_length", 32);
    w.set_uint32("llama.block_count", s.layers);
  } else {
    w.set_uint32("llama.block_count", s.layers);
    w.set_uint32("llama.embedding_length", 32);
  }
  std::vector<float> a(64, 0.5f);
  a[0] = s.weight0;
  EXPECT_TRUE(w.add_tensor_f32("a", {16, 4}, a, s.store).ok());
  Result<GgufFile> f = GgufFile::parse(w.bytes());
  EXPECT_TRUE(f.ok()) << f.status().message();
  return model_fingerprint(*f);
}

TEST(Fingerprint, SameModelSameValueWhateverTheMetadataOrderOrName) {
  const uint64_t base = fingerprint_of({});
  EXPECT_EQ(fingerprint_of({}), base);
  EXPECT_EQ(fingerprint_of({.swap_keys = true}), base);
  EXPECT_EQ(fingerprint_of({.name = "renamed"}), base);
}

TEST(Fingerprint, ArchitectureKeysTypesAndWeightBytesChangeIt) {
  const uint64_t base = fingerprint_of({});
  EXPECT_NE(fingerprint_of({.layers = 3}), base);
  EXPECT_NE(fingerprint_of({.weight0 = 2.0f}), base);                        // a fine-tune
  EXPECT_NE(fingerprint_of({.store = gguf::TensorType::kF16}), base);        // a requantization
}

}  // namespace
}  // namespace kvcache
