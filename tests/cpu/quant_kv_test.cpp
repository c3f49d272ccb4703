// Quantized K/V (q8_0, q4_0, and K and V of different types): the block rule bitwise against
// a reference spelled out here, pools and their byte sizes, the quantized attention workers
// (scalar, AVX2, AVX-512 VNNI) against the reference kernel (which widens every row and
// attends in double) and against each other, and both cache layouts end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cache_driver.h"
#include "core/half.h"
#include "cpu/attention.h"
#include "cpu/attention_chunk.h"
#include "cpu/attention_quant.h"
#include "cpu/block_quant.h"
#include "cpu/cpu_cache.h"
#include "cpu/dtype_convert.h"
#include "cpu/hadamard.h"
#include "cpu/kv_pool.h"
#include "test_util.h"

namespace kvcache::cpu {
namespace {

using testing::random_floats;
using testing::worst_error;

// ---- the block rule ----------------------------------------------------------------------

// The GGUF rule written out from its description, independently of block_quant.cpp.
std::vector<uint8_t> reference_q8_0(const float* x) {
  std::vector<uint8_t> b(34);
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t h = f32_to_f16(amax / 127.0f);
  std::memcpy(b.data(), &h, 2);
  const float d = f16_to_f32(h);
  for (int i = 0; i < 32; ++i) {
    long q = d == 0.0f ? 0 : std::lround(x[i] * (1.0f / d));
    q = std::min(127L, std::max(-127L, q));
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
  return b;
}

std::vector<uint8_t> reference_q4_0(const float* x) {
  std::vector<uint8_t> b(18);
  float m = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  const uint16_t h = f32_to_f16(m / -8.0f);
  std::memcpy(b.data(), &h, 2);
  const float d = f16_to_f32(h);
  int q[32];
  for (int i = 0; i < 32; ++i) {
    long v = (d == 0.0f ? 0 : std::lround(x[i] * (1.0f / d))) + 8;
    q[i] = static_cast<int>(std::min(15L, std::max(0L, v)));
  }
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
  return b;
}

TEST(BlockQuant, EncodersMatchTheGgufRuleBitwise) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    const float range = trial % 3 == 0 ? 1e-3f : (trial % 3 == 1 ? 1.0f : 300.0f);
    auto x = random_floats(rng, 32, -range, range);
    if (trial % 7 == 0) x[trial % 32] = 0.0f;
    if (trial % 11 == 0) std::fill(x.begin(), x.end(), 0.0f);  // d = 0: every code 0 / 8
    uint8_t q8[34], q4[18];
    quantize_q8_0_block(x.data(), q8);
    quantize_q4_0_block(x.data(), q4);
    ASSERT_EQ(std::vector<uint8_t>(q8, q8 + 34), reference_q8_0(x.data())) << trial;
    ASSERT_EQ(std::vector<uint8_t>(q4, q4 + 18), reference_q4_0(x.data())) << trial;
  }
}

TEST(BlockQuant, KnownBlocksEncodeAndDecodeToTheirExactBytesAndValues) {
  // x0 = 1, x1 = -0.5, x16 = 0.25, the rest 0.
  float x[32] = {};
  x[0] = 1.0f, x[1] = -0.5f, x[16] = 0.25f;
  uint8_t q4[18];
  quantize_q4_0_block(x, q4);
  // The extreme 1.0 maps to -8: d = 1 / -8 = -0.125 (f16 0xB000); codes: 1 -> 0, -0.5 -> 12,
  // 0.25 -> 6, 0 -> 8; byte j = code j | code (j + 16) << 4.
  EXPECT_EQ(q4[0], 0x00);
  EXPECT_EQ(q4[1], 0xB0);
  EXPECT_EQ(q4[2], 0x60);  // 0 | 6 << 4
  EXPECT_EQ(q4[3], 0x8C);  // 12 | 8 << 4
  for (int j = 2; j < 16; ++j) EXPECT_EQ(q4[2 + j], 0x88) << j;
  float back[32];
  dequantize_q4_0_block(q4, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -0.5f);
  EXPECT_EQ(back[16], 0.25f);
  EXPECT_EQ(back[5], 0.0f);
  uint8_t q8[34];
  quantize_q8_0_block(x, q8);
  // d = f16(1 / 127) = 0x2008 (0.00787354); 1 / d = 127.006 -> 127; -0.5 / d = -63.50 -> -64;
  // 0.25 / d = 31.75 -> 32.
  EXPECT_EQ(q8[0] | (q8[1] << 8), 0x2008);
  EXPECT_EQ(static_cast<int8_t>(q8[2]), 127);
  EXPECT_EQ(static_cast<int8_t>(q8[3]), -64);
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 16]), 32);
  dequantize_q8_0_block(q8, back);
  EXPECT_FLOAT_EQ(back[0], 127 * f16_to_f32(0x2008));
}

