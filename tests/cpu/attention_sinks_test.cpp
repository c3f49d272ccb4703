// Learned attention sinks (one logit per query head joining the softmax denominator): the
// reference against a brute force and known values, every optimized path (unsplit, split
// keys, shared-prefix groups and the wide worker; float and quantized workers) against the
// reference at every instruction set and thread count, both cache layouts end to end (rings,
// sliding pools, forks) under each ISA ceiling, and the refusals of missing or mis-sized sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cache_driver.h"
#include "cpu/attention.h"
#include "cpu/attention_chunk.h"
#include "cpu/cpu_cache.h"
#include "cpu/isa.h"
#include "cpu/kv_pool.h"
#include "test_util.h"

namespace kvcache::cpu {
namespace {

using testing::random_floats;
using testing::worst_error;

struct SinkCase {
  int32_t t, hq, hkv, dim, dv;
  int64_t context;  // keys the last token sees (before the window)
  int32_t window;   // 0 = all
  DType k, v;
  int key_mode;     // 0 = one run, 1 = two runs (a wrapped ring), 2 = scattered cells
};

std::string describe(const SinkCase& c) {
  return "T=" + std::to_string(c.t) + " hq=" + std::to_string(c.hq) + " hkv=" +
         std::to_string(c.hkv) + " D=" + std::to_string(c.dim) + "/" + std::to_string(c.dv) +
         " ctx=" + std::to_string(c.context) + " W=" + std::to_string(c.window) + " " +
         std::string(to_string(c.k)) + "/" + std::string(to_string(c.v)) +
         " mode=" + std::to_string(c.key_mode);
}

// A random layer, key sets, queries and sink logits (one of them far above every logit, one
// far below) and the problem over them. Not movable: the problem points into the members.
struct SinkProblem {
  SinkProblem(std::mt19937& rng, const SinkCase& c)
      : pool(LayerGeometry{c.hkv, c.dim, c.dv, c.window, true}, c.k, c.v, c.context + 3),
        q(random_floats(rng, size_t(c.t) * c.hq * c.dim, -2.0f, 2.0f)),
        sinks(random_floats(rng, size_t(c.hq), -3.0f, 3.0f)) {
    const int64_t rows = c.context + 3;
    EXPECT_TRUE(pool.reserve(rows).ok());
    for (int64_t r = 0; r < rows; ++r) {
      auto k = random_floats(rng, size_t(c.hkv) * c.dim), v = random_floats(rng, size_t(c.hkv) * c.dv);
      pool.write(r, k.data(), v.data());
    }
    sinks[0] = 12.0f;  // takes nearly all of head 0's weight
    if (c.hq > 1) sinks[1] = -30.0f;  // takes nearly none of head 1's
    std::vector<int32_t> order(rows);
    for (int64_t i = 0; i < rows; ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    lists.resize(c.t);
    for (int32_t t = 0; t < c.t; ++t) {
      const int64_t hi = c.context - c.t + t, lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
      KeySet ks;
      if (c.key_mode == 2) {
        for (int64_t j = lo; j <= hi; ++j) lists[t].push_back(order[j]);
      } else {
        const int64_t b = c.key_mode == 1 ? (lo + rows / 2) % rows : lo, n = hi - lo + 1;
        ks.n_runs = b + n <= rows ? 1 : 2;
        ks.run_begin[0] = b;
        ks.run_size[0] = std::min(n, rows - b);
        ks.run_size[1] = n - ks.run_size[0];
      }
      sets.push_back(ks);
    }
    for (int32_t t = 0; t < c.t; ++t)
      if (c.key_mode == 2) sets[t].cells = lists[t];
    p.n_tokens = c.t;
    p.q_heads = c.hq;
    p.q = q.data();
    p.scale = 1.0f / std::sqrt(float(c.dim));
    p.kv = pool.view();
    p.keys = sets;
    p.sinks = sinks.data();
  }
  SinkProblem(const SinkProblem&) = delete;
  SinkProblem& operator=(const SinkProblem&) = delete;

  LayerPool pool;
  std::vector<float> q, sinks;
  std::vector<std::vector<int32_t>> lists;
  std::vector<KeySet> sets;
  AttentionProblem p;
};

std::vector<Isa> isas_here() {
  std::vector<Isa> isas = {Isa::kScalar};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// attend() at every ISA and 1, 2 and 4 threads against the reference, sinks on; and the sinks
// must matter: the output without them differs. Block keys: the query is quantized per block
// (see quant_kv_test.cpp), 1e-2 of an output; otherwise 2e-5.
void expect_paths_match_reference(const SinkCase& c, std::mt19937& rng) {
  SinkProblem r(rng, c);
  AttentionProblem p = r.p;
  const size_t n = size_t(c.t) * c.hq * c.dv;
  std::vector<float> want(n), plain(n);
  p.out = want.data();
  attend_reference(p);
  p.sinks = nullptr;
  p.out = plain.data();
  attend_reference(p);
  EXPECT_GT(worst_error(plain, want), 1e-3) << describe(c) << ": the sinks changed nothing";
  p.sinks = r.sinks.data();
  const double tol = is_block_type(c.k) ? 1e-2 : 2e-5;
  ThreadPool p1(1), p2(2), p4(4);
  for (Isa isa : isas_here())
    for (ThreadPool* tp : {&p1, &p2, &p4}) {
      std::vector<float> got(n, -99.0f);
      p.out = got.data();
      attend(p, *tp, isa);
      EXPECT_LE(worst_error(got, want), tol)
          << describe(c) << " isa " << to_string(isa) << " threads " << tp->size();
    }
}

TEST(AttentionSinks, ReferenceMatchesBruteForceWithASinkPerHead) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SinkProblem r(rng, SinkCase{2, 6, 2, 12, 5, 9, 0, dt, dt, 2});
    std::vector<float> out(2 * 6 * 5);
    r.p.out = out.data();
    attend_reference(r.p);
    for (int32_t t = 0; t < 2; ++t)
      for (int32_t h = 0; h < 6; ++h) {
        const int32_t g = h / 3;
        std::vector<std::vector<float>> kr, vr;
        std::vector<const float*> ks, vs;
        for (int64_t j = 0; j < r.sets[t].size(); ++j) {
          std::vector<float> k(12), v(5);
          load_row(dt, r.pool.view().k_row(g, r.sets[t].row(j)), k.data(), 12);
          load_row(dt, r.pool.view().v_row(g, r.sets[t].row(j)), v.data(), 5);
          kr.push_back(k), vr.push_back(v);
        }
        for (size_t j = 0; j < kr.size(); ++j) ks.push_back(kr[j].data()), vs.push_back(vr[j].data());
        const auto want = testing::brute_attend(r.q.data() + (t * 6 + h) * 12, ks, vs, 12, 5,
                                                r.p.scale, 0.0, &r.sinks[h]);
        for (int d = 0; d < 5; ++d)
          EXPECT_NEAR(out[(t * 6 + h) * 5 + d], want[d], 1e-6) << "t " << t << " h " << h;
      }
  }
}

// One key whose logit is 0 (q = 0): its weight is 1 / (1 + e^sink). sink = ln 3: a quarter of
// the value; sink = 0: half; sink = 200 (e^200 overflows a float): 0, not NaN.
TEST(AttentionSinks, OneKeyGetsOneOverOnePlusESinkOfItsValueAtEveryIsa) {
  LayerGeometry l{1, 32, 3, 0, true};
  for (DType dt : {DType::kF32, DType::kQ8_0}) {
    LayerPool pool(l, dt, DType::kF32, 4);
    ASSERT_TRUE(pool.reserve(4).ok());
    std::vector<float> k(32, 0.5f), v = {4.0f, -2.0f, 0.5f};
    pool.write(1, k.data(), v.data());
    std::vector<KeySet> sets(1);
    sets[0].n_runs = 1;
    sets[0].run_begin[0] = 1;
    sets[0].run_size[0] = 1;
    std::vector<float> q(3 * 32, 0.0f), out(3 * 3);
    const std::vector<float> sinks = {std::log(3.0f), 0.0f, 200.0f};
    AttentionProblem p{1, 3, q.data(), out.data(), 1.0f, 0.0f, pool.view(), sets, sinks.data()};
    ThreadPool tp(2);
    for (Isa isa : isas_here()) {
      attend(p, tp, isa);
      const std::vector<float> want = {1.0f, -0.5f, 0.125f, 2.0f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f};
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(out[i], want[i], 1e-6) << to_string(dt) << " " << to_string(isa) << " " << i;
    }
    attend_reference(p);
    EXPECT_NEAR(out[0], 1.0f, 1e-6);
    EXPECT_EQ(out[8], 0.0f);
  }
}

TEST(AttentionSinks, UnsplitPathsMatchReferenceOverDtypesGroupsAndKeySets) {
  std::mt19937 rng(11);
  const DType pairs[][2] = {{DType::kF32, DType::kF32},   {DType::kF16, DType::kF16},
                            {DType::kBF16, DType::kBF16}, {DType::kQ8_0, DType::kQ8_0},
                            {DType::kQ4_0, DType::kQ4_0}, {DType::kQ8_0, DType::kF16},
                            {DType::kF16, DType::kF32}};
  const int32_t heads[][2] = {{4, 1}, {8, 2}, {3, 1}, {12, 4}};
  int run = 0;
  for (auto& kv : pairs)
    for (auto& h : heads) {
      const int32_t t = run % 3 == 0 ? 5 : 1, window = run % 4 == 1 ? 17 : 0;
      expect_paths_match_reference(
          SinkCase{t, h[0], h[1], 64, run % 2 ? 32 : 64, 40 + int64_t(rng() % 160), window,
                   kv[0], kv[1], run % 3},
          rng);
      ++run;
    }
}

// T = 1 over 5000 keys with 2 kv heads: the key range is split over tasks and the partial
// states merge (attend_split); the sink joins once, after the merge.
TEST(AttentionSinks, SplitKeyRangesMatchReference) {
  std::mt19937 rng(12);
  for (DType dt : {DType::kF16, DType::kF32, DType::kQ8_0, DType::kQ4_0})
    for (int mode : {0, 1})
      expect_paths_match_reference(SinkCase{1, 8, 2, 128, 128, 5000, 0, dt, dt, mode}, rng);
}

// A prefill chunk of 20 tokens over 600 keys of history (one run, a wrapped ring, or cells):
// shared-prefix groups read the history once (the wide AVX-512 worker for float K/V) and merge
// with each token's suffix (attend_shared); 28 / 4 heads stack 63 heads per kv head.
TEST(AttentionSinks, SharedPrefixGroupsAndTheWideWorkerMatchReference) {
  std::mt19937 rng(13);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0})
    for (int mode : {0, 1, 2}) {
      const SinkCase c{20, 8, 2, 64, 64, 620, 0, dt, dt, mode};
      SinkProblem r(rng, c);
      ASSERT_FALSE(detail::find_shared_groups(r.p, 128).empty()) << describe(c);
      expect_paths_match_reference(c, rng);
    }
  expect_paths_match_reference(SinkCase{20, 28, 4, 32, 32, 320, 0, DType::kF16, DType::kF16, 2},
                               rng);
  expect_paths_match_reference(SinkCase{12, 8, 2, 64, 64, 400, 300, DType::kBF16, DType::kBF16, 1},
                               rng);
}

