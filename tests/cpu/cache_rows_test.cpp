// read_rows / write_rows of both cpu layouts: rows copied out of one cache and written into a
// fresh one (either layout, every dtype) continue exactly as the original (later steps are
// checked against the brute force), the held ranges of full and sliding layers, chunked
// appends, and refusals that change nothing.
#include <gtest/gtest.h>

#include "cache_driver.h"
#include "cpu/cpu_cache.h"

namespace kvcache::cpu {
namespace {

using testing::CacheDriver;

// Layer 0: full, 2 kv heads, dims 16/8. Layer 1: sliding(5), 1 kv head, dims 12/20.
CacheGeometry two_layers() {
  return CacheGeometry{{LayerGeometry{2, 16, 8, 0}, LayerGeometry{1, 12, 20, 5}}};
}
const std::vector<int32_t> kQHeads = {4, 3};
constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// Capacity 64, max_write 2: the sequence layout's ring has 5 + 2 - 1 = 6 slots and steps of
// at most 2; the cell layout (2 sequences) a sliding pool of 2 * (5 - 1) + 2 = 10 cells.
std::shared_ptr<Cache> make(std::string_view kind, DType dt, int64_t capacity = 64) {
  CacheConfig c;
  c.capacity = capacity;
  c.kv_dtype = dt;
  c.max_write = 2;
  c.max_seqs = 2;
  auto r = make_cpu_cache(kind, two_layers(), c);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : nullptr;
}

// The cache's sequence to use: 0 in the sequence layout, a new id in the cell layout.
int32_t new_seq(Cache& cache) { return *cache.open_seq(); }

// Bytes of one row of each layer: layer 0 K 2 x 16, V 2 x 8; layer 1 K 12, V 20 (elements).
int64_t k_row(int32_t layer, DType dt) { return (layer == 0 ? 32 : 12) * dtype_size(dt); }
int64_t v_row(int32_t layer, DType dt) { return (layer == 0 ? 16 : 20) * dtype_size(dt); }

// Runs steps of 2 tokens (the widest step) until seq reaches `len`.
void fill(CacheDriver& drv, Cache& cache, int32_t seq, int64_t len) {
  while (cache.pos(seq) < len)
    drv.step(std::vector<int32_t>(std::min<int64_t>(2, len - cache.pos(seq)), seq));
}

// The rows of `r` for positions [first, first + n) (a sub-range of what it holds).
LayerRows slice(const LayerRows& r, int64_t first, int64_t n) {
  LayerRows s{r.layer, first, n, {}, {}};
  const size_t kb = r.k.size() / r.n, vb = r.v.size() / r.n, at = first - r.first;
  s.k.assign(r.k.begin() + at * kb, r.k.begin() + (at + n) * kb);
  s.v.assign(r.v.begin() + at * vb, r.v.begin() + (at + n) * vb);
  return s;
}

TEST(CacheRows, HeldRangesOfFullAndSlidingLayers) {
  for (DType dt : kDtypes)
    for (std::string_view kind : {kSequenceKind, kCellKind}) {
      auto cache = make(kind, dt);
      CacheDriver drv(*cache, kQHeads, 3);
      const int32_t s = new_seq(*cache);
      drv.on_new(s);
      fill(drv, *cache, s, 13);
      Result<std::vector<LayerRows>> rows = cache->read_rows(s, 2, 13);
      ASSERT_TRUE(rows.ok()) << rows.status().to_string();
      ASSERT_EQ(rows->size(), 2u);
      const LayerRows& full = (*rows)[0];
      const LayerRows& ring = (*rows)[1];
      EXPECT_EQ(full.layer, 0);
      EXPECT_EQ(full.first, 2);
      EXPECT_EQ(full.n, 11);
      EXPECT_EQ(static_cast<int64_t>(full.k.size()), 11 * k_row(0, dt));
      EXPECT_EQ(static_cast<int64_t>(full.v.size()), 11 * v_row(0, dt));
      // The ring's 6 slots hold positions 7..12; the cell layout's sliding pool keeps the
      // last W - 1 = 4, positions 9..12.
      EXPECT_EQ(ring.layer, 1);
      EXPECT_EQ(ring.first, kind == kSequenceKind ? 7 : 9);
      EXPECT_EQ(ring.n, kind == kSequenceKind ? 6 : 4);
      EXPECT_EQ(static_cast<int64_t>(ring.v.size()), ring.n * v_row(1, dt));
      // A range the ring no longer holds: n = 0 at first = to.
      Result<std::vector<LayerRows>> old = cache->read_rows(s, 1, 4);
      ASSERT_TRUE(old.ok());
      EXPECT_EQ((*old)[0].n, 3);
      EXPECT_EQ((*old)[1].n, 0);
      EXPECT_EQ((*old)[1].first, 4);
      EXPECT_TRUE((*old)[1].k.empty());
    }
}

TEST(CacheRows, RowsWrittenIntoAFreshCacheContinueAsTheOriginalInEitherLayout) {
  for (DType dt : kDtypes)
    for (std::string_view from_kind : {kSequenceKind, kCellKind})
      for (std::string_view to_kind : {kSequenceKind, kCellKind}) {
        SCOPED_TRACE(std::string(from_kind) + " -> " + std::string(to_kind) + " " +
                     std::string(to_string(dt)));
        auto src = make(from_kind, dt);
        CacheDriver a(*src, kQHeads, 21);
        const int32_t s = new_seq(*src);
        a.on_new(s);
        fill(a, *src, s, 13);
        Result<std::vector<LayerRows>> rows = src->read_rows(s, 0, 13);
        ASSERT_TRUE(rows.ok());

        auto dst = make(to_kind, dt);
        CacheDriver b(*dst, kQHeads, 99);
        const int32_t d = new_seq(*dst);
        // 13 positions: 7 steps of at most 2 in the sequence layout.
        Status st = dst->write_rows(d, 0, 13, *rows);
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(dst->pos(d), 13);
        b.on_import(d, a, s);
        // What dst holds is byte for byte what src held of it.
        Result<std::vector<LayerRows>> back = dst->read_rows(d, 0, 13);
        ASSERT_TRUE(back.ok());
        EXPECT_EQ((*back)[0].k, (*rows)[0].k);
        EXPECT_EQ((*back)[0].v, (*rows)[0].v);
        const LayerRows& got = (*back)[1];
        ASSERT_GE(got.n, 4);  // at least the last W - 1 positions
        const LayerRows want = slice((*rows)[1], got.first, got.n);
        EXPECT_EQ(got.k, want.k);
        EXPECT_EQ(got.v, want.v);
        // Later steps read the written rows (every query of layer 1 looks back 4 positions):
        // the driver checks each output against the brute force over the original's K/V.
        b.step({d, d});
        b.step({d});
        EXPECT_EQ(dst->pos(d), 16);
      }
}

TEST(CacheRows, AppendsContinueASequenceAndOnlyTheSlidingSuffixIsNeeded) {
  for (DType dt : kDtypes)
    for (std::string_view kind : {kSequenceKind, kCellKind}) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(to_string(dt)));
      auto src = make(kind, dt);
      CacheDriver a(*src, kQHeads, 5);
      const int32_t s = new_seq(*src);
      a.on_new(s);
      fill(a, *src, s, 30);
      Result<std::vector<LayerRows>> rows = src->read_rows(s, 0, 30);
      ASSERT_TRUE(rows.ok());