TEST(BlockQuant, RowConversionsUseTheBlockRuleAndSizes) {
  EXPECT_EQ(row_bytes(DType::kQ8_0, 128), 4 * 34);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 96), 3 * 18);
  EXPECT_EQ(row_bytes(DType::kQ8_0, 40), std::nullopt);
  EXPECT_EQ(row_bytes(DType::kF16, 40), 80);
  std::mt19937 rng(8);
  auto x = random_floats(rng, 96);
  std::vector<uint8_t> row(3 * 34);
  store_row(DType::kQ8_0, x.data(), row.data(), 96);
  for (int b = 0; b < 3; ++b)
    EXPECT_EQ(std::vector<uint8_t>(row.begin() + 34 * b, row.begin() + 34 * (b + 1)),
              reference_q8_0(x.data() + 32 * b));
  std::vector<float> back(96);
  load_row(DType::kQ8_0, row.data(), back.data(), 96);
  for (int i = 0; i < 96; ++i) EXPECT_NEAR(back[i], x[i], 1.0 / 254 + 1e-6) << i;
}

// ---- the rotation --------------------------------------------------------------------------

TEST(Hadamard, FastTransformMatchesTheMatrixAndIsItsOwnOrthonormalInverse) {
  std::mt19937 rng(4);
  for (int32_t width : {1, 2, 3, 16, 32, 40, 64, 80, 96, 128, 192, 256}) {
    const auto x = random_floats(rng, size_t(3) * width);
    std::vector<float> fast = x, ref = x;
    hadamard_rows(fast.data(), 3, width);
    hadamard_rows_reference(ref.data(), 3, width);
    double norm_x = 0, norm_h = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(fast[i], ref[i], 1e-5) << "width " << width << " at " << i;
      norm_x += double(x[i]) * x[i];
      norm_h += double(fast[i]) * fast[i];
    }
    EXPECT_NEAR(norm_h, norm_x, 1e-4 * norm_x) << "width " << width;  // orthonormal
    hadamard_rows(fast.data(), 3, width);  // twice: back where it started
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(fast[i], x[i], 1e-5) << width;
  }
  // H_2 / sqrt(2) on (1, 0) and (0, 1); a width of 3 is blocks 2 + 1 (the 1 unchanged).
  std::vector<float> e = {1, 0, 7};
  hadamard_rows(e.data(), 1, 3);
  EXPECT_FLOAT_EQ(e[0], 1 / std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(e[1], 1 / std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(e[2], 7);
}

// In exact arithmetic the rotation changes nothing: with f32 storage a rotated cache gives
// the unrotated one's outputs to float rounding, in both layouts.
TEST(Hadamard, RotatedF32CacheGivesTheUnrotatedOutputs) {
  for (auto kind : {kSequenceKind, kCellKind}) {
    CacheConfig c;
    c.capacity = 32;
    c.max_write = 3;
    auto plain = make_cpu_cache(kind, CacheGeometry{{LayerGeometry{2, 96, 40, 0}}}, c);
    c.kv_rotate = true;
    auto rot = make_cpu_cache(kind, CacheGeometry{{LayerGeometry{2, 96, 40, 0}}}, c);
    ASSERT_TRUE(plain.ok() && rot.ok());
    EXPECT_FALSE((*plain)->config().rotated());
    EXPECT_TRUE((*rot)->config().rotated());
    const int32_t a = *(*plain)->open_seq(), b = *(*rot)->open_seq();
    ASSERT_EQ(a, b);
    std::mt19937 rng(6);
    for (int64_t p0 = 0; p0 < 9; p0 += 3) {
      const std::vector<int32_t> ids(3, a);
      const std::vector<int64_t> pos = {p0, p0 + 1, p0 + 2};
      auto q = random_floats(rng, 3 * 4 * 96), k = random_floats(rng, 3 * 2 * 96);
      auto v = random_floats(rng, 3 * 2 * 40);
      std::vector<float> o1(3 * 4 * 40), o2(o1.size());
      ASSERT_TRUE((*plain)->declare_step(ids).ok());
      ASSERT_TRUE((*rot)->declare_step(ids).ok());
      ASSERT_TRUE((*plain)->update_and_attend(AttendArgs{0, 3, 4, pos, q, k, v, 0.1f, 0, o1}).ok());
      ASSERT_TRUE((*rot)->update_and_attend(AttendArgs{0, 3, 4, pos, q, k, v, 0.1f, 0, o2}).ok());
      for (size_t i = 0; i < o1.size(); ++i) EXPECT_NEAR(o2[i], o1[i], 2e-5) << kind << " " << i;
    }
  }
}

TEST(Hadamard, RotationIsOnByDefaultForBlockTypesOnly) {
  CacheConfig c;
  EXPECT_FALSE(c.rotated());
  c.k_dtype = DType::kQ4_0;
  EXPECT_TRUE(c.rotated());
  c.kv_rotate = false;
  EXPECT_FALSE(c.rotated());
  c = CacheConfig{};
  c.kv_dtype = DType::kF16;
  c.v_dtype = DType::kQ8_0;
  EXPECT_TRUE(c.rotated());
}

// ---- pools -------------------------------------------------------------------------------

TEST(QuantPool, MixedTypesSizeCellsExactlyAndCopyBlocksBitwise) {
  // 2 kv heads, K 64 wide in q8_0 (2 blocks = 68 B), V 32 wide in q4_0 (1 block = 18 B):
  // 2 x (68 + 18) = 172 bytes a cell.
  LayerGeometry l{2, 64, 32, 0};
  LayerPool pool(l, DType::kQ8_0, DType::kQ4_0, 8);
  EXPECT_EQ(pool.cell_bytes(), 172);
  EXPECT_EQ(bytes_per_cell(l, DType::kQ8_0, DType::kQ4_0), 172);
  ASSERT_TRUE(pool.reserve(8).ok());
  EXPECT_EQ(pool.bytes(), 8 * 172);
  std::mt19937 rng(3);
  auto k = random_floats(rng, 128), v = random_floats(rng, 64);
  pool.write(5, k.data(), v.data());
  std::vector<std::byte> cell(172), again(172);
  pool.copy_out(5, cell.data());
  // K of head 1 is the second 68 bytes: the q8_0 blocks of k[64..128).
  const auto* c = reinterpret_cast<const uint8_t*>(cell.data());
  EXPECT_EQ(std::vector<uint8_t>(c + 68, c + 102), reference_q8_0(k.data() + 64));
  EXPECT_EQ(std::vector<uint8_t>(c + 136 + 18, c + 172), reference_q4_0(v.data() + 32));
  pool.copy_in(2, cell.data());
  pool.copy_out(2, again.data());
  EXPECT_EQ(cell, again);
}

// ---- the quantized workers against the reference -------------------------------------------

struct QShape {
  int32_t t, hq, hkv, dim, dv;
  int64_t context;
  int32_t window;
  DType k, v;
  int key_mode;  // 0 one run, 1 two runs (ring wrap), 2 scattered cells
  float softcap;
};

std::string describe(const QShape& s) {
  return "T=" + std::to_string(s.t) + " hq=" + std::to_string(s.hq) + " hkv=" +
         std::to_string(s.hkv) + " D=" + std::to_string(s.dim) + " Dv=" + std::to_string(s.dv) +
         " ctx=" + std::to_string(s.context) + " W=" + std::to_string(s.window) + " k=" +
         std::string(to_string(s.k)) + " v=" + std::string(to_string(s.v)) + " mode=" +
         std::to_string(s.key_mode) + " cap=" + std::to_string(s.softcap);
}

struct QProblem {
  QProblem(std::mt19937& rng, const QShape& s)
      : pool(LayerGeometry{s.hkv, s.dim, s.dv, s.window}, s.k, s.v, s.context + 3),
        q(random_floats(rng, size_t(s.t) * s.hq * s.dim, -2.0f, 2.0f)) {
    const int64_t rows = s.context + 3;
    EXPECT_TRUE(pool.reserve(rows).ok());
    for (int64_t r = 0; r < rows; ++r) {
      auto k = random_floats(rng, size_t(s.hkv) * s.dim);
      auto v = random_floats(rng, size_t(s.hkv) * s.dv);
      pool.write(r, k.data(), v.data());
    }
    std::vector<int32_t> order(rows);
    for (int64_t i = 0; i < rows; ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    lists.resize(s.t);
    for (int32_t t = 0; t < s.t; ++t) {
      const int64_t hi = s.context - s.t + t;
      const int64_t lo = s.window > 0 ? std::max<int64_t>(0, hi - s.window + 1) : 0;
      KeySet ks;
      if (s.key_mode == 2) {
        for (int64_t j = lo; j <= hi; ++j) lists[t].push_back(order[j]);
      } else if (s.key_mode == 1) {
        const int64_t b = (lo + rows / 2) % rows, n = hi - lo + 1;
        ks.n_runs = b + n <= rows ? 1 : 2;
        ks.run_begin[0] = b;
        ks.run_size[0] = std::min(n, rows - b);
        ks.run_size[1] = n - ks.run_size[0];
      } else {
        ks.n_runs = 1;
        ks.run_begin[0] = lo;
        ks.run_size[0] = hi - lo + 1;
      }
      sets.push_back(ks);
    }
    for (int32_t t = 0; t < s.t; ++t)
      if (s.key_mode == 2) sets[t].cells = lists[t];
    p.n_tokens = s.t;
    p.q_heads = s.hq;
    p.q = q.data();
    p.scale = 1.0f / std::sqrt(float(s.dim));
    p.softcap = s.softcap;
    p.kv = pool.view();
    p.keys = sets;
  }
  QProblem(const QProblem&) = delete;

  LayerPool pool;
  std::vector<float> q;
  std::vector<std::vector<int32_t>> lists;
  std::vector<KeySet> sets;
  AttentionProblem p;
};

std::vector<Isa> isas_here() {
  std::vector<Isa> isas = {Isa::kScalar};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa, KernelFamily::kInt8Dot)) isas.push_back(isa);
  return isas;
}

