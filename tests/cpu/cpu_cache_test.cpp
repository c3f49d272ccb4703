// The cpu caches end to end: outputs against a brute force over a model of each sequence,
// growth, ring wrap-around, forks, shared positions, refilled holes, attend-only layers,
// refusals that change nothing, and factory registration.
#include <gtest/gtest.h>

#include <random>

#include "cache_driver.h"
#include "cpu/cache_common.h"
#include "cpu/cpu_cache.h"

namespace kvcache::cpu {
namespace {

using testing::CacheDriver;

// Layer 0: full, 4 q heads over 2 kv heads, dims 16/8. Layer 1: sliding(5), 3 q heads over
// 1 kv head, dims 12/20 (odd widths exercise the SIMD tails).
CacheGeometry two_layers(int32_t window = 5) {
  return CacheGeometry{{LayerGeometry{2, 16, 8, 0}, LayerGeometry{1, 12, 20, window}}};
}
const std::vector<int32_t> kQHeads = {4, 3};

std::shared_ptr<Cache> make(std::string_view kind, const CacheConfig& c,
                            CpuCacheOptions o = {}, CacheGeometry g = two_layers()) {
  auto r = make_cpu_cache(kind, g, c, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : nullptr;
}

CacheConfig config(int64_t capacity, DType dt, int64_t initial, std::optional<int32_t> mw) {
  CacheConfig c;
  c.capacity = capacity;
  c.kv_dtype = dt;
  c.initial_capacity = initial;
  c.max_write = mw;
  return c;
}

TEST(SequenceCache, ChunkedStepsMatchBruteForceAcrossDtypesThreadsAndGrowth) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int threads : {1, 2, 4}) {
      ThreadPool tp(threads);
      CpuCacheOptions o;
      o.pool = &tp;
      // initial 2 cells: the full layer grows 2 -> 4 -> 8 -> ... while the ring (5 + 3 - 1 =
      // 7 slots) wraps many times.
      auto cache = make(kSequenceKind, config(64, dt, 2, 3), o);
      CacheDriver drv(*cache, kQHeads, 11 + threads);
      const int64_t bytes_at_start = cache->allocated_bytes();
      for (int n : {3, 1, 2, 3, 3, 1, 1, 2, 3, 1}) drv.step(std::vector<int32_t>(n, 0));
      EXPECT_EQ(cache->pos(0), 20);
      EXPECT_GT(cache->allocated_bytes(), bytes_at_start);
    }
}

// The test above keeps every attention call below attend()'s 2^18 multiply-add threshold, so
// its thread counts run one thread. Here one layer of 8 q heads x (64 + 64) dims makes each key
// 1024 multiply-adds: 64-token steps over up to 576 keys, then 1-token decodes over 577+ keys
// (5.9e5 >= 2^18) are shared over the pool, and must still match the brute force.
TEST(SequenceCache, StepsAboveTheParallelThresholdMatchBruteForceAcrossThreads) {
  const CacheGeometry g{{LayerGeometry{2, 64, 64, 0}}};
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int threads : {1, 2, 4}) {
      ThreadPool tp(threads);
      CpuCacheOptions o;
      o.pool = &tp;
      auto cache = make(kSequenceKind, config(600, dt, 0, 64), o, g);
      CacheDriver drv(*cache, {8}, 31 + threads);
      for (int i = 0; i < 9; ++i) drv.step(std::vector<int32_t>(64, 0));
      for (int i = 0; i < 3; ++i) drv.step({0});
      EXPECT_EQ(cache->pos(0), 579);
    }
}

TEST(SequenceCache, KeysOfTheLayoutsRunsReadOldestFirstAcrossTheWrap) {
  // Positions 5..9 in a ring of 7 slots, as SequenceLayout::visible gives them: slots 5, 6
  // then 0, 1, 2.
  SlotRuns runs;
  runs.runs = {SlotRun{5, 7}, SlotRun{0, 3}};
  runs.n = 2;
  runs.first = 5;
  KeySet ks = detail::keys_of(runs);
  ASSERT_EQ(ks.n_runs, 2);
  ASSERT_EQ(ks.size(), 5);
  std::vector<int64_t> rows;
  for (int64_t j = 0; j < ks.size(); ++j) rows.push_back(ks.row(j));
  EXPECT_EQ(rows, (std::vector<int64_t>{5, 6, 0, 1, 2}));
}

