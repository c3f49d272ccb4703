// The optimized attention kernel against the reference over a sampled grid of shapes, dtypes,
// key sets (contiguous, wrapped ring runs, scattered cells), instruction sets and thread
// counts; and the reference itself against a brute force written from the inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/attention_chunk.h"
#include "cpu/kv_pool.h"
#include "test_util.h"

namespace kvcache::cpu {
namespace {

using testing::random_floats;

struct Shape {
  int32_t t, hq, hkv, dim, value_dim;
  int64_t context;  // keys the last token sees (before windowing)
  int32_t window;   // 0 = all
  DType dtype;
  int key_mode;     // 0 = one run, 1 = two runs (wrapped ring), 2 = scattered cell list
  float softcap;
};

// A pool with `rows` random rows per head; also returns the values written (pre-rounding).
LayerPool filled_pool(std::mt19937& rng, const Shape& s, int64_t rows) {
  LayerGeometry l{s.hkv, s.dim, s.value_dim, s.window};
  LayerPool pool(l, s.dtype, rows);
  EXPECT_TRUE(pool.reserve(rows).ok());
  for (int64_t r = 0; r < rows; ++r) {
    auto k = random_floats(rng, size_t(s.hkv) * s.dim);
    auto v = random_floats(rng, size_t(s.hkv) * s.value_dim);
    pool.write(r, k.data(), v.data());
  }
  return pool;
}

struct Keys {
  std::vector<std::vector<int32_t>> lists;
  std::vector<KeySet> sets;
};

// Token t sees the last min(window, context - T + 1 + t) keys of a context laid out by mode.
Keys make_keys(std::mt19937& rng, const Shape& s, int64_t rows) {
  Keys out;
  std::vector<int32_t> order(rows);
  for (int64_t i = 0; i < rows; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  out.lists.resize(s.t);
  for (int32_t t = 0; t < s.t; ++t) {
    const int64_t hi = s.context - s.t + t;  // inclusive last logical key
    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, hi - s.window + 1) : 0;
    KeySet ks;
    if (s.key_mode == 2) {
      for (int64_t j = lo; j <= hi; ++j) out.lists[t].push_back(order[j]);
    } else if (s.key_mode == 1) {  // logical j lives in row (j + rows/2) % rows
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
    out.sets.push_back(ks);
  }
  for (int32_t t = 0; t < s.t; ++t)
    if (s.key_mode == 2) out.sets[t].cells = out.lists[t];
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(double(want[i])));
    if (!(err <= worst)) worst = err, at = i;
  }
  EXPECT_LE(worst, tol) << what << " worst at " << at << ": " << got[at] << " vs " << want[at];
}

std::string describe(const Shape& s) {
  return "T=" + std::to_string(s.t) + " hq=" + std::to_string(s.hq) + " hkv=" +
         std::to_string(s.hkv) + " D=" + std::to_string(s.dim) + " Dv=" +
         std::to_string(s.value_dim) + " ctx=" + std::to_string(s.context) + " W=" +
         std::to_string(s.window) + " dtype=" + std::string(to_string(s.dtype)) +
         " mode=" + std::to_string(s.key_mode) + " cap=" + std::to_string(s.softcap);
}

// attend() with every instruction set the CPU has and every pool against the reference.
void expect_matches_reference(AttentionProblem p, std::vector<ThreadPool*> pools,
                              const std::string& what) {
  std::vector<float> want(size_t(p.n_tokens) * p.q_heads * p.kv.value_dim);
  p.out = want.data();
  attend_reference(p);
  std::vector<Isa> isas = {Isa::kScalar};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) isas.push_back(isa);
  for (Isa isa : isas)
    for (ThreadPool* tp : pools) {
      std::vector<float> got(want.size(), -99.0f);
      p.out = got.data();
      attend(p, *tp, isa);
      expect_close(got, want, 2e-5,
                   what + " isa=" + std::string(to_string(isa)) + " threads=" +
                       std::to_string(tp->size()));
    }
}

