// GGUF block formats: geometry per the specification, hand-built blocks decoding to the values
// the layouts define (independent of our encoders), encode -> decode round trips within each
// format's error bound, and quantized tensors through the writer and the reader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "program/gguf.h"
#include "program/gguf_quant.h"
#include "core/half.h"

namespace kvcache::gguf {
namespace {


void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> decode(TensorType t, const std::vector<uint8_t>& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(dequantize(t, b, out));
  return out;
}

TEST(GgufQuant, BlockGeometryFollowsTheSpecification) {
  EXPECT_EQ(block_geometry(TensorType::kQ4_0)->bytes, 18);   // f16 + 16 nibble bytes
  EXPECT_EQ(block_geometry(TensorType::kQ4_1)->bytes, 20);   // + f16 min
  EXPECT_EQ(block_geometry(TensorType::kQ5_0)->bytes, 22);   // + 4 high-bit bytes
  EXPECT_EQ(block_geometry(TensorType::kQ5_1)->bytes, 24);
  EXPECT_EQ(block_geometry(TensorType::kQ8_0)->bytes, 34);
  EXPECT_EQ(block_geometry(TensorType::kQ4_K)->bytes, 144);  // 2 + 2 + 12 + 128
  EXPECT_EQ(block_geometry(TensorType::kQ5_K)->bytes, 176);  // + 32 high-bit bytes
  EXPECT_EQ(block_geometry(TensorType::kQ6_K)->bytes, 210);  // 128 + 64 + 16 + 2
  EXPECT_EQ(block_geometry(TensorType::kQ6_K)->elements, 256);
  EXPECT_EQ(block_geometry(TensorType::kQ3_K)->bytes, 110);  // known, not computable
  EXPECT_FALSE(is_computable(TensorType::kQ3_K));
  EXPECT_FALSE(block_geometry(static_cast<TensorType>(77)).has_value());
  EXPECT_EQ(row_bytes(TensorType::kQ4_K, 512), 288);
  EXPECT_FALSE(row_bytes(TensorType::kQ4_K, 300).has_value());
  EXPECT_EQ(to_string(TensorType::kQ5_K), "Q5_K");
  EXPECT_EQ(block_geometry(TensorType::kMXFP4)->bytes, 17);  // E8M0 byte + 16 code bytes
  EXPECT_EQ(block_geometry(TensorType::kMXFP4)->elements, 32);
  EXPECT_TRUE(is_computable(TensorType::kMXFP4));
  EXPECT_EQ(row_bytes(TensorType::kMXFP4, 2880), 1530);  // gpt-oss width: 90 blocks
  EXPECT_FALSE(row_bytes(TensorType::kMXFP4, 48).has_value());
  EXPECT_EQ(static_cast<uint32_t>(TensorType::kMXFP4), 39u);  // ggml's number
  EXPECT_EQ(to_string(TensorType::kMXFP4), "MXFP4");
}

// MXFP4 by hand: value = E2M1(code) * 2^(e - 127), E2M1 = {0, .5, 1, 1.5, 2, 3, 4, 6} with
// bit 3 the sign; code j in the low nibble of byte 1 + j, code j + 16 in the high one.
TEST(GgufQuant, HandBuiltMxfp4BlocksDecodeAsTheLayoutDefines) {
  std::vector<uint8_t> b(17, 0);
  b[0] = 127 + 3;  // step 2^3 = 8
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  std::vector<float> v = decode(TensorType::kMXFP4, b, 32);
  const float e2m1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 8.0f * e2m1[j]) << j;
    EXPECT_EQ(v[j + 16], 8.0f * e2m1[15 - j]) << j;
  }
  EXPECT_EQ(v[7], 48.0f);    // code 7: 6 * 8
  EXPECT_EQ(v[16], -48.0f);  // high nibble of byte 1 = code 15: -6 * 8
  EXPECT_EQ(v[8], 0.0f);  // code 8, E2M1's -0: zero (the integer table has no signed zero)
  // The ends of the exponent range: e = 0 is a step of 2^-127 (subnormal), e = 254 of 2^127.
  b[0] = 0;
  v = decode(TensorType::kMXFP4, b, 32);
  EXPECT_EQ(v[2], std::ldexp(1.0f, -127));  // code 2: 1 * 2^-127
  EXPECT_EQ(v[1], std::ldexp(1.0f, -128));  // code 1: 0.5 * 2^-127
  b[0] = 254;
  v = decode(TensorType::kMXFP4, b, 32);
  EXPECT_EQ(v[2], std::ldexp(1.0f, 127));  // code 2: 1 * 2^127
}

