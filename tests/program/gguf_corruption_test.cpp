// Hostile GGUF files: each corruption yields a specific StatusCode and a message naming the
// offset, key or tensor; nothing crashes and nothing allocates more than the file could hold
// (the sanitizer build would abort on a 2^60-byte allocation).
#include <gtest/gtest.h>

#include <algorithm>

#include "program/gguf.h"
#include "test_util.h"

namespace kvcache::gguf {
namespace {

using testing::poke;
using testing::small_valid_file;

// Position of the first occurrence of `pattern` in `b` (fails the test when absent).
size_t find_bytes(const std::vector<uint8_t>& b, const std::vector<uint8_t>& pattern) {
  auto it = std::search(b.begin(), b.end(), pattern.begin(), pattern.end());
  EXPECT_NE(it, b.end());
  return static_cast<size_t>(it - b.begin());
}

// Offset of the u64 data-offset field of the one-letter tensor `name` (1 dim).
size_t tensor_offset_field(const std::vector<uint8_t>& b, char name) {
  const size_t at = find_bytes(b, {1, 0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(name), 1, 0, 0, 0});
  return at + 8 + 1 + 4 + 8 + 4;  // name length, name, n_dims, dim, type
}

void expect_error(const std::vector<uint8_t>& b, StatusCode code, const std::string& fragment) {
  auto f = GgufFile::parse(b);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find(fragment), std::string::npos) << f.status().message();
}

TEST(GgufCorruption, BadMagicIsDataLoss) {
  auto b = small_valid_file();
  b[0] = 'X';
  expect_error(b, StatusCode::kDataLoss, "bad magic");
}

TEST(GgufCorruption, VersionOneIsRefusedWithAHintAndUnknownVersionsAreRefused) {
  auto b = small_valid_file();
  poke<uint32_t>(b, 4, 1);
  expect_error(b, StatusCode::kInvalidArgument, "re-convert");
  poke<uint32_t>(b, 4, 4);
  expect_error(b, StatusCode::kInvalidArgument, "unsupported version 4");
  poke<uint32_t>(b, 4, 2);  // v2 shares the v3 layout
  EXPECT_TRUE(GgufFile::parse(b).ok());
}

TEST(GgufCorruption, TruncationAtEveryOffsetBeforeTheLastTensorEndIsDataLoss) {
  const auto b = small_valid_file();
  auto full = GgufFile::parse(b);
  ASSERT_TRUE(full.ok());
  // The last tensor "b" (16 bytes) is followed only by 16 bytes of padding to alignment 32.
  ASSERT_EQ(full->tensor("b")->bytes.size(), 16u);
  const size_t data_end = b.size() - 16;
  for (size_t n = 0; n < b.size(); ++n) {
    auto f = GgufFile::parse(std::span<const uint8_t>(b.data(), n));
    if (n < data_end) {
      ASSERT_FALSE(f.ok()) << "truncated at " << n;
      EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << n << ": " << f.status().message();
    } else {
      EXPECT_TRUE(f.ok()) << n << ": " << f.status().message();  // only trailing padding lost
    }
  }
}

TEST(GgufCorruption, HugeCountsAreRefusedBeforeAllocating) {
  auto b = small_valid_file();
  poke<uint64_t>(b, 16, 1ull << 60);  // metadata count
  expect_error(b, StatusCode::kDataLoss, "metadata count 1152921504606846976");
  b = small_valid_file();
  poke<uint64_t>(b, 8, 1ull << 60);  // tensor count
  expect_error(b, StatusCode::kDataLoss, "tensor count");
}

TEST(GgufCorruption, StringLengthPastTheEndIsDataLoss) {
  auto b = small_valid_file();
  poke<uint64_t>(b, 24, 1ull << 40);  // length of the first key
  expect_error(b, StatusCode::kDataLoss, "offset 24");
}

TEST(GgufCorruption, ArrayCountOfTwoToTheSixtyIsDataLossNamingTheKey) {
  GgufWriter w;
  const int32_t v[] = {1, 2};
  w.set_int32_array("arr", v);
  auto b = w.bytes();
  poke<uint64_t>(b, 24 + 8 + 3 + 4 + 4, 1ull << 60);  // header, key, type, element type
  expect_error(b, StatusCode::kDataLoss, "'arr'");
}

TEST(GgufCorruption, TensorDataOverlappingPastTheEndOrMisalignedIsDataLoss) {
  auto b = small_valid_file();
  const size_t off = tensor_offset_field(b, 'b');
  poke<uint64_t>(b, off, 0);  // b now overlaps a
  expect_error(b, StatusCode::kDataLoss, "overlaps");
  poke<uint64_t>(b, off, 1ull << 40);
  expect_error(b, StatusCode::kDataLoss, "past the end");
  poke<uint64_t>(b, off, 36);
  expect_error(b, StatusCode::kDataLoss, "not a multiple of the alignment 32");
}

TEST(GgufCorruption, DuplicateKeysAndTensorNamesAreRefused) {
  GgufWriter w;
  w.set_uint32("aa", 1);
  w.set_uint32("ab", 2);
  auto b = w.bytes();
  b[find_bytes(b, {'a', 'b'}) + 1] = 'a';
  expect_error(b, StatusCode::kInvalidArgument, "duplicate metadata key 'aa'");
  auto t = small_valid_file();
  t[tensor_offset_field(t, 'b') - 25 + 8] = 'a';  // rename tensor b -> a
  expect_error(t, StatusCode::kInvalidArgument, "duplicate tensor 'a'");
}

TEST(GgufCorruption, AlignmentMustBeAPowerOfTwoUint32) {
  GgufWriter w;
  w.set_uint32("general.alignment", 48);
  expect_error(w.bytes(), StatusCode::kInvalidArgument, "general.alignment = 48");
  GgufWriter v;
  v.set_int32("general.alignment", 64);
  expect_error(v.bytes(), StatusCode::kInvalidArgument, "expected UINT32");
}

TEST(GgufCorruption, UnknownValueTypesBoolBytesAndDeepNestingAreInvalid) {
  auto b = small_valid_file();
  poke<uint32_t>(b, 24 + 8 + 20, 13);  // type of "general.architecture"
  expect_error(b, StatusCode::kInvalidArgument, "value type 13");
  GgufWriter w;
  w.set_bool("flag", true);
  auto c = w.bytes();
  c.back() = 2;
  expect_error(c, StatusCode::kInvalidArgument, "BOOL byte = 2");
  Value v = array_value(ValueType::kUint8, {});
  for (int i = 0; i < 9; ++i) v = array_value(ValueType::kArray, {v});
  GgufWriter d;
  d.set("deep", v);
  expect_error(d.bytes(), StatusCode::kInvalidArgument, "nested deeper");
}

TEST(GgufCorruption, BlockTypesNeedWholeBlocksPerRowAndDimensionCountsAreChecked) {
  auto b = small_valid_file();
  poke<uint32_t>(b, tensor_offset_field(b, 'b') - 4, 12);  // Q4_K, but 'b' has 4 values
  expect_error(b, StatusCode::kInvalidArgument,
               "tensor 'b': row length 4 is not a multiple of the Q4_K block (256 values)");
  b = small_valid_file();
  poke<uint32_t>(b, tensor_offset_field(b, 'b') - 16, 5);  // n_dims
  expect_error(b, StatusCode::kInvalidArgument, "5 dimensions");
}

// Metadata readers (inspect) must not refuse a file for its tensor types: a type number this
// project does not know parses, with no data placed, and names itself as "unknown(N)".
TEST(GgufCorruption, UnknownTensorTypesParseWithoutData) {
  auto b = small_valid_file();
  poke<uint32_t>(b, tensor_offset_field(b, 'b') - 4, 77);
  auto f = GgufFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->tensor("b")->bytes.empty());
  EXPECT_EQ(to_string(f->tensor("b")->type), "unknown(77)");
  EXPECT_EQ(f->tensor_f32("b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f->tensor_f32("b").status().message().find("'b' has type unknown(77)"), std::string::npos);
  EXPECT_EQ(f->tensor_f32("a").status().code(), StatusCode::kOk);
}

}  // namespace
}  // namespace kvcache::gguf