// A random layer, key sets and queries for `s`, and the problem over them (not movable: the
// problem points into the members).
struct RandomProblem {
  RandomProblem(std::mt19937& rng, const Shape& s, float scale)
      : pool(filled_pool(rng, s, s.context + 3)),
        keys(make_keys(rng, s, s.context + 3)),
        q(random_floats(rng, size_t(s.t) * s.hq * s.dim, -2.0f, 2.0f)) {
    p.n_tokens = s.t;
    p.q_heads = s.hq;
    p.q = q.data();
    p.scale = scale;
    p.softcap = s.softcap;
    p.kv = pool.view();
    p.keys = keys.sets;
  }
  RandomProblem(const RandomProblem&) = delete;
  RandomProblem& operator=(const RandomProblem&) = delete;

  LayerPool pool;
  Keys keys;
  std::vector<float> q;
  AttentionProblem p;
};

void run_differential(const Shape& s, std::mt19937& rng, std::vector<ThreadPool*> pools) {
  RandomProblem r(rng, s, 1.0f / std::sqrt(float(s.dim)));
  expect_matches_reference(r.p, std::move(pools), describe(s));
}

TEST(AttentionKernel, OptimizedMatchesReferenceOverSampledGrid) {
  std::mt19937 rng(1234);
  ThreadPool p1(1), p2(2), p3(3), p4(4);
  const int ts[] = {1, 3, 17, 64};
  const int heads[][2] = {{1, 1}, {4, 1}, {8, 2}, {32, 8}};
  const int dims[][2] = {{16, 16}, {64, 24}, {80, 80}, {128, 96}, {20, 12}};
  const int windows[] = {0, 1, 5, 64};
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  int runs = 0;
  std::bernoulli_distribution keep(0.06);
  for (int t : ts)
    for (auto& h : heads)
      for (auto& d : dims)
        for (int w : windows)
          for (DType dt : dtypes) {
            if (!keep(rng)) continue;
            const int mode = static_cast<int>(rng() % 3);
            const int64_t ctx = t + static_cast<int64_t>(rng() % 150);
            const float cap = (rng() % 4 == 0) ? 5.0f : 0.0f;
            Shape s{t, h[0], h[1], d[0], d[1], ctx, w, dt, mode, cap};
            run_differential(s, rng, {&p1, (runs % 2 ? &p2 : &p4), &p3});
            ++runs;
          }
  EXPECT_GT(runs, 40);  // the sample must cover a real part of the grid
}

TEST(AttentionKernel, EveryTileShapeAndTailMatchesReference) {
  // The AVX-512 worker tiles logits by the group size G = q_heads / kv_heads (4 keys x 4 heads
  // when 4 | G, 8 x 2 when 2 | G; an odd G takes its multiples of 4 in 4 x 4 tiles, then 3
  // heads in a 4 x 3 tile or the last head in a 16 x 1 tile) and values by slices of 4 heads,
  // masks dims that are not a multiple of 16 and key blocks that are not a multiple of the
  // tile, and prefetches rows of keys further on (value rows wider than key rows included).
  // The AVX2 worker does the same at half the width. 300 keys reach all of those paths.
  std::mt19937 rng(99);
  ThreadPool p1(1), p2(2);
  // Groups 5, 7, 9 and 11 take slices of 4 value heads and then the 1..3 left.
  const int heads[][2] = {{1, 1}, {2, 1}, {3, 1}, {6, 2}, {8, 1}, {12, 4}, {5, 1}, {14, 2},
                          {9, 1}, {11, 1}};
  const int dims[][2] = {{20, 12}, {16, 48}, {128, 128}, {72, 40}};
  for (auto& h : heads)
    for (auto& d : dims)
      for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
        run_differential(Shape{2, h[0], h[1], d[0], d[1], 301, 0, dt, int(rng() % 3), 0.0f},
                         rng, {&p1, &p2});
}