// The scale is built from the exponent's bits: every byte gives 2^(e - 128) exactly.
TEST(GgufQuant, Mxfp4HalfScaleIsTwoToTheExponentLess128ForEveryByte) {
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(mxfp4_half_scale(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << e;
}

// Values the format holds exactly (E2M1 values times a power of two) come back exactly, the
// exponent the smallest that covers the block's largest value.
TEST(GgufQuant, Mxfp4EncodesRepresentableBlocksExactly) {
  std::vector<float> x(64);
  const float e2m1[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
  for (int j = 0; j < 32; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * e2m1[j % 8] * 0.25f;
  for (int j = 32; j < 64; ++j) x[j] = e2m1[(j * 5) % 8] * 1024.0f;
  std::vector<uint8_t> b(34);
  ASSERT_TRUE(quantize(TensorType::kMXFP4, x, b));
  EXPECT_EQ(b[0], 127 - 2);   // step 0.25
  EXPECT_EQ(b[17], 127 + 10);  // step 1024
  EXPECT_EQ(b[1], 0x00);  // values 0 and 16: +0, code 0
  EXPECT_EQ(b[2], 0x99);  // values 1 and 17: -0.5 steps, code 9 (sign bit 8 + code 1)
  EXPECT_EQ(decode(TensorType::kMXFP4, b, 64), x);
}


TEST(GgufQuant, KScalesPackAndUnpackEverySixBitValue) {
  std::mt19937 g(5);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t sc[8], mn[8], packed[12];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(g() % 64);
      mn[j] = static_cast<uint8_t>(g() % 64);
    }
    pack_k_scales(sc, mn, packed);
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(unpack_k_scale(packed, j).scale, sc[j]) << j;
      ASSERT_EQ(unpack_k_scale(packed, j).min, mn[j]) << j;
    }
  }
}

// Blocks built byte by byte from the layouts: catch an encoder and decoder that agree with
// each other but not with the files other writers produce.
TEST(GgufQuant, HandBuiltBlocksDecodeAsTheLayoutsDefine) {
  // Q4_0: d = 0.5; byte 0 = 0x1F: value 0 = (15 - 8) * 0.5, value 16 = (1 - 8) * 0.5.
  std::vector<uint8_t> q40(18, 0x88);
  put_half(q40.data(), 0.5f);
  q40[2] = 0x1F;
  auto v = decode(TensorType::kQ4_0, q40, 32);
  EXPECT_EQ(v[0], 3.5f);
  EXPECT_EQ(v[16], -3.5f);
  EXPECT_EQ(v[1], 0.0f);
  // Q5_1: d = 1, m = -2; qh bit 17 set: value 17 = (low nibble 0 | 16) * 1 - 2 = 14.
  std::vector<uint8_t> q51(24, 0);
  put_half(q51.data(), 1.0f);
  put_half(q51.data() + 2, -2.0f);
  q51[4 + 2] = 0x02;  // qh bits 16..23: bit 17
  v = decode(TensorType::kQ5_1, q51, 32);
  EXPECT_EQ(v[17], 14.0f);
  EXPECT_EQ(v[16], -2.0f);
  // Q4_K: d = 1, dmin = 0.5, sub-block s has scale s + 1 and min 2; nibble byte 32 = 0x73 is
  // value 0 of sub-block 2 (low nibble 3) and of sub-block 3 (high nibble 7).
  std::vector<uint8_t> q4k(144, 0);
  put_half(q4k.data(), 1.0f);
  put_half(q4k.data() + 2, 0.5f);
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = static_cast<uint8_t>(s + 1);
    mn[s] = 2;
  }
  pack_k_scales(sc, mn, q4k.data() + 4);
  q4k[16 + 32] = 0x73;
  v = decode(TensorType::kQ4_K, q4k, 256);
  EXPECT_EQ(v[64], 3.0f * 3 - 1.0f);   // sub-block 2: scale 3, min 2 * 0.5
  EXPECT_EQ(v[96], 4.0f * 7 - 1.0f);   // sub-block 3: scale 4
  EXPECT_EQ(v[65], -1.0f);
  // Q5_K: the same plus qh[3] bit 5: value 3 of sub-block 5 gains 16 steps of scale 6.
  std::vector<uint8_t> q5k(176, 0);
  std::memcpy(q5k.data(), q4k.data(), 16);
  q5k[16 + 3] = 1 << 5;
  v = decode(TensorType::kQ5_K, q5k, 256);
  EXPECT_EQ(v[5 * 32 + 3], 6.0f * 16 - 1.0f);
  EXPECT_EQ(v[4 * 32 + 3], -1.0f);
  // Q6_K: d = 0.25, scales[g] = g + 1; qh[0] = 0b11100100 gives the four values l = 0 of the
  // first half their high bits 0, 1, 2, 3; ql[0] = 0x21, ql[32] = 0x43 their low nibbles.
  std::vector<uint8_t> q6k(210, 0);
  put_half(q6k.data() + 208, 0.25f);
  for (int g = 0; g < 16; ++g) q6k[192 + g] = static_cast<uint8_t>(g + 1);
  q6k[128] = 0b11100100;
  q6k[0] = 0x21;
  q6k[32] = 0x43;
  v = decode(TensorType::kQ6_K, q6k, 256);
  EXPECT_EQ(v[0], 0.25f * 1 * ((1 | 0 << 4) - 32));    // 16-group 0
  EXPECT_EQ(v[32], 0.25f * 3 * ((3 | 1 << 4) - 32));   // group 2
  EXPECT_EQ(v[64], 0.25f * 5 * ((2 | 2 << 4) - 32));   // group 4: high nibble of ql[0]
  EXPECT_EQ(v[96], 0.25f * 7 * ((4 | 3 << 4) - 32));   // group 6: high nibble of ql[32]
  EXPECT_EQ(v[128], 0.25f * 9 * -32);                   // second half, all zero bits
}