// Against the reference (rows widened, double): block keys are dotted with the query
// quantized to int8 per block, so a logit moves by up to scale x sum|k| x d_q / 2; with
// |q| <= 2, |k| <= 1 that stays below ~1e-2 of an output here; block values are summed with
// the weights taken to codes of 7 bits (attention_quant.h), at most half a code of a key
// block's largest weight x |v| <= 1, 4e-3. Against each other (the scalar quantized worker
// and every SIMD one at every thread count): float values are the same integer logits, so
// only the order of float additions differs (2e-5); with block values a weight a last bit
// apart (each worker's exp) can round to the next code, and a split across threads starts
// key blocks elsewhere, so they may differ by that half code (4e-3). The integer value sums
// themselves are tested bitwise (QuantAttention.IntegerValueSumsEqualTheirReferenceBitwise).
void expect_quant_workers_agree(const QShape& s, std::mt19937& rng) {
  QProblem r(rng, s);
  AttentionProblem p = r.p;
  const size_t n = size_t(s.t) * s.hq * s.dv;
  std::vector<float> want(n), scalar(n, -99.0f);
  p.out = want.data();
  attend_reference(p);
  ThreadPool p1(1), p2(2);
  p.out = scalar.data();
  attend(p, p1, Isa::kScalar);
  const double to_reference = is_block_type(s.k) || is_block_type(s.v) ? 1e-2 : 2e-5;
  const double between = is_block_type(s.v) ? 4e-3 : 2e-5;
  EXPECT_LE(worst_error(scalar, want), to_reference) << describe(s) << " scalar vs reference";
  for (Isa isa : isas_here())
    for (ThreadPool* tp : {&p1, &p2}) {
      std::vector<float> got(n, -99.0f);
      p.out = got.data();
      attend(p, *tp, isa);
      EXPECT_LE(worst_error(got, scalar), between)
          << describe(s) << " isa " << to_string(isa) << " threads " << tp->size();
      EXPECT_LE(worst_error(got, want), to_reference) << describe(s) << " vs reference";
    }
}