TEST(AttentionKernel, LongDecodeSplitsKeysAndMatchesReference) {
  // T=1, few kv heads and thousands of keys: attend() splits the key range across tasks.
  std::mt19937 rng(7);
  ThreadPool p1(1), p2(2), p4(4);
  for (DType dt : {DType::kF16, DType::kBF16, DType::kF32})
    for (int mode : {0, 1, 2})
      run_differential(Shape{1, 8, 2, 64, 64, 5000, 0, dt, mode, 0.0f}, rng, {&p1, &p2, &p4});
  run_differential(Shape{2, 4, 1, 32, 16, 3000, 2500, DType::kF16, 1, 0.0f}, rng, {&p4});
}

// Forks of one prefix (the cell layout's clones) decoding together, and the tokens of one
// prefill chunk: attend() reads the shared cells once per group and merges each token's own
// suffix; the result equals the reference's per-token reading.
TEST(AttentionKernel, SharedPrefixGroupsMatchReference) {
  std::mt19937 rng(31);
  ThreadPool p1(1), p2(2);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int chunk : {0, 1}) {
      // 9 tokens: forks of a 700-cell prefix with own suffixes of 1..9 cells (scattered), or
      // one sequence's chunk of 9 consecutive positions after 700 cells of history.
      const int32_t T = 9, hq = 8, hkv = 2, dim = 64, dv = 48;
      const int64_t prefix = 700, rows = prefix + 64;
      Shape shape{T, hq, hkv, dim, dv, rows, 0, dt, 2, 0.0f};
      LayerPool pool = filled_pool(rng, shape, rows);
      std::vector<int32_t> order(rows);
      for (int64_t i = 0; i < rows; ++i) order[i] = static_cast<int32_t>(i);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::vector<int32_t>> lists(T);
      int64_t next = prefix;
      for (int32_t t = 0; t < T; ++t) {
        lists[t].assign(order.begin(), order.begin() + prefix);
        if (chunk) {
          for (int32_t i = 0; i <= t; ++i) lists[t].push_back(order[prefix + i]);
        } else {
          for (int32_t i = 0; i <= t; ++i) lists[t].push_back(order[next++]);
        }
      }
      std::vector<KeySet> sets(T);
      for (int32_t t = 0; t < T; ++t) sets[t].cells = lists[t];
      auto q = random_floats(rng, size_t(T) * hq * dim, -2.0f, 2.0f);
      AttentionProblem p;
      p.n_tokens = T;
      p.q_heads = hq;
      p.q = q.data();
      p.scale = 0.125f;
      p.kv = pool.view();
      p.keys = sets;
      const auto groups = detail::find_shared_groups(p, 128);
      ASSERT_EQ(groups.size(), 1u);
      EXPECT_EQ(groups[0].tokens.size(), 9u);
      EXPECT_EQ(groups[0].shared, chunk ? prefix + 1 : prefix);  // the chunk's first token's keys
      expect_matches_reference(p, {&p1, &p2},
                               std::string(to_string(dt)) + " chunk=" + std::to_string(chunk));
    }
}

TEST(AttentionKernel, SharedGroupsNeedEnoughSharedCellsAndCellLists) {
  std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {1, 2, 3, 9}, c = {7, 8};
  std::vector<KeySet> sets(3);
  sets[0].cells = a;
  sets[1].cells = b;
  sets[2].cells = c;
  AttentionProblem p;
  p.n_tokens = 3;
  p.keys = sets;
  auto groups = detail::find_shared_groups(p, 3);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(groups[0].shared, 3);
  EXPECT_TRUE(detail::find_shared_groups(p, 4).empty());
}