      auto dst = make(kind, dt);
      CacheDriver b(*dst, kQHeads, 7);
      const int32_t d = new_seq(*dst);
      // All 30 positions of the full layer, and of the sliding layer only what it keeps:
      // positions 26..29 (30 - (5 - 1) = 26). The sequence layout takes 15 steps of 2; the
      // cell layout's sliding pool (10 cells) takes the 30 positions in chunks.
      std::vector<LayerRows> suffix = {(*rows)[0], slice((*rows)[1], 26, 4)};
      Status st = dst->write_rows(d, 0, 30, suffix);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(dst->pos(d), 30);
      if (kind == kSequenceKind) {  // the ring is known to hold 26..29 only: no rewind below 30
        EXPECT_EQ(dst->rewind(d, 29).code(), StatusCode::kOutOfRange);
      }
      // Continue the existing sequence with 3 more positions the source computed.
      fill(a, *src, s, 33);
      Result<std::vector<LayerRows>> more = src->read_rows(s, 30, 33);
      ASSERT_TRUE(more.ok());
      EXPECT_EQ((*more)[1].first, 30);
      st = dst->write_rows(d, 30, 33, *more);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(dst->pos(d), 33);
      b.on_import(d, a, s);
      b.step({d, d});
      b.step({d});
      EXPECT_EQ(dst->pos(d), 36);
    }
}

// What a refusal must leave as it was.
struct Snapshot {
  int64_t pos = 0, free_cells = 0, used_end = 0;
  std::vector<LayerRows> rows;
  static Snapshot of(const Cache& c, int32_t seq) {
    return {c.pos(seq), c.free_cells(), c.used_end(), *c.read_rows(seq, 0, c.pos(seq))};
  }
  void expect_same(const Cache& c, int32_t seq) const {
    EXPECT_EQ(c.pos(seq), pos);
    EXPECT_EQ(c.free_cells(), free_cells);
    EXPECT_EQ(c.used_end(), used_end);
    Result<std::vector<LayerRows>> now = c.read_rows(seq, 0, c.pos(seq));
    ASSERT_TRUE(now.ok());
    ASSERT_EQ(now->size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ((*now)[i].first, rows[i].first);
      EXPECT_EQ((*now)[i].k, rows[i].k);
      EXPECT_EQ((*now)[i].v, rows[i].v);
    }
  }
};

void expect_refused(Cache& c, int32_t seq, int64_t from, int64_t to,
                    const std::vector<LayerRows>& rows, StatusCode code, const std::string& text) {
  Status st = c.write_rows(seq, from, to, rows);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
}