// The value pass of the quantized workers on its own: the same rows and weights give the
// same weight codes, scales and code sums in every version, and the same accumulators to the
// bit (integer sums, then one fused multiply-add per value). Blocks of 1..64 keys (a partial
// group of 4 included), 1..8 heads, 1..8 value blocks, weights with zeros, a 1 and tiny ones.
TEST(QuantAttention, IntegerValueSumsEqualTheirReferenceBitwise) {
  using namespace detail;
  std::mt19937 rng(4242);
  struct Version {
    Isa isa;
    void (*codes)(const KvView&, const std::byte* const*, int64_t, int32_t, const float*,
                  ValueCodes&);
    void (*sums)(const KvView&, const std::byte* const*, int64_t, int32_t, const ValueCodes&,
                 float*);
  };
  const Version versions[] = {{Isa::kAvx2, value_codes_avx2, values_int_avx2},
                              {Isa::kAvx512, value_codes_avx512, values_int_avx512}};
  int checked = 0;
  for (DType vt : {DType::kQ8_0, DType::kQ4_0})
    for (int64_t nb : {1, 3, 4, 17, 63, 64})
      for (int32_t group : {1, 2, 3, 4, 5, 8})
        for (int32_t dv : {32, 96, 256}) {
          LayerPool pool(LayerGeometry{1, 32, dv, 0}, DType::kF16, vt, nb);
          ASSERT_TRUE(pool.reserve(nb).ok());
          for (int64_t r = 0; r < nb; ++r) {
            auto k = random_floats(rng, 32);
            auto v = random_floats(rng, size_t(dv), -3.0f, 3.0f);
            pool.write(r, k.data(), v.data());
          }
          const KvView kv = pool.view();
          std::vector<const std::byte*> rows(static_cast<size_t>(nb));
          for (int64_t r = 0; r < nb; ++r) rows[r] = kv.v_row(0, r);
          std::vector<float> w(size_t(group) * kKeyBlock, 0.5f);  // 0.5 past nb: never read
          std::uniform_real_distribution<float> unit(0.0f, 1.0f);
          for (int32_t h = 0; h < group; ++h)
            for (int64_t b = 0; b < nb; ++b)
              w[h * kKeyBlock + b] = b % 7 == 3 ? 0.0f : b == h % nb ? 1.0f
                                   : b % 5 == 1 ? 1e-6f * unit(rng) : unit(rng);
          std::vector<float> acc0(size_t(group) * dv);
          for (float& a : acc0) a = unit(rng);
          ValueCodes want_codes;
          value_codes_reference(kv, rows.data(), nb, group, w.data(), want_codes);
          std::vector<float> want = acc0;
          values_int_reference(kv, rows.data(), nb, group, want_codes, want.data());
          for (const Version& ver : versions) {
            if (!isa_supported(ver.isa, KernelFamily::kInt8Dot)) continue;
            ValueCodes got_codes;
            ver.codes(kv, rows.data(), nb, group, w.data(), got_codes);
            const std::string what = std::string(to_string(ver.isa)) + " " +
                                     std::string(to_string(vt)) + " nb " + std::to_string(nb) +
                                     " group " + std::to_string(group) + " dv " +
                                     std::to_string(dv);
            for (int32_t h = 0; h < group; ++h)
              for (int32_t c = 0; c < dv / 32; ++c)
                ASSERT_EQ(0, std::memcmp(got_codes.codes(h, c), want_codes.codes(h, c),
                                         kKeyBlock))
                    << what << " codes of head " << h << " block " << c;
            ASSERT_EQ(got_codes.s, want_codes.s) << what;
            ASSERT_EQ(got_codes.usum, want_codes.usum) << what;
            std::vector<float> got = acc0;
            ver.sums(kv, rows.data(), nb, group, want_codes, got.data());
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << what << " sums";
            ++checked;
          }
          // The reference's own sums against the widened rows in double: half a weight code
          // of the block's largest |x| per key at most.
          std::vector<float> vf(static_cast<size_t>(dv));
          for (int32_t h = 0; h < group; ++h)
            for (int32_t d = 0; d < dv; ++d) {
              double exact = acc0[h * dv + d], bound = 0.0;
              for (int64_t b = 0; b < nb; ++b) {
                load_row(vt, rows[b], vf.data(), dv);
                exact += double(w[h * kKeyBlock + b]) * vf[d];
                bound += 0.5 * double(want_codes.s[h * (dv / 32) + d / 32]) * 128.0;
              }
              ASSERT_LE(std::fabs(want[h * dv + d] - exact), bound + 1e-5)
                  << to_string(vt) << " head " << h << " value " << d;
            }
        }
  if (checked == 0) GTEST_SKIP() << "no AVX2 or AVX-512 VNNI here (CPU or KVCACHE_ISA): the reference was checked alone";
}