// The sequence layout's key sets are runs: a ring of 100 rows holding a chunk's keys from row
// 90 on, wrapped after row 99. Token 0 sees rows 90..99, 0..4 (15 keys), token 1 one more,
// token 2 starts elsewhere (a window moved it), token 3 stops inside the first run.
TEST(AttentionKernel, SharedGroupsFollowRunsAcrossTheRingWrap) {
  auto runs = [](int64_t b0, int64_t n0, int64_t b1, int64_t n1) {
    KeySet k;
    k.n_runs = n1 > 0 ? 2 : 1;
    k.run_begin[0] = b0;
    k.run_size[0] = n0;
    k.run_begin[1] = b1;
    k.run_size[1] = n1;
    return k;
  };
  std::vector<KeySet> sets = {runs(90, 10, 0, 5), runs(90, 10, 0, 6), runs(91, 9, 0, 6),
                              runs(90, 7, 0, 0)};
  AttentionProblem p;
  p.n_tokens = 2;
  p.keys = sets;
  auto groups = detail::find_shared_groups(p, 1);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(groups[0].shared, 15);  // all of token 0's keys, across the wrap
  EXPECT_TRUE(detail::find_shared_groups(p, 16).empty());
  p.n_tokens = 4;  // token 2 has its own first row; token 3 shares only rows 90..96
  groups = detail::find_shared_groups(p, 1);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].tokens, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(groups[0].shared, 7);
  sets[1] = runs(90, 10, 50, 6);  // same first run, second run elsewhere: shares the first only
  p.n_tokens = 2;
  groups = detail::find_shared_groups(p, 1);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].shared, 10);
}

// A prefill chunk of the sequence layout (one run, or two across a ring wrap) after a long
// history: every token's keys start at the same row, so the chunk is grouped (16 tokens a
// group) and each group reads the history once; results equal the reference's.
TEST(AttentionKernel, SequenceLayoutChunkReadsHistoryOncePerGroupAndMatchesReference) {
  std::mt19937 rng(41);
  ThreadPool p1(1), p2(2);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int mode : {0, 1})
      for (int32_t T : {17, 40}) {
        Shape shape{T, 8, 2, 64, 48, 600 + T, 0, dt, mode, 0.0f};
        RandomProblem r(rng, shape, 0.125f);
        const AttentionProblem& p = r.p;
        const auto groups = detail::find_shared_groups(p, 128);
        // 17 tokens: one group of 16 (the 17th alone is no group); 40: 16 + 16 + 8.
        ASSERT_EQ(groups.size(), T == 17 ? 1u : 3u) << describe(shape);
        EXPECT_EQ(groups[0].tokens.size(), 16u);
        EXPECT_EQ(groups[0].shared, 601);  // the first token's keys: 600 of history + itself
        expect_matches_reference(p, {&p1, &p2}, describe(shape));
      }
}

// 7 q heads per kv head (28 / 4): groups of 64 / 7 = 9 tokens keep the stacked heads (63)
// within the wide worker's 64; 20 tokens make groups of 9, 9 and 2. Results equal the reference.
TEST(AttentionKernel, SharedGroupsShrinkToKeepStackedHeadsWithinTheWideWorker) {
  std::mt19937 rng(43);
  ThreadPool p2(2);
  const int32_t T = 20;
  Shape shape{T, 28, 4, 32, 32, 300 + T, 0, DType::kF16, 0, 0.0f};
  RandomProblem r(rng, shape, 0.2f);
  const AttentionProblem& p = r.p;
  const auto groups = detail::find_shared_groups(p, 128);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].tokens.size(), 9u);
  EXPECT_EQ(groups[1].tokens.size(), 9u);
  EXPECT_EQ(groups[2].tokens.size(), 2u);
  expect_matches_reference(p, {&p2}, describe(shape));
}