TEST(SequenceCache, RewindThenContinueMatchesBruteForce) {
  auto cache = make(kSequenceKind, config(40, DType::kF16, 0, 2));
  CacheDriver drv(*cache, kQHeads, 5);
  for (int i = 0; i < 6; ++i) drv.step({0, 0});
  // floor = L - M = 12 - 2 = 10 (the ring keeps W + M - 1 = 6 slots).
  EXPECT_EQ(cache->rewind(0, 9).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(cache->rewind(0, 13).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(cache->rewind(0, 10).ok());
  drv.on_rewind(0, 10);
  drv.step({0});
  drv.step({0, 0});
  EXPECT_EQ(cache->pos(0), 13);
}

TEST(SequenceCache, CheckpointRestoresPastTheRingAndLaterStepsMatchBruteForce) {
  // Ring of W + M - 1 = 5 + 2 - 1 = 6 slots. A checkpoint at 4 copies positions 0..3 of the
  // sliding layer (W - 1 = 4 cells of 1 * (12 + 20) f16 = 64 bytes). At length 16 the floor
  // is 14; restore(4) writes 0..3 back and the next steps read them again.
  auto cache = make(kSequenceKind, config(40, DType::kF16, 0, 2));
  CacheDriver drv(*cache, kQHeads, 9);
  drv.step({0, 0});
  drv.step({0, 0});
  Result<std::unique_ptr<CacheCheckpoint>> cp = cache->checkpoint(0);
  ASSERT_TRUE(cp.ok()) << cp.status().to_string();
  EXPECT_EQ((*cp)->pos(), 4);
  EXPECT_EQ((*cp)->bytes(), 4 * 64);
  for (int i = 0; i < 6; ++i) drv.step({0, 0});
  EXPECT_EQ(cache->rewind(0, 4).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(cache->restore(0, **cp).ok());
  drv.on_rewind(0, 4);
  EXPECT_EQ(cache->pos(0), 4);
  drv.step({0, 0});  // reads positions 1..5 through the restored rows: checked by the driver
  drv.step({0});
  EXPECT_EQ(cache->restore(0, **cp).code(), StatusCode::kOk);  // 7 >= 4: back again
  EXPECT_EQ(cache->restore(1, **cp).code(), StatusCode::kNotFound);
  auto other = make(kSequenceKind, config(40, DType::kF16, 0, 2));
  EXPECT_EQ(other->restore(0, **cp).code(), StatusCode::kInvalidArgument);
  cache->clear();
  EXPECT_EQ(cache->restore(0, **cp).code(), StatusCode::kOutOfRange);  // restore never grows
  auto cell = make(kCellKind, config(40, DType::kF16, 0, 2));
  EXPECT_EQ(cell->checkpoint(0).status().code(), StatusCode::kUnimplemented);
}

// Both layouts: attend() reads what update_and_attend wrote in the step; each call refuses the
// other's k/v convention, naming the field, and a refused call changes nothing.
TEST(Caches, AttendOnlyIsAnExplicitCallThatEqualsTheWritersAttention) {
  for (std::string_view kind : {kSequenceKind, kCellKind}) {
    SCOPED_TRACE(std::string(kind));
    CacheGeometry g{{LayerGeometry{2, 16, 16, 0}}};
    auto cache = make(kind, config(16, DType::kF32, 0, std::nullopt), {}, g);
    const int32_t seq = *cache->open_seq();
    std::mt19937 rng(3);
    ASSERT_TRUE(cache->declare_step(std::vector<int32_t>{seq, seq, seq}).ok());
    auto q = testing::random_floats(rng, 3 * 4 * 16), k = testing::random_floats(rng, 3 * 2 * 16),
         v = testing::random_floats(rng, 3 * 2 * 16);
    std::vector<int64_t> pos = {0, 1, 2};
    std::vector<float> out1(3 * 4 * 16), out2(out1.size());
    EXPECT_EQ(cache->attend({0, 3, 4, pos, q, {}, {}, 0.25f, 0.0f, out2}).code(),
              StatusCode::kFailedPrecondition);  // nothing written in this step yet
    Status no_k = cache->update_and_attend({0, 3, 4, pos, q, {}, v, 0.25f, 0.0f, out1});
    EXPECT_EQ(no_k.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(no_k.message().find("update_and_attend: layer 0: k has 0 floats"),
              std::string::npos) << no_k.message();
    Status no_v = cache->update_and_attend({0, 3, 4, pos, q, k, {}, 0.25f, 0.0f, out1});
    EXPECT_EQ(no_v.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(no_v.message().find("v has 0 floats"), std::string::npos) << no_v.message();
    EXPECT_EQ(cache->pos(seq), 0);  // the refusals placed nothing
    ASSERT_TRUE(cache->update_and_attend({0, 3, 4, pos, q, k, v, 0.25f, 0.0f, out1}).ok());
    Status with_k = cache->attend({0, 3, 4, pos, q, k, {}, 0.25f, 0.0f, out2});
    EXPECT_EQ(with_k.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(with_k.message().find("attend: layer 0: k has 96 floats, expected none"),
              std::string::npos) << with_k.message();
    EXPECT_EQ(cache->attend({0, 3, 4, pos, q, {}, v, 0.25f, 0.0f, out2}).code(),
              StatusCode::kInvalidArgument);
    ASSERT_TRUE(cache->attend({0, 3, 4, pos, q, {}, {}, 0.25f, 0.0f, out2}).ok());
    EXPECT_EQ(out1, out2);
    EXPECT_EQ(cache->update_and_attend({0, 3, 4, pos, q, k, v, 0.25f, 0.0f, out1}).code(),
              StatusCode::kFailedPrecondition);  // the layer is already written
    EXPECT_EQ(cache->pos(seq), 3);
  }
}

TEST(Caches, OpenSeqGivesAnEmptySequenceInEitherLayout) {
  auto seq = make(kSequenceKind, config(40, DType::kF16, 0, 2));
  EXPECT_EQ(*seq->open_seq(), 0);
  CacheDriver drv(*seq, kQHeads, 2);
  drv.step({0, 0});
  EXPECT_EQ(seq->open_seq().status().code(), StatusCode::kResourceExhausted);  // 0 is in use
  seq->clear();
  EXPECT_EQ(*seq->open_seq(), 0);
  CacheConfig c = config(40, DType::kF16, 0, 2);
  c.max_seqs = 2;
  auto cell = make(kCellKind, c);
  EXPECT_EQ(*cell->open_seq(), 0);
  EXPECT_EQ(*cell->open_seq(), 1);
  EXPECT_EQ(cell->open_seq().status().code(), StatusCode::kResourceExhausted);  // 2 ids taken
}

// save_point/return_to go back past the sliding window in both layouts with no caller asking
// kind(): the sequence layout restores a checkpoint, the cell layout hands over to a fork.
// The driver checks every later output against its brute force.
TEST(Caches, UndoPointsReturnPastTheWindowAndLaterStepsMatchBruteForce) {
  for (std::string_view kind : {kSequenceKind, kCellKind}) {
    SCOPED_TRACE(std::string(kind));
    CacheConfig c = config(40, DType::kF16, 0, 2);
    c.max_seqs = 3;
    auto cache = make(kind, c);
    const bool cell = kind == kCellKind;  // for the driver's model only
    int32_t seq = *cache->open_seq();
    CacheDriver drv(*cache, kQHeads, 21);
    drv.on_new(seq);
    drv.step({seq, seq});
    drv.step({seq, seq});
    EXPECT_EQ(cache->save_point(seq + 7).status().code(), StatusCode::kNotFound);
    Result<UndoPoint> point = cache->save_point(seq);
    ASSERT_TRUE(point.ok()) << point.status().to_string();
    EXPECT_EQ(point->pos, 4);
    EXPECT_TRUE(point->saved());
    // Sequence layout: positions 0..3 of the sliding layer, 4 x 1 x (12 + 20) f16 = 256 bytes.
    EXPECT_EQ(point->bytes(), cell ? 0 : 256);
    EXPECT_EQ(point->fork >= 0, cell);
    if (cell) drv.on_clone(seq, point->fork, 4);
    for (int i = 0; i < 6; ++i) drv.step({seq, seq});
    EXPECT_EQ(cache->rewind(seq, 4).code(), StatusCode::kOutOfRange);  // the window moved on
    EXPECT_EQ(cache->return_to(seq + 7, *point).status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(point->saved());  // the refusal kept it
    const int32_t fork = point->fork;
    Result<int32_t> back = cache->return_to(seq, *point);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    if (cell) {
      EXPECT_EQ(*back, fork);  // the fork took over: consumed from the point
      EXPECT_EQ(point->fork, -1);
      EXPECT_EQ(cache->seq_len(seq), 0);  // the old sequence is removed
      drv.on_rm(seq);
    } else {
      EXPECT_EQ(*back, 0);
      drv.on_rewind(seq, 4);
    }
    seq = *back;
    EXPECT_EQ(cache->pos(seq), 4);
    drv.step({seq, seq});  // reads positions 1..5 through what the point kept
    drv.step({seq});
    cache->release(*point);
    EXPECT_FALSE(point->saved());
    // Without a window that looks back there is nothing to save: a rewind suffices.
    auto flat = make(kind, c, {}, two_layers(1));
    const int32_t f = *flat->open_seq();
    Result<UndoPoint> none = flat->save_point(f);
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->saved());
    EXPECT_EQ(*flat->return_to(f, *none), f);
  }
}

TEST(CellCache, AnUndoPointWithoutAFreeIdIsRefusedAndReleaseFreesTheFork) {
  CacheConfig c = config(40, DType::kF16, 0, 2);
  c.max_seqs = 2;
  auto cache = make(kCellKind, c);
  const int32_t s = *cache->open_seq();
  CacheDriver drv(*cache, kQHeads, 4);
  drv.on_new(s);
  drv.step({s, s, s});
  Result<UndoPoint> p = cache->save_point(s);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cache->pos(p->fork), 3);
  EXPECT_EQ(cache->save_point(s).status().code(), StatusCode::kResourceExhausted);
  const int32_t fork = p->fork;
  cache->release(*p);
  EXPECT_EQ(p->fork, -1);
  EXPECT_EQ(cache->seq_len(fork), 0);  // the id and its claims are gone
  EXPECT_TRUE(cache->save_point(s).ok());  // the id is free again
}

TEST(SequenceCache, RefusalsWriteNothingAndLaterOutputsEqualAFreshRun) {
  auto run = [](bool with_refusals) {
    auto cache = make(kSequenceKind, config(8, DType::kBF16, 0, 3));
    CacheDriver drv(*cache, kQHeads, 77);
    std::vector<std::vector<float>> all;
    for (int s = 0; s < 4; ++s) {
      if (with_refusals) {
        std::vector<float> q(4 * 16), k(2 * 16), v(2 * 8), out(4 * 8), bad(5);
        std::vector<int64_t> p = {cache->pos(0)};
        if (s == 0) {  // nothing declared yet
          EXPECT_EQ(cache->update_and_attend({0, 1, 4, p, q, k, v, 1, 0, out}).code(),
                    StatusCode::kFailedPrecondition);
        }
        EXPECT_EQ(cache->declare_step(std::vector<int32_t>{0, 0, 0, 0}).code(),
                  StatusCode::kInvalidArgument);  // wider than max_write = 3
        EXPECT_EQ(cache->declare_step(std::vector<int32_t>{1}).code(), StatusCode::kNotFound);
        EXPECT_TRUE(cache->declare_step(std::vector<int32_t>{0}).ok());
        EXPECT_EQ(cache->update_and_attend({0, 1, 4, p, q, bad, v, 1, 0, out}).code(),
                  StatusCode::kInvalidArgument);  // k too short
        EXPECT_EQ(cache->update_and_attend({0, 1, 3, p, q, k, v, 1, 0, out}).code(),
                  StatusCode::kInvalidArgument);  // 3 q heads over 2 kv heads
        EXPECT_EQ(cache->update_and_attend({2, 1, 4, p, q, k, v, 1, 0, out}).code(),
                  StatusCode::kInvalidArgument);  // no layer 2
        std::vector<int64_t> wrong = {p[0] + 1};
        EXPECT_EQ(cache->update_and_attend({0, 1, 4, wrong, q, k, v, 1, 0, out}).code(),
                  StatusCode::kInvalidArgument);
        EXPECT_EQ(cache->attend({0, 1, 4, p, q, {}, {}, 1, 0, out}).code(),
                  StatusCode::kFailedPrecondition);  // attend only before the layer is placed
        EXPECT_EQ(cache->pos(0), 2 * s);
      }
      for (auto& o : drv.step({0, 0})) all.push_back(o);
    }
    if (with_refusals) {  // 8 cells used: one more token does not fit
      EXPECT_EQ(cache->declare_step(std::vector<int32_t>{0}).code(),
                StatusCode::kResourceExhausted);
    }
    return all;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(CellCache, ForksAttendOverSharedCellsAndSharedPositionsNeverMix) {
  for (DType dt : {DType::kF32, DType::kF16})
    for (int threads : {1, 3}) {
      ThreadPool tp(threads);
      CpuCacheOptions o;
      o.pool = &tp;
      auto cache = make(kCellKind, config(64, dt, 1, std::nullopt), o);
      CacheDriver drv(*cache, kQHeads, 21);
      auto a = cache->seq_new(), b = cache->seq_new();
      ASSERT_TRUE(a.ok() && b.ok());
      drv.on_new(*a);
      drv.on_new(*b);
      // a and b both hold positions 0..3 with different K/V in one step.
      drv.step({*a, *b, *a, *b, *a, *b, *a, *b});
      auto c = cache->seq_clone(*a, 3);  // fork: a's cells at positions 0..2
      ASSERT_TRUE(c.ok());
      drv.on_clone(*a, *c, 3);
      EXPECT_EQ(cache->free_cells(), 64 - 8);  // nothing copied
      drv.step({*c, *a, *b, *c});
      drv.step({*a});
      EXPECT_EQ(cache->pos(*c), 5);
      EXPECT_EQ(cache->pos(*a), 6);
    }
}

TEST(CellCache, RefilledHolesAttendCorrectly) {
  // Window 8 keeps every position here, so s[1] can rewind from 5 to 3.
  auto cache = make(kCellKind, config(24, DType::kBF16, 0, std::nullopt), {}, two_layers(8));
  CacheDriver drv(*cache, kQHeads, 8);
  int32_t s[3];
  for (int32_t& id : s) {
    id = *cache->seq_new();
    drv.on_new(id);
  }
  drv.step({s[0], s[0], s[1], s[0], s[1], s[0]});
  drv.step({s[1], s[0], s[1], s[1]});
  ASSERT_TRUE(cache->seq_rm(s[0]).ok());  // holes at s[0]'s cells
  drv.on_rm(s[0]);
  ASSERT_TRUE(cache->rewind(s[1], 3).ok());
  drv.on_rewind(s[1], 3);
  // s[2] refills the holes lowest-first; its cells are out of position order with s[1]'s.
  drv.step({s[2], s[2], s[1], s[2], s[2], s[1], s[2], s[2]});
  drv.step({s[2], s[1]});
  EXPECT_EQ(cache->used_end(), 13);
}

TEST(CellCache, OptimizedMatchesReferenceKernelOnRandomWorkload) {
  std::mt19937 rng(4242);
  for (int threads : {1, 2, 4}) {
    ThreadPool tp(threads);
    CpuCacheOptions fast, ref;
    fast.pool = &tp;
    ref.reference_kernel = true;
    const CacheGeometry g = two_layers(7);
    auto c1 = make(kCellKind, config(200, DType::kF16, 4, std::nullopt), fast, g);
    auto c2 = make(kCellKind, config(200, DType::kF16, 4, std::nullopt), ref, g);
    CacheDriver d1(*c1, kQHeads, 1), d2(*c2, kQHeads, 1);
    std::vector<int32_t> live, last_ids;  // last_ids: the previous step's sequences
    for (int s = 0; s < 25; ++s) {
      const int verb = static_cast<int>(rng() % 4);
      if (verb == 0 || live.empty()) {
        const int32_t id = *c1->seq_new();
        ASSERT_EQ(*c2->seq_new(), id);
        d1.on_new(id), d2.on_new(id), live.push_back(id);
        last_ids.clear();  // a verb (but seq_clone) ends the open step
      } else if (verb == 1 && live.size() > 1) {
        const int32_t id = live[rng() % live.size()];
        ASSERT_TRUE(c1->seq_rm(id).ok() && c2->seq_rm(id).ok());
        d1.on_rm(id), d2.on_rm(id);
        live.erase(std::find(live.begin(), live.end(), id));
        last_ids.clear();
        continue;
      } else if (verb == 2) {
        // Half way back (often refused: the sliding pool freed that window) or at the end.
        const int32_t src = live[rng() % live.size()];
        const int64_t upto = rng() % 2 ? c1->pos(src) / 2 : c1->pos(src);
        auto r1 = c1->seq_clone(src, upto), r2 = c2->seq_clone(src, upto);
        ASSERT_EQ(r1.status().code(), r2.status().code());
        if (r1.ok()) {
          ASSERT_TRUE(upto == 0 || std::max<int64_t>(0, upto - 6) >= c1->pos(src) - 6);
          ASSERT_EQ(*r2, *r1);
          d1.on_clone(src, *r1, upto), d2.on_clone(src, *r1, upto), live.push_back(*r1);
        } else {
          // Exactly when position upto - 7 + 1 > 0 lies before src's last 6 positions.
          ASSERT_EQ(r1.status().code(), StatusCode::kOutOfRange);
          ASSERT_LT(std::max<int64_t>(0, upto - 6), c1->pos(src) - 6);
        }
      } else if (verb == 3) {
        const int32_t id = live[rng() % live.size()];
        const int64_t next = c1->pos(id);
        const int64_t to = rng() % 3 == 0 ? 0 : std::max<int64_t>(0, next - 1);
        Status s1 = c1->rewind(id, to), s2 = c2->rewind(id, to);
        ASSERT_EQ(s1.code(), s2.code());
        // To 0 always works; to next - 1 needs positions next - 7 .. next - 2, held while
        // next - 6 <= 0 (the sliding(7) pool keeps the last 6 positions), or while the step
        // that wrote next - 1 is still open (its start's window is still held).
        const bool in_last_step = std::count(last_ids.begin(), last_ids.end(), id) > 0;
        ASSERT_EQ(s1.ok(), to == 0 || next <= 6 || in_last_step) << s1.to_string();
        if (s1.ok()) d1.on_rewind(id, to), d2.on_rewind(id, to);
      }
      std::vector<int32_t> ids;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 5); i < n; ++i)
        ids.push_back(live[rng() % live.size()]);
      // Both drivers check against the brute force; here optimized vs reference kernel.
      auto o1 = d1.step(ids, 3.0f), o2 = d2.step(ids, 3.0f);
      last_ids = ids;
      ASSERT_EQ(o1.size(), o2.size());
      for (size_t l = 0; l < o1.size(); ++l)
        for (size_t i = 0; i < o1[l].size(); ++i)
          ASSERT_NEAR(o1[l][i], o2[l][i], 1e-5) << "step " << s << " layer " << l;
    }
  }
}

TEST(CellCache, SlidingPoolsAreCompactAndAttendOnlyTheirCells) {
  // Sliding(5) pool for 2 sequences and steps of max_write 2: 2 * (5 - 1) + 2 = 10 cells;
  // the full pool 64. Bytes at the maximum: 64 * 2 * (16 + 8) * 4 + 10 * 1 * (12 + 20) * 4.
  CacheConfig c = config(64, DType::kF32, 0, 2);
  c.max_seqs = 2;
  auto cache = make(kCellKind, c);
  CacheDriver drv(*cache, kQHeads, 13);
  const int32_t a = *cache->seq_new(), b = *cache->seq_new();
  drv.on_new(a);
  drv.on_new(b);
  for (int i = 0; i < 20; ++i) drv.step(i % 2 ? std::vector<int32_t>{a, b} : std::vector<int32_t>{a});
  EXPECT_EQ(cache->pos(a), 20);
  EXPECT_EQ(cache->pos(b), 10);
  EXPECT_EQ(cache->max_seqs(), 2);
  // The full pool grew by doubling from what a step needed (1, 3, 6, ..., 48 rows) for 30
  // cells; the sliding pool stopped at its 10.
  EXPECT_EQ(cache->allocated_bytes(), 48 * 2 * 24 * 4 + 10 * 32 * 4);
  // A third sequence id is refused. The full pool has 64 - 30 = 34 free cells, the sliding
  // pool none now (a and b hold 4 + 1 each) but 2 once the step ends: a step may add 2.
  EXPECT_EQ(cache->seq_new().status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->free_cells(), 2);
  EXPECT_EQ(cache->declare_step(std::vector<int32_t>{a, b, a}).code(),
            StatusCode::kResourceExhausted);
  drv.step({a, b});
}

TEST(CellCache, PlacementRefusalsClaimNothing) {
  auto cache = make(kCellKind, config(4, DType::kF32, 0, std::nullopt));
  const int32_t a = *cache->seq_new();
  EXPECT_EQ(cache->declare_step(std::vector<int32_t>{a, a, a, a, a}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->declare_step(std::vector<int32_t>{a + 1}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(cache->declare_step(std::vector<int32_t>{a, a}).ok());
  std::vector<float> q(2 * 4 * 16), k(2 * 2 * 16), v(2 * 2 * 8), out(2 * 4 * 8);
  std::vector<int64_t> wrong = {1, 2};
  EXPECT_EQ(cache->update_and_attend({0, 2, 4, wrong, q, k, v, 1, 0, out}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->free_cells(), 4);
  EXPECT_EQ(cache->used_end(), 0);
  std::vector<int64_t> pos = {0, 1};
  ASSERT_TRUE(cache->update_and_attend({0, 2, 4, pos, q, k, v, 1, 0, out}).ok());
  EXPECT_EQ(cache->update_and_attend({0, 2, 4, pos, q, k, v, 1, 0, out}).code(),
            StatusCode::kFailedPrecondition);  // layer 0 already placed
  EXPECT_EQ(cache->free_cells(), 2);
  EXPECT_EQ(cache->seq_len(a), 2);
}

TEST(CpuCache, GrowthKeepsCellIndicesAndBytes) {
  CacheGeometry g{{LayerGeometry{1, 4, 4, 0}}};
  auto cache = make(kCellKind, config(1000, DType::kF32, 1, std::nullopt), {}, g);
  CacheDriver drv(*cache, {1}, 2);
  const int32_t a = *cache->seq_new();
  drv.on_new(a);
  drv.step({a});
  EXPECT_EQ(cache->allocated_bytes(), 1 * 1 * 8 * 4);  // one cell: (4 + 4) floats
  for (int i = 0; i < 9; ++i) drv.step({a, a, a});   // grows 1 -> 2 -> 4 -> 8 -> 16 -> 32
  EXPECT_EQ(cache->allocated_bytes(), 32 * 8 * 4);
  EXPECT_EQ(cache->used_end(), 28);
}

TEST(CpuCache, RegisterBuildersIsIdempotentAndBuildsBothKinds) {
  CacheFactory f;
  ASSERT_TRUE(register_builders(f).ok());
  ASSERT_TRUE(register_builders(f).ok());
  EXPECT_EQ(f.describe(), "cpu/cell, cpu/sequence");
  auto seq = f.build(kCpuBackend, kSequenceKind, two_layers(), config(8, DType::kF16, 0, 2));
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ((*seq)->kind(), kSequenceKind);
  EXPECT_EQ((*seq)->seq_new().status().code(), StatusCode::kUnimplemented);
  auto cell = f.build(kCpuBackend, kCellKind, two_layers(), config(8, DType::kF16, 0, 2));
  ASSERT_TRUE(cell.ok());
  EXPECT_EQ((*cell)->kind(), kCellKind);
  EXPECT_EQ(make_cpu_cache("paged", two_layers(), config(8, DType::kF16, 0, 2)).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(make_cpu_cache(kCellKind, two_layers(), config(0, DType::kF16, 0, 2)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcache::cpu
