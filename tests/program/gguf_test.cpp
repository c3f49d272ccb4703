// GGUF round trips: every metadata type (incl. nested arrays and string arrays), typed getters,
// tensors of each supported type, alignment and file I/O.
#include <gtest/gtest.h>

#include <cmath>

#include "program/gguf.h"
#include "test_util.h"

namespace kvcache::gguf {
namespace {

using testing::small_valid_file;

Result<GgufFile> reparse(const GgufWriter& w) { return GgufFile::parse(w.bytes()); }

TEST(Gguf, EveryScalarTypeRoundTrips) {
  GgufWriter w;
  w.set("u8", uint_value(ValueType::kUint8, 200));
  w.set("i8", int_value(ValueType::kInt8, -100));
  w.set("u16", uint_value(ValueType::kUint16, 60000));
  w.set("i16", int_value(ValueType::kInt16, -30000));
  w.set("u32", uint_value(ValueType::kUint32, 4000000000u));
  w.set("i32", int_value(ValueType::kInt32, -2000000000));
  w.set("u64", uint_value(ValueType::kUint64, 1ull << 63));
  w.set("i64", int_value(ValueType::kInt64, -(1ll << 62)));
  w.set("f32", float_value(ValueType::kFloat32, 1.5));
  w.set("f64", float_value(ValueType::kFloat64, 0.1));
  w.set_bool("b", true);
  w.set_string("s", "h\xc3\xa9llo");
  auto f = reparse(w);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_int("u8"), 200);
  EXPECT_EQ(*f->get_int("i8"), -100);
  EXPECT_EQ(*f->get_int("u16"), 60000);
  EXPECT_EQ(*f->get_int("i16"), -30000);
  EXPECT_EQ(*f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_int("u64").status().code(), StatusCode::kInvalidArgument);  // > INT64_MAX
  EXPECT_EQ(std::get<uint64_t>(f->find("u64")->data), 1ull << 63);
  EXPECT_EQ(*f->get_int("i64"), -(1ll << 62));
  EXPECT_EQ(*f->get_float("f32"), 1.5);
  EXPECT_EQ(*f->get_float("f64"), 0.1);
  EXPECT_EQ(*f->get_float("i32"), -2000000000.0);  // ints are numbers too
  EXPECT_TRUE(*f->get_bool("b"));
  EXPECT_EQ(*f->get_string("s"), "h\xc3\xa9llo");
  EXPECT_EQ(f->metadata().size(), 12u);
  EXPECT_EQ(f->metadata()[0].first, "u8");  // insertion order kept
}

TEST(Gguf, ArraysOfStringsAndNestedArraysRoundTrip) {
  GgufWriter w;
  const std::vector<std::string> words = {"a", "", "long word"};
  w.set_string_array("words", words);
  const int32_t ints[] = {1, -2, 3};
  w.set_int32_array("ints", ints);
  const float floats[] = {0.5f, -0.25f};
  w.set_float32_array("floats", floats);
  w.set("nested", array_value(ValueType::kArray,
                              {array_value(ValueType::kInt16, {int_value(ValueType::kInt16, 7)}),
                               array_value(ValueType::kString, {string_value("x"), string_value("y")}),
                               array_value(ValueType::kBool, {})}));
  w.set("empty", array_value(ValueType::kUint64, {}));
  auto f = reparse(w);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->get_string_array("words"), words);
  EXPECT_EQ(*f->get_int_array("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f->get_float_array("floats"), (std::vector<double>{0.5, -0.25}));
  EXPECT_TRUE(f->get_int_array("empty")->empty());
  const Value* nested = f->find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, ValueType::kArray);
  const auto& outer = std::get<std::vector<Value>>(nested->data);
  ASSERT_EQ(outer.size(), 3u);
  EXPECT_EQ(outer[0].elem_type, ValueType::kInt16);
  EXPECT_EQ(std::get<int64_t>(std::get<std::vector<Value>>(outer[0].data)[0].data), 7);
  EXPECT_EQ(std::get<std::string>(std::get<std::vector<Value>>(outer[1].data)[1].data), "y");
  EXPECT_TRUE(std::get<std::vector<Value>>(outer[2].data).empty());
}

TEST(Gguf, TypedGettersNameKeyAndActualType) {
  GgufWriter w;
  w.set_string("name", "x");
  auto f = reparse(w);
  ASSERT_TRUE(f.ok());
  auto missing = f->get_int("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto wrong = f->get_int("name");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'name' has type STRING"), std::string::npos)
      << wrong.status().message();
  EXPECT_EQ(f->get_string_array("name").status().code(), StatusCode::kInvalidArgument);
}