TEST(QuantAttention, WorkersMatchReferenceOverWidthsGroupsRingsAndSoftcap) {
  std::mt19937 rng(2024);
  const int32_t widths[] = {64, 96, 128, 192, 256};
  const int32_t groups[] = {1, 3, 4, 7, 8};
  const DType pairs[][2] = {{DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_0, DType::kQ4_0},
                            {DType::kQ8_0, DType::kF16}, {DType::kQ4_0, DType::kQ8_0}};
  int runs = 0;
  for (int32_t w : widths)
    for (int32_t g : groups)
      for (auto& kv : pairs) {
        const int mode = (runs++) % 3;
        const float cap = runs % 4 == 0 ? 5.0f : 0.0f;
        const int32_t window = runs % 5 == 0 ? 37 : 0;
        const int32_t t = runs % 6 == 0 ? 5 : 1;
        const int64_t ctx = 100 + static_cast<int64_t>(rng() % 200);
        expect_quant_workers_agree(QShape{t, 2 * g, 2, w, w, ctx, window, kv[0], kv[1], mode, cap},
                                   rng);
      }
}

TEST(QuantAttention, MixedFloatTypesAndUnevenValueWidthsMatchReference) {
  // K and V in different float types, or float K with block V, go to the same workers; a
  // float V row may be any width (masked tails).
  std::mt19937 rng(77);
  const QShape shapes[] = {{3, 4, 1, 48, 20, 150, 0, DType::kF16, DType::kF32, 2, 0},
                           {2, 6, 2, 40, 64, 90, 0, DType::kBF16, DType::kQ4_0, 1, 2},
                           {1, 8, 2, 64, 24, 300, 0, DType::kQ8_0, DType::kBF16, 0, 0}};
  for (const QShape& s : shapes) expect_quant_workers_agree(s, rng);
}