// Per element: |x - decode(encode(x))| <= bound, from each encoder's construction:
// symmetric types lose at most one step at the far end of the range (amax / levels); affine
// ones half a step plus the f16 rounding of the min; K types half a (rounded-up) step plus
// the 6-bit quantization of the min; Q8_0 half a step; all plus f16 scale rounding.
struct RoundTrip {
  TensorType type;
  double bound_per_amax;  // bound as a fraction of the block's largest |x|
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantRoundTrip, DecodeOfEncodeStaysWithinTheFormatError) {
  const RoundTrip p = GetParam();
  const int64_t n = 4096;
  std::mt19937_64 g(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  for (int64_t i = 256; i < 512; ++i) x[i] = std::fabs(x[i]) + 0.5f;  // an all-positive block
  for (int64_t i = 512; i < 768; ++i) x[i] = 0.0f;                    // an all-zero block
  std::vector<uint8_t> b(static_cast<size_t>(*row_bytes(p.type, n)));
  ASSERT_TRUE(quantize(p.type, x, b));
  std::vector<float> y = decode(p.type, b, n);
  const int64_t block = 256;  // whole super-blocks for every type
  double worst = 0.0;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    double amax = 0.0;
    for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = b0; i < b0 + block; ++i) {
      const double err = std::fabs(double{y[i]} - x[i]);
      if (amax == 0.0) {
        ASSERT_EQ(y[i], 0.0f) << i;
      } else {
        worst = std::max(worst, err / amax);
      }
    }
  }
  EXPECT_LE(worst, p.bound_per_amax) << to_string(p.type);
  EXPECT_GT(worst, 0.0) << to_string(p.type);  // a lossy format that loses nothing is a bug
}