// ---- both layouts end to end ---------------------------------------------------------------

// Layer 0: full, 4 q heads over 2 kv heads, 64/32 wide, sinks. Layer 1: sliding(5), 3 q heads
// over 1, 32/64 wide, sinks when `both`.
CacheGeometry sink_layers(bool both) {
  return CacheGeometry{{LayerGeometry{2, 64, 32, 0, true}, LayerGeometry{1, 32, 64, 5, both}}};
}

CacheConfig sink_config(DType dt, std::optional<int32_t> max_write) {
  CacheConfig c;
  c.capacity = 64;
  c.kv_dtype = dt;
  c.max_write = max_write;
  return c;
}

// The driver checks every output against a brute force over its model of the sequence, with
// each layer's sinks; rings wrap (sequence) and sliding pools recycle (cell), forks share.
void drive(Cache& cache, uint32_t seed) {
  testing::CacheDriver drv(cache, {4, 3}, seed);
  if (cache.kind() == kSequenceKind) {
    for (int n : {3, 1, 2, 3, 3, 1, 2}) drv.step(std::vector<int32_t>(n, 0));
    ASSERT_TRUE(cache.rewind(0, 13).ok());
    drv.on_rewind(0, 13);
    for (int n : {2, 3, 1}) drv.step(std::vector<int32_t>(n, 0));
    return;
  }
  const int32_t a = *cache.seq_new();
  drv.on_new(a);
  for (int n : {3, 2, 3, 1}) drv.step(std::vector<int32_t>(n, a));
  auto b = cache.seq_clone(a, std::nullopt);
  ASSERT_TRUE(b.ok());
  drv.on_clone(a, *b, 1 << 20);
  for (int i = 0; i < 5; ++i) drv.step({a, *b, a});
  ASSERT_TRUE(cache.seq_rm(a).ok());
  drv.on_rm(a);
  for (int i = 0; i < 2; ++i) drv.step({*b, *b});
}