TEST(Gguf, SetReplacesAnEarlierValueOfTheSameKey) {
  GgufWriter w;
  w.set_uint32("k", 1);
  w.set_uint32("k", 2);
  auto f = reparse(w);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(*f->get_int("k"), 2);
}

TEST(Gguf, TensorsOfEachTypeConvertToF32) {
  GgufWriter w;
  const std::vector<float> v = {1.0f, -2.5f, 0.333f, 65504.0f, 1e-7f, 3.0f};
  ASSERT_TRUE(w.add_tensor_f32("f32", {3, 2}, v).ok());
  ASSERT_TRUE(w.add_tensor_f32("f16", {3, 2}, v, TensorType::kF16).ok());
  ASSERT_TRUE(w.add_tensor_f32("bf16", {6}, v, TensorType::kBF16).ok());
  // One Q8_0 block: scale 0.5 (f16 0x3800), quants 0..31 minus 16.
  std::vector<uint8_t> q(34);
  testing::poke<uint16_t>(q, 0, 0x3800);
  for (int j = 0; j < 32; ++j) q[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  ASSERT_TRUE(w.add_tensor("q8", TensorType::kQ8_0, {32}, q).ok());
  auto f = reparse(w);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(*f->tensor_f32("f32"), v);
  auto h = *f->tensor_f32("f16");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_NEAR(h[2], 0.333f, 1e-3);
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_EQ(h[4], 2 * 5.9604644775390625e-8f);  // f16 subnormal: 1e-7 rounds to 2 * 2^-24
  auto b = *f->tensor_f32("bf16");
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_NEAR(b[2], 0.333f, 2e-3);
  auto q8 = *f->tensor_f32("q8");
  ASSERT_EQ(q8.size(), 32u);
  EXPECT_EQ(q8[0], -8.0f);   // 0.5 * -16
  EXPECT_EQ(q8[31], 7.5f);   // 0.5 * 15
  const TensorInfo* t = f->tensor("f16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t->n_elements(), 6);
  EXPECT_EQ(t->bytes.size(), 12u);
  EXPECT_EQ(f->tensor_f32("nope").status().code(), StatusCode::kNotFound);
}

TEST(Gguf, TensorDataIsAlignedToTheRequestedAlignment) {
  GgufWriter w(64);
  const float one[1] = {1.0f};
  ASSERT_TRUE(w.add_tensor_f32("x", {1}, one).ok());
  ASSERT_TRUE(w.add_tensor_f32("y", {1}, one).ok());
  auto f = reparse(w);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->get_int("general.alignment"), 64);
  EXPECT_EQ(f->tensor("y")->offset, 64u);
  const auto* base = f->tensor("x")->bytes.data();
  EXPECT_EQ(f->tensor("y")->bytes.data() - base, 64);
}

TEST(Gguf, WriterRefusesBadTensors) {
  GgufWriter w;
  const float two[2] = {1, 2};
  EXPECT_EQ(w.add_tensor_f32("x", {3}, two).code(), StatusCode::kInvalidArgument);  // 8 != 12 bytes
  EXPECT_TRUE(w.add_tensor_f32("x", {2}, two).ok());
  EXPECT_EQ(w.add_tensor_f32("x", {2}, two).code(), StatusCode::kInvalidArgument);  // duplicate
  EXPECT_EQ(w.add_tensor("q", TensorType::kQ8_0, {31}, std::vector<uint8_t>(34)).code(),
            StatusCode::kInvalidArgument);  // not whole blocks
  EXPECT_EQ(w.add_tensor_f32("n", {-1}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor_f32("d", {1, 1, 1, 1, 1}, std::vector<float>{1}).code(),
            StatusCode::kInvalidArgument);
}

TEST(Gguf, OpenMapsAFileAndReportsMissingFiles) {
  auto dir = testing::temp_dir("open");
  testing::write_file(dir / "m.gguf", small_valid_file());
  auto f = GgufFile::open((dir / "m.gguf").string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->tensor_f32("b"), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(GgufFile::open((dir / "none.gguf").string()).status().code(), StatusCode::kNotFound);
  GgufWriter w;
  w.set_string("k", "v");
  ASSERT_TRUE(w.write((dir / "w.gguf").string()).ok());
  auto g = GgufFile::open((dir / "w.gguf").string());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->get_string("k"), "v");
  std::filesystem::remove_all(dir);
}

TEST(Gguf, FileWithoutTensorsNeedsNoDataSection) {
  GgufWriter w;
  w.set_uint32("k", 1);
  auto b = w.bytes();
  EXPECT_EQ(b.size(), 41u);  // 24 header + (8 + 1 key) + 4 type + 4 value; no padding
  auto f = GgufFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->tensors().empty());
}

}  // namespace
}  // namespace kvcache::gguf