// Bounds: Q8_0 0.5/127 (+f16); Q4_0 1/8, Q5_0 1/16 (one step at the far end); Q4_1 / Q5_1
// half of range/15, range/31 with range <= 2 amax; K types: half a step of range/15 (/31),
// a step rounded up by <= d, and 6-bit mins (<= amax/126 each way); Q6_K one step of
// amax/32 plus int8 scale rounding. MXFP4: with the covering step u (6u >= amax > 3u) the
// widest gap (4u to 6u) loses at most u < amax / 3; one step finer clips the top to 3u < amax,
// losing less than amax / 2, and is taken only when the block's squared error is smaller.
INSTANTIATE_TEST_SUITE_P(
    Types, QuantRoundTrip,
    ::testing::Values(RoundTrip{TensorType::kQ8_0, 0.5 / 127 + 1e-3},
                      RoundTrip{TensorType::kQ4_0, 1.0 / 8 + 1e-3},
                      RoundTrip{TensorType::kQ5_0, 1.0 / 16 + 1e-3},
                      RoundTrip{TensorType::kQ4_1, 1.0 / 15 + 2e-3},
                      RoundTrip{TensorType::kQ5_1, 1.0 / 31 + 2e-3},
                      RoundTrip{TensorType::kQ4_K, 2.0 / 15 / 2 + 2.0 / 63 + 1.0 / 63},
                      RoundTrip{TensorType::kQ5_K, 2.0 / 31 / 2 + 2.0 / 63 + 1.0 / 63},
                      RoundTrip{TensorType::kQ6_K, 1.0 / 32 + 1.0 / 127 + 1e-3},
                      RoundTrip{TensorType::kMXFP4, 0.5},
                      RoundTrip{TensorType::kF16, 1.0 / 1024},
                      RoundTrip{TensorType::kBF16, 1.0 / 128}),
    [](const auto& case_info) { return to_string(case_info.param.type); });

TEST(GgufQuant, QuantizedTensorsThroughTheWriterAndReader) {
  std::vector<float> x(2 * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor_f32("k", {256, 2}, x, TensorType::kQ4_K).ok());
  ASSERT_TRUE(w.add_tensor_f32("q", {256, 2}, x, TensorType::kQ8_0).ok());
  const Status partial = w.add_tensor_f32("p", {96, 2}, std::span<const float>(x).first(192),
                                          TensorType::kQ6_K);
  EXPECT_EQ(partial.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(partial.message().find("row length 96"), std::string::npos) << partial.message();
  auto f = GgufFile::parse(w.bytes());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->tensor("k")->type, TensorType::kQ4_K);
  EXPECT_EQ(f->tensor("k")->bytes.size(), 288u);
  std::vector<uint8_t> k(f->tensor("k")->bytes.begin(), f->tensor("k")->bytes.end());
  EXPECT_EQ(*f->tensor_f32("k"), decode(TensorType::kQ4_K, k, 512));
  auto q = *f->tensor_f32("q");
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(q[i], x[i], 0.5 / 127 + 1e-3) << i;
}

// MXFP4 tensors of two and three dimensions (an expert stack [in, out, experts]) through the
// writer and the reader: 17 bytes per 32 values whatever the row count, the data placed at
// aligned offsets although the sizes are odd, and the values decoded as written.
TEST(GgufQuant, Mxfp4TensorsOfAnyRowCountThroughTheWriterAndReader) {
  std::vector<float> x(64 * 3 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i));
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor_f32("experts", {64, 3, 5}, x, TensorType::kMXFP4).ok());
  ASSERT_TRUE(w.add_tensor_f32("one", {32, 1}, std::span<const float>(x).first(32),
                               TensorType::kMXFP4).ok());
  ASSERT_TRUE(w.add_tensor_f32("after", {64, 1}, std::span<const float>(x).first(64),
                               TensorType::kQ8_0).ok());
  const Status partial = w.add_tensor_f32("p", {48, 2}, std::span<const float>(x).first(96),
                                          TensorType::kMXFP4);
  EXPECT_EQ(partial.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(partial.message().find("row length 48"), std::string::npos) << partial.message();
  EXPECT_EQ(tensor_bytes(TensorType::kMXFP4, 64 * 3 * 5), 15u * 2 * 17);  // 15 rows of 2 blocks
  auto f = GgufFile::parse(w.bytes());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const TensorInfo* e = f->tensor("experts");
  EXPECT_EQ(e->type, TensorType::kMXFP4);
  EXPECT_EQ(e->dims, (std::vector<int64_t>{64, 3, 5}));
  EXPECT_EQ(e->bytes.size(), 510u);
  EXPECT_EQ(f->tensor("one")->bytes.size(), 17u);
  EXPECT_EQ(f->tensor("after")->offset % f->alignment(), 0u);
  const std::vector<float> got = *f->tensor_f32("experts");
  ASSERT_EQ(got.size(), x.size());
  // Each value within the covering step's largest gap of its block's largest |x| (<= 1): 1/2.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], x[i], 0.5) << i;
  std::vector<uint8_t> raw(e->bytes.begin(), e->bytes.end());
  EXPECT_EQ(got, decode(TensorType::kMXFP4, raw, 64 * 15));
}

}  // namespace
}  // namespace kvcache::gguf