// The wide worker (heads across lanes, for shared groups' virtual tokens) straight against
// the reference: head counts that fill 1..4 vectors or leave lanes empty, more than 64 (it
// hands over to chunk_avx512), key counts around the key block and its 4/6-key tiles, dims
// that are no multiple of its 4/6-dim value tiles, every dtype, runs and cell lists.
TEST(AttentionKernel, WideWorkerMatchesReferenceOverHeadsKeysAndDims) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 here (CPU or KVCACHE_ISA)";
  std::mt19937 rng(53);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int32_t group : {1, 5, 16, 17, 48, 64, 80})
      for (int64_t context : {int64_t{1}, int64_t{7}, detail::kKeyBlock, detail::kKeyBlock + 1,
                              2 * detail::kKeyBlock + 37})
        for (int mode : {0, 2}) {
          const int32_t dim = group % 2 ? 40 : 64, dv = group % 2 ? 22 : 64;
          Shape shape{1, 2 * group, 2, dim, dv, context, 0, dt, mode, 0.0f};
          RandomProblem r(rng, shape, 1.0f / std::sqrt(float(dim)));
          AttentionProblem& p = r.p;
          std::vector<float> want(size_t(shape.hq) * dv), got(want.size());
          p.out = want.data();
          attend_reference(p);
          std::vector<float> m(group), l(group), acc(size_t(group) * dv);
          std::vector<float> scratch(size_t(group) * detail::kKeyBlock);
          for (int32_t g = 0; g < 2; ++g) {
            detail::chunk_avx512_wide(p, 0, g, 0, context, m.data(), l.data(), acc.data(),
                                      scratch.data());
            for (int32_t h = 0; h < group; ++h)
              for (int32_t d = 0; d < dv; ++d)
                got[(size_t(g) * group + h) * dv + d] = acc[size_t(h) * dv + d] / l[h];
          }
          expect_close(got, want, 2e-5, describe(shape));
        }
}

TEST(AttentionKernel, ReferenceMatchesBruteForceFromInputs) {
  std::mt19937 rng(99);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (float cap : {0.0f, 2.0f}) {
      const int32_t hq = 6, hkv = 2, dim = 12, dv = 5, n_keys = 9, T = 2;
      LayerGeometry l{hkv, dim, dv, 0};
      LayerPool pool(l, dt, n_keys);
      ASSERT_TRUE(pool.reserve(n_keys).ok());
      std::vector<std::vector<float>> ks, vs;  // per row, rounded to dtype
      for (int r = 0; r < n_keys; ++r) {
        auto k = random_floats(rng, hkv * dim), v = random_floats(rng, hkv * dv);
        pool.write(r, k.data(), v.data());
        ks.push_back(testing::rounded(dt, k));
        vs.push_back(testing::rounded(dt, v));
      }
      // Token 0 sees cells {4, 1, 7}; token 1 sees {4, 1, 7, 0, 8}.
      std::vector<int32_t> c0 = {4, 1, 7}, c1 = {4, 1, 7, 0, 8};
      std::vector<KeySet> sets(2);
      sets[0].cells = c0;
      sets[1].cells = c1;
      auto q = random_floats(rng, T * hq * dim, -3, 3);
      std::vector<float> out(T * hq * dv);
      AttentionProblem p{T, hq, q.data(), out.data(), 0.4f, cap, pool.view(), sets};
      attend_reference(p);
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < hq; ++h) {
          const int g = h / (hq / hkv);
          std::vector<const float*> kp, vp;
          for (int32_t c : (t == 0 ? c0 : c1)) {
            kp.push_back(ks[c].data() + g * dim);
            vp.push_back(vs[c].data() + g * dv);
          }
          auto want = testing::brute_attend(q.data() + (t * hq + h) * dim, kp, vp, dim, dv,
                                            0.4, cap);
          for (int d = 0; d < dv; ++d)
            EXPECT_NEAR(out[(t * hq + h) * dv + d], want[d], 1e-6)
                << "dtype " << to_string(dt) << " t " << t << " h " << h;
        }
    }
}

TEST(AttentionKernel, SingleKeyReturnsItsValueExactly) {
  // softmax over one key is 1, so the output is the stored value row.
  LayerGeometry l{1, 8, 3, 0};
  LayerPool pool(l, DType::kBF16, 4);
  ASSERT_TRUE(pool.reserve(4).ok());
  std::vector<float> k(8, 0.5f), v = {1.5f, -2.0f, 0.25f};
  pool.write(2, k.data(), v.data());
  std::vector<KeySet> sets(1);
  sets[0].n_runs = 1;
  sets[0].run_begin[0] = 2;
  sets[0].run_size[0] = 1;
  std::vector<float> q(2 * 8, 1.0f), out(2 * 3);
  ThreadPool tp(2);
  attend(AttentionProblem{1, 2, q.data(), out.data(), 1.0f, 0.0f, pool.view(), sets}, tp);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f}));
}

}  // namespace
}  // namespace kvcache::cpu