TEST(CacheRows, RefusalsNameTheProblemAndChangeNothing) {
  for (DType dt : kDtypes)
    for (std::string_view kind : {kSequenceKind, kCellKind}) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(to_string(dt)));
      auto src = make(kind, dt);
      CacheDriver a(*src, kQHeads, 8);
      const int32_t s = new_seq(*src);
      a.on_new(s);
      fill(a, *src, s, 13);
      auto dst = make(kind, dt, 20);
      CacheDriver b(*dst, kQHeads, 9);
      const int32_t d = new_seq(*dst);
      ASSERT_TRUE(dst->write_rows(d, 0, 13, *src->read_rows(s, 0, 13)).ok());
      fill(a, *src, s, 16);
      const std::vector<LayerRows> next = *src->read_rows(s, 13, 16);
      ASSERT_TRUE(dst->declare_step(std::vector<int32_t>{d}).ok());  // a standing declaration
      const Snapshot before = Snapshot::of(*dst, d);

      expect_refused(*dst, d + 1, 13, 16, next, StatusCode::kNotFound, "sequence 1");
      expect_refused(*dst, d, 12, 16, next, StatusCode::kInvalidArgument,
                     "expected its next position 13");
      expect_refused(*dst, d, 13, 12, next, StatusCode::kInvalidArgument, "expected to >= from");
      expect_refused(*dst, d, 13, 16, {next[1]}, StatusCode::kInvalidArgument,
                     "layer 0 (full): no rows given, needs positions [13, 16)");
      expect_refused(*dst, d, 13, 16, {next[0], slice(next[1], 14, 2)},
                     StatusCode::kInvalidArgument,
                     "layer 1 (sliding 5): rows for positions [14, 16), needs [13, 16)");
      std::vector<LayerRows> bad = next;
      bad[0].k.pop_back();
      expect_refused(*dst, d, 13, 16, bad, StatusCode::kInvalidArgument, "layer 0 (full): k has");
      bad = next;
      bad[1].v.push_back(0);
      expect_refused(*dst, d, 13, 16, bad, StatusCode::kInvalidArgument,
                     "layer 1 (sliding 5): v has");
      expect_refused(*dst, d, 13, 16, {next[0], next[0], next[1]}, StatusCode::kInvalidArgument,
                     "two sets of rows for layer 0");
      bad = next;
      bad[1].layer = 7;
      expect_refused(*dst, d, 13, 16, bad, StatusCode::kInvalidArgument,
                     "rows for layer 7, expected 0..1");
      // 13 + 9 > capacity 20: the sequence layout's length, the cell layout's full pool.
      auto big = next;
      big[0] = LayerRows{0, 13, 9, std::vector<uint8_t>(9 * k_row(0, dt)),
                         std::vector<uint8_t>(9 * v_row(0, dt))};
      big[1] = LayerRows{1, 18, 4, std::vector<uint8_t>(4 * k_row(1, dt)),
                         std::vector<uint8_t>(4 * v_row(1, dt))};
      expect_refused(*dst, d, 13, 22, big, StatusCode::kResourceExhausted,
                     kind == kSequenceKind ? "exceed capacity 20"
                                           : "the full pool has only 7 of 20 cells free");
      before.expect_same(*dst, d);
      Result<std::vector<LayerRows>> r = dst->read_rows(d, 5, 4);
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(dst->read_rows(d, 0, 14).status().code(), StatusCode::kOutOfRange);
      EXPECT_EQ(dst->read_rows(d + 1, 0, 0).status().code(), StatusCode::kNotFound);

      ASSERT_TRUE(dst->write_rows(d, 13, 16, next).ok());
      b.on_import(d, a, s);
      b.step({d, d});
      EXPECT_EQ(dst->pos(d), 18);
    }
}

TEST(CacheRows, CellSlidingPoolWithoutRoomRefusesAndAFittingAppendSucceeds) {
  // Two sequences at 8 positions hold 4 cells each of the 10-cell sliding pool: 2 are free.
  // An append of 3 needs 3 at once (more than 2, and 2 < W = 5 rules out chunks); 2 fit.
  auto src = make(kCellKind, DType::kF16);
  CacheDriver a(*src, kQHeads, 4);
  const int32_t s = new_seq(*src);
  a.on_new(s);
  fill(a, *src, s, 8);
  const std::vector<LayerRows> first8 = *src->read_rows(s, 0, 8);
  fill(a, *src, s, 11);
  auto dst = make(kCellKind, DType::kF16);
  const int32_t d = new_seq(*dst), e = new_seq(*dst);
  ASSERT_TRUE(dst->write_rows(d, 0, 8, first8).ok());
  ASSERT_TRUE(dst->write_rows(e, 0, 8, first8).ok());
  const Snapshot before = Snapshot::of(*dst, e);
  expect_refused(*dst, e, 8, 11, *src->read_rows(s, 8, 11), StatusCode::kResourceExhausted,
                 "sliding(5) pool has only 2 of 10 cells free");
  before.expect_same(*dst, e);
  std::vector<LayerRows> two = *src->read_rows(s, 8, 10);
  ASSERT_TRUE(dst->write_rows(e, 8, 10, two).ok());
  EXPECT_EQ(dst->pos(e), 10);
  EXPECT_EQ(dst->pos(d), 8);
}

}  // namespace
}  // namespace kvcache::cpu