TEST(AttentionSinks, BothLayoutsMatchBruteForceUnderEveryIsaCeiling) {
  for (Isa ceiling : isas_here()) {
    ScopedIsaCeiling scoped(ceiling);
    for (auto kind : {kSequenceKind, kCellKind})
      for (DType dt : {DType::kF32, DType::kF16, DType::kQ8_0})
        for (bool both : {true, false}) {
          SCOPED_TRACE(std::string(kind) + " " + std::string(to_string(dt)) + " isa " +
                       std::string(to_string(ceiling)) + (both ? " both" : " layer 0"));
          auto made = make_cpu_cache(kind, sink_layers(both), sink_config(dt, 3));
          ASSERT_TRUE(made.ok()) << made.status().to_string();
          drive(**made, 5);
        }
  }
}

// ---- refusals ------------------------------------------------------------------------------

TEST(AttentionSinks, MissingOrMisSizedSinksAreRefusedNamingLayerAndCountsAndClaimNothing) {
  for (auto kind : {kSequenceKind, kCellKind}) {
    auto made = make_cpu_cache(kind, sink_layers(false), sink_config(DType::kF32, 3));
    ASSERT_TRUE(made.ok());
    Cache& cache = **made;
    const int32_t seq = *cache.open_seq();
    const std::vector<int32_t> ids = {seq, seq};
    ASSERT_TRUE(cache.declare_step(ids).ok());
    const std::vector<int64_t> pos = {0, 1};
    std::vector<float> q(2 * 4 * 64, 0.1f), k(2 * 2 * 64, 0.2f), v(2 * 2 * 32, 0.3f);
    std::vector<float> out(2 * 4 * 32), sinks(3, 0.5f);
    AttendArgs a{0, 2, 4, pos, q, k, v, 0.125f, 0.0f, out};
    Status s = cache.update_and_attend(a);  // layer 0 has sinks: none given
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "update_and_attend: layer 0: sinks has 0 floats, expected one per query head "
              "(q_heads = 4) on a layer with sinks");
    a.sinks = sinks;  // 3 for 4 heads
    s = cache.update_and_attend(a);
    EXPECT_EQ(s.message(),
              "update_and_attend: layer 0: sinks has 3 floats, expected one per query head "
              "(q_heads = 4) on a layer with sinks");
    sinks.assign(4, NAN);
    a.sinks = sinks;
    s = cache.update_and_attend(a);
    EXPECT_EQ(s.message(), "update_and_attend: layer 0: sinks[0] is not finite, expected a "
                           "finite logit");
    EXPECT_EQ(cache.pos(seq), 0);  // nothing placed
    sinks.assign(4, 0.5f);
    ASSERT_TRUE(cache.update_and_attend(a).ok());
    // Layer 1 has none: sinks given are refused.
    std::vector<float> q1(2 * 3 * 32), k1(2 * 32), v1(2 * 64), out1(2 * 3 * 64), s1(3, 0.0f);
    AttendArgs b{1, 2, 3, pos, q1, k1, v1, 0.125f, 0.0f, out1, s1};
    s = cache.update_and_attend(b);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "update_and_attend: layer 1: sinks has 3 floats, expected none (the layer has no "
              "sinks)");
    b.sinks = {};
    EXPECT_TRUE(cache.update_and_attend(b).ok());
    EXPECT_EQ(cache.pos(seq), 2);
  }
}

}  // namespace
}  // namespace kvcache::cpu