TEST(QuantAttention, LongDecodeSplitsAndSharedPrefixGroupsMatchReference) {
  // 5000 keys at T = 1 split the key range across tasks; a chunk of 20 tokens over 600 keys
  // of history is read through shared-prefix groups (attention_shared.cpp).
  std::mt19937 rng(12);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    expect_quant_workers_agree(QShape{1, 8, 2, 128, 128, 5000, 0, t, t, 1, 0}, rng);
    expect_quant_workers_agree(QShape{20, 8, 2, 64, 64, 620, 0, t, t, 0, 0}, rng);
    expect_quant_workers_agree(QShape{20, 28, 4, 32, 32, 320, 0, t, t, 2, 0}, rng);
  }
}

// ---- both layouts end to end ----------------------------------------------------------------

// Layer 0 full, 4 q heads over 2 kv heads, 64/32 wide; layer 1 sliding(5), 3 q heads over 1,
// 32/64 wide.
CacheGeometry quant_layers() {
  return CacheGeometry{{LayerGeometry{2, 64, 32, 0}, LayerGeometry{1, 32, 64, 5}}};
}

CacheConfig quant_config(int64_t capacity, DType k, DType v, std::optional<int32_t> mw,
                         std::optional<bool> rotate = std::nullopt) {
  CacheConfig c;
  c.kv_rotate = rotate;
  c.capacity = capacity;
  c.kv_dtype = DType::kF16;
  c.k_dtype = k;
  c.v_dtype = v;
  c.max_write = mw;
  return c;
}

TEST(QuantCache, BothLayoutsMatchBruteForceOverRingsForksAndRewinds) {
  for (auto kinds : {kSequenceKind, kCellKind})
    for (DType k : {DType::kQ8_0, DType::kQ4_0})
      for (DType v : {DType::kQ8_0, DType::kQ4_0, DType::kF16})
        for (bool rotate : {true, false}) {
          auto made = make_cpu_cache(kinds, quant_layers(), quant_config(64, k, v, 3, rotate));
          ASSERT_TRUE(made.ok()) << made.status().to_string();
          Cache& cache = **made;
          testing::CacheDriver drv(cache, {4, 3}, 17);
          if (kinds == kSequenceKind) {
            for (int n : {3, 1, 2, 3, 3, 1}) drv.step(std::vector<int32_t>(n, 0));
            ASSERT_TRUE(cache.rewind(0, 11).ok());  // floor = 13 - 3 = 10
            drv.on_rewind(0, 11);
            for (int n : {2, 3, 1}) drv.step(std::vector<int32_t>(n, 0));
          } else {
            auto a = cache.seq_new();
            ASSERT_TRUE(a.ok());
            drv.on_new(*a);
            for (int n : {3, 2, 3, 1}) drv.step(std::vector<int32_t>(n, *a));
            auto b = cache.seq_clone(*a, std::nullopt);
            ASSERT_TRUE(b.ok());
            drv.on_clone(*a, *b, 1 << 20);
            for (int i = 0; i < 4; ++i) drv.step({*a, *b});
            ASSERT_TRUE(cache.seq_rm(*a).ok());  // b's shared cells stay
            drv.on_rm(*a);
            for (int i = 0; i < 2; ++i) drv.step({*b, *b});
          }
        }
}

TEST(QuantCache, ReadRowsThenWriteRowsIntoAFreshCacheIsBitwise) {
  for (auto kind : {kSequenceKind, kCellKind}) {
    const CacheConfig c = quant_config(32, DType::kQ8_0, DType::kQ4_0, 3);
    auto a = make_cpu_cache(kind, quant_layers(), c);
    auto b = make_cpu_cache(kind, quant_layers(), c);
    ASSERT_TRUE(a.ok() && b.ok());
    int32_t seq = 0;
    testing::CacheDriver drv(**a, {4, 3}, 9);
    if (kind == kCellKind) {
      ASSERT_TRUE((*a)->seq_new().ok());
      ASSERT_TRUE((*b)->seq_new().ok());
      drv.on_new(seq);
    }
    for (int n : {3, 3, 2}) drv.step(std::vector<int32_t>(n, seq));
    auto rows = (*a)->read_rows(seq, 0, 8);
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    // Layer 0 holds all 8 positions: 8 x 2 heads x 68 B of K, 8 x 2 x 18 B of V.
    EXPECT_EQ((*rows)[0].k.size(), 8u * 2 * 68);
    EXPECT_EQ((*rows)[0].v.size(), 8u * 2 * 18);
    ASSERT_TRUE((*b)->write_rows(seq, 0, 8, *rows).ok());
    auto again = (*b)->read_rows(seq, 0, 8);
    ASSERT_TRUE(again.ok());
    for (size_t l = 0; l < rows->size(); ++l) {
      EXPECT_EQ((*rows)[l].k, (*again)[l].k) << "layer " << l;
      EXPECT_EQ((*rows)[l].v, (*again)[l].v) << "layer " << l;
    }
    // Rows in another type's size are refused, naming the type.
    auto wrong = make_cpu_cache(kind, quant_layers(), quant_config(32, DType::kF16,
                                                                   DType::kQ4_0, 3));
    ASSERT_TRUE(wrong.ok());
    if (kind == kCellKind) {
      ASSERT_TRUE((*wrong)->seq_new().ok());
    }
    const Status st = (*wrong)->write_rows(seq, 0, 8, *rows);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("f16"), std::string::npos) << st.message();
  }
}

TEST(QuantCache, BlockTypeOnAFortyWideHeadIsRefusedNamingLayerWidthAndType) {
  CacheGeometry g{{LayerGeometry{2, 64, 64, 0}, LayerGeometry{2, 40, 64, 0}}};
  CacheConfig c = quant_config(16, DType::kQ8_0, DType::kF16, std::nullopt);
  auto r = make_cpu_cache(kSequenceKind, g, c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers[1].head_dim = 40, expected a multiple of 32 for "
                                      "k_dtype q8_0"),
            std::string::npos)
      << r.status().message();
  c.k_dtype = DType::kF16;
  c.v_dtype = DType::kQ4_0;
  g.layers[0].value_dim = 48;
  auto v = make_cpu_cache(kCellKind, g, c);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("layers[0].value_dim = 48, expected a multiple of 32 for "
                                      "v_dtype q4_0"),
            std::string::npos)
      << v.status().message();
}

}  // namespace
}  // namespace kvcache::cpu
