// Cell layout scenarios: causal prefixes, isolation between sequences, mixed steps, forks and
// ownership, windows, the step protocol and its refusals (SPEC §4).
#include "core/cell_layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <vector>

namespace kvcache {
namespace {

using Cells = std::vector<int32_t>;

LayerGeometry full() { return {1, 4, 4, 0}; }
LayerGeometry sliding(int32_t w) { return {1, 4, 4, w}; }

CellLayout make(std::vector<LayerGeometry> layers, int64_t capacity,
                int32_t max_seqs = kDefaultMaxSeqs) {
  CacheConfig c;
  c.capacity = capacity;
  auto r = CellLayout::create(CacheGeometry{std::move(layers)}, c, max_seqs);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

Cells vec(std::span<const int32_t> s) { return Cells(s.begin(), s.end()); }

Cells visible(const CellLayout& c, int32_t layer, int32_t token) {
  auto r = c.visible(layer, token);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? vec(*r) : Cells{};
}

// Declares and places one step on every layer; returns the placed cells.
Cells step(CellLayout& c, const std::vector<int32_t>& ids, const std::vector<int64_t>& pos) {
  Status d = c.declare_step(ids);
  EXPECT_TRUE(d.ok()) << d.to_string();
  Cells cells;
  for (int32_t l = 0; l < c.n_layers(); ++l) {
    auto r = c.place(l, pos);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) cells = vec(*r);
  }
  return cells;
}

// A prefill of n tokens of seq starting at its current position.
Cells prefill(CellLayout& c, int32_t seq, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n), seq);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), c.pos(seq));
  return step(c, ids, pos);
}

int32_t new_seq(CellLayout& c) {
  auto r = c.seq_new();
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : -1;
}

TEST(CellLayout, CreateRefusesBadConfigAndMaxSeqs) {
  CacheConfig c;
  c.capacity = 0;
  auto r = CellLayout::create(CacheGeometry{{full()}}, c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("capacity = 0"), std::string::npos);
  c.capacity = 8;
  auto m = CellLayout::create(CacheGeometry{{full()}}, c, 0);
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("max_seqs = 0"), std::string::npos);
}

TEST(CellLayout, OneSequenceSeesItsCausalPrefix) {
  CellLayout c = make({full()}, 16);
  const int32_t s = new_seq(c);
  EXPECT_EQ(s, 0);
  Cells placed = prefill(c, s, 4);
  EXPECT_EQ(placed, (Cells{0, 1, 2, 3}));
  EXPECT_EQ(visible(c, 0, 0), (Cells{0}));
  EXPECT_EQ(visible(c, 0, 2), (Cells{0, 1, 2}));
  EXPECT_EQ(visible(c, 0, 3), (Cells{0, 1, 2, 3}));
  EXPECT_EQ(c.pos(s), 4);
  EXPECT_EQ(c.seq_len(s), 4);
  EXPECT_EQ(c.free_cells(), 12);
  EXPECT_EQ(c.used_end(), 4);
  EXPECT_EQ(c.cell_pos(2), 2);
  EXPECT_EQ(c.cell_owners(2), 1);
  EXPECT_EQ(c.cell_pos(5), -1);
}

TEST(CellLayout, TwoSequencesAtTheSamePositionsNeverSeeEachOther) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c), b = new_seq(c);
  prefill(c, a, 3);  // cells 0,1,2
  prefill(c, b, 3);  // cells 3,4,5
  Cells placed = step(c, {a, b}, {3, 3});
  EXPECT_EQ(placed, (Cells{6, 7}));
  EXPECT_EQ(visible(c, 0, 0), (Cells{0, 1, 2, 6}));
  EXPECT_EQ(visible(c, 0, 1), (Cells{3, 4, 5, 7}));
}

TEST(CellLayout, TwoPrefillsInOneStep) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c), b = new_seq(c);
  Cells placed = step(c, {a, a, b, b, b}, {0, 1, 0, 1, 2});
  EXPECT_EQ(placed, (Cells{0, 1, 2, 3, 4}));
  EXPECT_EQ(visible(c, 0, 1), (Cells{0, 1}));
  EXPECT_EQ(visible(c, 0, 2), (Cells{2}));
  EXPECT_EQ(visible(c, 0, 4), (Cells{2, 3, 4}));
  EXPECT_EQ(c.pos(a), 2);
  EXPECT_EQ(c.pos(b), 3);
}

TEST(CellLayout, DecodeAndPrefillShareOneStep) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c), b = new_seq(c);
  prefill(c, a, 2);  // cells 0,1
  Cells placed = step(c, {b, a, b}, {0, 2, 1});
  EXPECT_EQ(placed, (Cells{2, 3, 4}));
  EXPECT_EQ(visible(c, 0, 0), (Cells{2}));
  EXPECT_EQ(visible(c, 0, 1), (Cells{0, 1, 3}));
  EXPECT_EQ(visible(c, 0, 2), (Cells{2, 4}));
}

TEST(CellLayout, PlacementIsDoneOnceAndSharedByEveryLayer) {
  CellLayout c = make({full(), sliding(2), full()}, 16);
  const int32_t a = new_seq(c);
  const std::vector<int32_t> ids{a, a, a};
  const std::vector<int64_t> pos{0, 1, 2};
  ASSERT_TRUE(c.declare_step(ids).ok());
  EXPECT_TRUE(c.step_cells().empty());
  auto first = c.place(1, pos);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(vec(*first), (Cells{0, 1, 2}));
  EXPECT_EQ(c.free_cells(), 13);
  for (int32_t l : {0, 2}) {
    auto r = c.place(l, pos);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(vec(*r), (Cells{0, 1, 2}));
  }
  EXPECT_EQ(c.free_cells(), 13);  // later layers claim nothing
  EXPECT_EQ(c.pos(a), 3);
  EXPECT_TRUE(c.placed(0) && c.placed(1) && c.placed(2));
}

TEST(CellLayout, ForkSharesCellsAndACellFreesWithItsLastOwner) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 3);
  auto f = c.seq_clone(a, std::nullopt);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, 1);
  EXPECT_EQ(vec(c.seq_cells(*f)), (Cells{0, 1, 2}));
  EXPECT_EQ(c.cell_owners(0), 2);
  EXPECT_EQ(c.free_cells(), 13);  // nothing copied
  // The fork is a snapshot: later tokens of a are not its own.
  step(c, {a, *f}, {3, 3});
  EXPECT_EQ(visible(c, 0, 0), (Cells{0, 1, 2, 3}));
  EXPECT_EQ(visible(c, 0, 1), (Cells{0, 1, 2, 4}));
  ASSERT_TRUE(c.seq_rm(a).ok());
  EXPECT_EQ(c.cell_owners(0), 1);
  EXPECT_EQ(c.cell_pos(3), -1);  // a's own token freed
  EXPECT_EQ(c.free_cells(), 12);
  EXPECT_EQ(c.used_end(), 5);
  ASSERT_TRUE(c.seq_rm(*f).ok());
  EXPECT_EQ(c.free_cells(), 16);
  EXPECT_EQ(c.used_end(), 0);
}

TEST(CellLayout, PrefixForkAndRemovingTheSourcesSharedRangeFreesNothing) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 5);
  auto f = c.seq_clone(a, 3);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(c.pos(*f), 3);
  EXPECT_EQ(vec(c.seq_cells(*f)), (Cells{0, 1, 2}));
  EXPECT_EQ(c.cell_owners(3), 1);
  // Rewinding a to 0 drops positions 0..4: 3 and 4 free, 0..2 stay with the fork.
  ASSERT_TRUE(c.rewind(a, 3).ok());
  EXPECT_EQ(c.free_cells(), 13);
  ASSERT_TRUE(c.rewind(a, 0).ok());
  EXPECT_EQ(c.free_cells(), 13);  // the shared range still has an owner
  EXPECT_EQ(c.cell_owners(1), 1);
  EXPECT_TRUE(c.live(a));
  EXPECT_EQ(c.pos(a), 0);
  // upto beyond the source length takes all; upto 0 takes nothing.
  auto g = c.seq_clone(*f, 100);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(c.pos(*g), 3);
  auto h = c.seq_clone(*f, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(c.pos(*h), 0);
  EXPECT_EQ(c.seq_clone(*f, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.seq_clone(99, std::nullopt).status().code(), StatusCode::kNotFound);
}

TEST(CellLayout, IdsStayReservedUntilReleased) {
  CellLayout c = make({full()}, 16, 3);
  EXPECT_EQ(c.max_seqs(), 3);
  EXPECT_EQ(new_seq(c), 0);
  EXPECT_EQ(new_seq(c), 1);
  EXPECT_EQ(new_seq(c), 2);
  auto none = c.seq_new();
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.seq_clone(0, std::nullopt).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c.rewind(1, 0).ok());  // rewinding keeps the id
  EXPECT_EQ(c.seq_new().status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c.seq_rm(1).ok());
  EXPECT_FALSE(c.live(1));
  EXPECT_EQ(new_seq(c), 1);  // lowest free
}

TEST(CellLayout, NeverIssuedIdsAreRefused) {
  CellLayout c = make({full()}, 16);
  new_seq(c);
  for (int32_t id : {-1, 1, 7, 255, 256, 1 << 30}) {
    EXPECT_FALSE(c.live(id));
    EXPECT_EQ(c.pos(id), 0);
    EXPECT_EQ(c.seq_len(id), 0);
    EXPECT_TRUE(c.seq_cells(id).empty());
    EXPECT_EQ(c.seq_rm(id).code(), StatusCode::kNotFound) << id;
    EXPECT_EQ(c.rewind(id, 0).code(), StatusCode::kNotFound) << id;
    EXPECT_EQ(c.seq_clone(id, std::nullopt).status().code(), StatusCode::kNotFound) << id;
    const int32_t ids[] = {0, id};
    Status d = c.declare_step(ids);
    EXPECT_EQ(d.code(), StatusCode::kNotFound) << id;
    EXPECT_NE(d.message().find("token 1 names sequence " + std::to_string(id)),
              std::string::npos) << d.message();
  }
  EXPECT_FALSE(c.step_open());
}

TEST(CellLayout, KeptFromSkipsAnOpenStepsOlderSlidingCells) {
  // Window 3: while a's 5-token prefill is still open the sliding pool holds positions 0..4,
  // but the next query (position 5) sees only 3..5 (5 - 3 + 1 = 3); the full pool keeps all.
  CellLayout c = make({full(), sliding(3)}, 32);
  const int32_t a = new_seq(c);
  prefill(c, a, 5);
  EXPECT_EQ(c.held_first_pos(a, 1), 0);
  EXPECT_EQ(c.kept_from(a, 1), 3);
  EXPECT_EQ(c.kept_from(a, 0), 0);
  EXPECT_EQ(c.kept_from(a + 1, 1), 0);  // not live
  prefill(c, a, 1);  // the first step ended: 3, 4 kept, 5 written; position 6 sees 4..6
  EXPECT_EQ(c.held_first_pos(a, 1), 3);
  EXPECT_EQ(c.kept_from(a, 1), 4);
}

TEST(CellLayout, WindowAndOwnershipNarrowTogether) {
  // Window 3: a query at position p sees positions p-2..p of its own sequence only. Pool 0 is
  // the full pool, pool 1 the sliding(3) pool with its own cell numbering.
  CellLayout c = make({full(), sliding(3)}, 32);
  ASSERT_EQ(c.n_pools(), 2);
  EXPECT_EQ(c.pool_of(1), 1);
  const int32_t a = new_seq(c);
  prefill(c, a, 5);  // full cells 0..4; sliding cells 0..4, of which a keeps 3, 4 after the step
  // While a's step is open the sliding pool still holds 0..4, so a clone up to 4 (a prompt
  // checkpoint inside the chunk) takes positions 2, 3 — and leaves the step open.
  auto early = c.seq_clone(a, 4);
  ASSERT_TRUE(early.ok()) << early.status().to_string();
  EXPECT_TRUE(c.step_open());
  EXPECT_EQ(vec(c.held(*early, 1)), (Cells{2, 3}));
  EXPECT_EQ(c.held_first_pos(*early, 1), 2);
  ASSERT_TRUE(c.seq_rm(*early).ok());  // a verb: the step ends, a keeps 3, 4
  EXPECT_FALSE(c.step_open());
  EXPECT_EQ(c.pool_free(1), 32 - 2);
  // Now a fork up to 4 would need position 2 in the sliding pool, freed when a's step ended.
  auto refused = c.seq_clone(a, 4);
  ASSERT_EQ(refused.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(refused.status().message().find("sliding(3) pool (layers 1) holds its positions 3..4 only, the clone needs 2..3"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(c.pool_free(1), 32 - 2);  // the refusal changed nothing
  auto f = c.seq_clone(a, std::nullopt);  // shares full 0..4 and sliding 3, 4
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(c.pool_free(1), 32 - 2);
  EXPECT_EQ(vec(c.held(*f, 1)), (Cells{3, 4}));
  EXPECT_EQ(c.held_first_pos(*f, 1), 3);
  const int32_t b = new_seq(c);
  prefill(c, b, 2);  // full cells 5, 6; sliding: lowest free 0, 1
  step(c, {*f, a, b}, {5, 5, 2});  // full 7, 8, 9; sliding 2, 5, 6
  EXPECT_EQ(visible(c, 1, 0), (Cells{3, 4, 2}));
  EXPECT_EQ(visible(c, 1, 1), (Cells{3, 4, 5}));
  EXPECT_EQ(visible(c, 1, 2), (Cells{0, 1, 6}));
  EXPECT_EQ(c.visible_first_pos(1, 0), 3);
  EXPECT_EQ(c.visible_first_pos(1, 2), 0);
  EXPECT_EQ(visible(c, 0, 0), (Cells{0, 1, 2, 3, 4, 7}));
  EXPECT_EQ(c.visible_first_pos(0, 0), 0);
  // Sliding cells in use: 0..6 = 7. The step's end drops position 3 from a and f (cell 3's
  // two owners) and position 0 from b (cell 0): 25 free now, 27 after; the full pool has 22.
  EXPECT_EQ(c.pool_free(1), 25);
  EXPECT_EQ(c.cell_owners(1, 3), 2);
  EXPECT_EQ(c.free_cells(), 22);
  // b at 3 goes back to 2 while the step that wrote 2 is open: the pool still holds 0, 1 (the
  // window position 2 needs). The rewind ends the step: b's cell 6 and a/f's cell 3 free.
  ASSERT_TRUE(c.rewind(b, 2).ok());
  EXPECT_FALSE(c.step_open());
  EXPECT_EQ(c.pool_free(1), 27);
  EXPECT_EQ(vec(c.held(b, 1)), (Cells{0, 1}));
  EXPECT_EQ(c.cell_owners(1, 6), 0);
  EXPECT_EQ(c.cell_owners(1, 3), 0);
  EXPECT_EQ(c.cell_owners(1, 4), 2);
  EXPECT_EQ(c.cell_pos(1, 4), 4);
  // Between steps a at 6 keeps 4, 5: back to 5 would need 3, dropped when the step ended.
  const Status gone = c.rewind(a, 5);
  ASSERT_EQ(gone.code(), StatusCode::kOutOfRange);
  EXPECT_NE(gone.message().find("holds its positions 4..5 only, position 5 needs 3..4"),
            std::string::npos)
      << gone.message();
}

TEST(CellLayout, CloneKeepsTheStepOpen) {
  CellLayout c = make({full(), full()}, 16);
  const int32_t a = new_seq(c);
  const std::vector<int32_t> ids{a};
  const std::vector<int64_t> pos{0};
  ASSERT_TRUE(c.declare_step(ids).ok());
  ASSERT_TRUE(c.place(0, pos).ok());
  Result<int32_t> f = c.seq_clone(a, std::nullopt);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(c.step_open());
  EXPECT_TRUE(c.place(1, pos).ok());  // the second layer still places the step's token
  EXPECT_EQ(c.pos(*f), 1);
  EXPECT_EQ(vec(c.held(*f, 1)), vec(c.held(a, 1)));  // the clone shares the step's cell
}

TEST(CellLayout, VerbBetweenTwoLayersRefusesTheRemainingLayers) {
  CellLayout c = make({full(), full()}, 16);
  const int32_t a = new_seq(c);
  const std::vector<int32_t> ids{a};
  const std::vector<int64_t> pos{0};
  ASSERT_TRUE(c.declare_step(ids).ok());
  ASSERT_TRUE(c.place(0, pos).ok());
  new_seq(c);
  EXPECT_FALSE(c.step_open());
  auto r = c.place(1, pos);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.visible(0, 0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.pos(a), 1);  // the first layer's placement stays committed
  // Every verb but seq_clone ends the step (a clone leaves it open: CloneKeepsTheStepOpen).
  auto verbs = std::vector<std::function<void()>>{
      [&] { (void)c.seq_rm(1); },
      [&] { (void)c.rewind(a, 1); }, [&] { c.clear(); }};
  for (auto& verb : verbs) {
    if (!c.live(a)) {
      ASSERT_EQ(new_seq(c), a);
    }
    const std::vector<int64_t> next{c.pos(a)};
    ASSERT_TRUE(c.declare_step(ids).ok());
    ASSERT_TRUE(c.place(0, next).ok());
    verb();
    EXPECT_EQ(c.place(1, next).status().code(), StatusCode::kFailedPrecondition);
  }
}

TEST(CellLayout, RefilledHolesKeepVisibilityKeyedOnPositions) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c), b = new_seq(c);
  prefill(c, a, 3);  // cells 0,1,2
  prefill(c, b, 3);  // cells 3,4,5
  ASSERT_TRUE(c.seq_rm(a).ok());  // frees 0,1,2
  EXPECT_EQ(c.used_end(), 6);
  Cells placed = prefill(c, b, 2);  // positions 3,4 refill cells 0,1
  EXPECT_EQ(placed, (Cells{0, 1}));
  EXPECT_EQ(visible(c, 0, 1), (Cells{3, 4, 5, 0, 1}));  // position order, not cell order
  EXPECT_EQ(c.cell_pos(0), 3);
  EXPECT_EQ(c.used_end(), 6);
}

TEST(CellLayout, PositionAlreadyHeldIsRefusedAndTheDeclarationStands) {
  CellLayout c = make({full(), full()}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 3);
  const std::vector<int32_t> ids{a, a};
  ASSERT_TRUE(c.declare_step(ids).ok());
  const std::vector<int64_t> held{2, 3};
  auto r = c.place(0, held);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token 0 of sequence 0 at position 2, expected 3"),
            std::string::npos) << r.status().message();
  const std::vector<int64_t> gap{3, 5};
  EXPECT_EQ(c.place(0, gap).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.pos(a), 3);
  EXPECT_EQ(c.free_cells(), 13);
  EXPECT_TRUE(c.step_open());
  const std::vector<int64_t> right{3, 4};
  auto ok = c.place(0, right);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(vec(*ok), (Cells{3, 4}));
  // A later layer must pass the same positions.
  const std::vector<int64_t> other{4, 5};
  EXPECT_EQ(c.place(1, other).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.place(1, right).ok());
}

TEST(CellLayout, LayersWithTheSameWindowGetTheSameAnswer) {
  CellLayout c = make({sliding(2), full(), sliding(2)}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 4);
  auto x = c.visible(0, 3);
  auto y = c.visible(2, 3);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->data(), y->data());
  EXPECT_EQ(x->size(), 2u);
  EXPECT_EQ(vec(*x), (Cells{2, 3}));
}

TEST(CellLayout, ProtocolMisuseIsRefused) {
  CellLayout c = make({full(), full()}, 16);
  const int32_t a = new_seq(c);
  const std::vector<int64_t> p0{0};
  EXPECT_EQ(c.place(0, p0).status().code(), StatusCode::kFailedPrecondition);  // no declaration
  EXPECT_EQ(c.declare_step({}).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> ids{a};
  ASSERT_TRUE(c.declare_step(ids).ok());
  const std::vector<int64_t> two{0, 1};
  EXPECT_EQ(c.place(0, two).status().code(), StatusCode::kInvalidArgument);  // count mismatch
  EXPECT_EQ(c.place(2, p0).status().code(), StatusCode::kInvalidArgument);   // out of range
  EXPECT_EQ(c.place(-1, p0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.visible(0, 0).status().code(), StatusCode::kFailedPrecondition);  // not placed
  ASSERT_TRUE(c.place(0, p0).ok());
  EXPECT_EQ(c.place(0, p0).status().code(), StatusCode::kFailedPrecondition);  // twice
  EXPECT_EQ(c.visible(0, 1).status().code(), StatusCode::kInvalidArgument);    // bad token
  EXPECT_EQ(c.visible(5, 0).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.place(1, p0).ok());
  // A second step without declaring.
  const std::vector<int64_t> p1{1};
  EXPECT_EQ(c.place(0, p1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.pos(a), 1);
  EXPECT_EQ(c.free_cells(), 15);
}

TEST(CellLayout, RefusedDeclarationLeavesTheEarlierOneStanding) {
  CellLayout c = make({full()}, 4);
  const int32_t a = new_seq(c);
  const std::vector<int32_t> three{a, a, a};
  ASSERT_TRUE(c.declare_step(three).ok());
  const std::vector<int32_t> five{a, a, a, a, a};
  Status st = c.declare_step(five);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("5 tokens, but only 4 of 4 cells are free"), std::string::npos)
      << st.message();
  const std::vector<int32_t> bad{a, 9};
  EXPECT_EQ(c.declare_step(bad).code(), StatusCode::kNotFound);
  EXPECT_EQ(c.declare_step({}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(vec(c.step_seq_ids()), (Cells{a, a, a}));
  const std::vector<int64_t> pos{0, 1, 2};
  EXPECT_TRUE(c.place(0, pos).ok());
  EXPECT_EQ(c.free_cells(), 1);
}

TEST(CellLayout, ClearFreesEveryCellAndId) {
  CellLayout c = make({full(), sliding(2)}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 5);
  ASSERT_TRUE(c.seq_clone(a, std::nullopt).ok());
  c.clear();
  EXPECT_EQ(c.free_cells(), 16);
  EXPECT_EQ(c.used_end(), 0);
  EXPECT_FALSE(c.live(0));
  EXPECT_FALSE(c.live(1));
  EXPECT_EQ(c.cell_pos(0), -1);
  EXPECT_EQ(c.cell_owners(0), 0);
  EXPECT_FALSE(c.step_open());
  EXPECT_EQ(new_seq(c), 0);
  EXPECT_EQ(prefill(c, 0, 2), (Cells{0, 1}));
}

TEST(CellLayout, SixtyFourConcurrentSequences) {
  CellLayout c = make({full(), sliding(4)}, 64 * 8);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 64; ++i) ids.push_back(new_seq(c));
  EXPECT_EQ(ids.back(), 63);
  for (int t = 0; t < 8; ++t) {
    std::vector<int64_t> pos(64, t);
    step(c, ids, pos);
  }
  EXPECT_EQ(c.free_cells(), 0);
  EXPECT_EQ(c.used_end(), 512);
  // Full pool: step t placed cells 64t .. 64t+63 in token order. Sliding(4) pool: steps 0..3
  // fill 0..255; step t >= 4 starts after position t - 4 is dropped (the last 3 stay), so it
  // refills the 64 cells step t - 4 used.
  for (int32_t i = 0; i < 64; ++i) {
    EXPECT_EQ(c.pos(i), 8);
    EXPECT_EQ(visible(c, 0, i).size(), 8u);
    EXPECT_EQ(visible(c, 1, i), (Cells{i, 64 + i, 128 + i, 192 + i}));
  }
  EXPECT_EQ(c.pool_used_end(1), 256);
  const std::vector<int32_t> one{0};
  EXPECT_EQ(c.declare_step(one).code(), StatusCode::kResourceExhausted);
}

TEST(CellLayout, RewindValidatesTheTarget) {
  CellLayout c = make({full()}, 16);
  const int32_t a = new_seq(c);
  prefill(c, a, 3);
  Status st = c.rewind(a, 4);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("rewind never grows"), std::string::npos);
  EXPECT_EQ(c.rewind(a, -1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c.pos(a), 3);
  ASSERT_TRUE(c.rewind(a, 1).ok());
  EXPECT_EQ(c.pos(a), 1);
  EXPECT_EQ(c.free_cells(), 15);
  EXPECT_EQ(c.used_end(), 1);
}

TEST(CellLayout, RefusedVerbLeavesTheStepStanding) {
  CellLayout c = make({full(), full()}, 8, 1);
  const int32_t a = new_seq(c);
  const std::vector<int32_t> ids{a};
  const std::vector<int64_t> pos{0};
  ASSERT_TRUE(c.declare_step(ids).ok());
  ASSERT_TRUE(c.place(0, pos).ok());
  EXPECT_EQ(c.seq_new().status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.seq_clone(a, std::nullopt).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.seq_rm(5).code(), StatusCode::kNotFound);
  EXPECT_EQ(c.rewind(a, 9).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(c.step_open());
  auto r = c.place(1, pos);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(vec(*r), (Cells{0}));
}

TEST(CellLayout, LargePoolRefillsLowestFirstAcrossBitsetWords) {
  CellLayout c = make({full()}, 1 << 18);
  const int32_t a = new_seq(c), b = new_seq(c);
  prefill(c, a, 5000);  // cells 0..4999
  prefill(c, b, 100);   // cells 5000..5099
  EXPECT_EQ(c.used_end(), 5100);
  ASSERT_TRUE(c.rewind(a, 4090).ok());  // frees cells 4090..4999 (crosses word 63/64 and 4095/4096)
  EXPECT_EQ(c.free_cells(), (1 << 18) - 5100 + 910);
  EXPECT_EQ(c.used_end(), 5100);
  Cells placed = prefill(c, b, 3);
  EXPECT_EQ(placed, (Cells{4090, 4091, 4092}));
  ASSERT_TRUE(c.seq_rm(b).ok());
  EXPECT_EQ(c.used_end(), 4090);  // the highest occupied cell is found again after the free
  ASSERT_TRUE(c.rewind(a, 0).ok());
  EXPECT_EQ(c.used_end(), 0);
  EXPECT_EQ(c.free_cells(), 1 << 18);
}

TEST(CellLayout, HugeCapacityAndIdBoundCostNothingUpFront) {
  // Metadata follows the highest cell and id used, so the largest valid pool is cheap.
  CellLayout c = make({full(), sliding(4096)}, 2147483647, 2147483647);
  EXPECT_EQ(c.max_seqs(), 2147483647);
  const int32_t a = new_seq(c);
  prefill(c, a, 10);
  EXPECT_EQ(c.free_cells(), 2147483647 - 10);
  EXPECT_EQ(c.used_end(), 10);
  EXPECT_EQ(c.cell_pos(2000000000), -1);
  EXPECT_EQ(c.cell_owners(2000000000), 0);
  EXPECT_EQ(c.seq_rm(2000000000).code(), StatusCode::kNotFound);
}

TEST(CellLayout, MovedLayoutKeepsItsState) {
  CellLayout c = make({full()}, 16);
  prefill(c, new_seq(c), 2);
  CellLayout d = std::move(c);
  EXPECT_EQ(d.pos(0), 2);
  EXPECT_EQ(d.free_cells(), 14);
}

}  // namespace
}  // namespace kvcache

namespace kvcache {
namespace {

// Two sequences verify 1 + 3 tokens each in one step on a sliding(3) pool; taking back a's last
// 3 and b's last 1 together leaves every counter as a layout that only saw the kept tokens,
// and the step stays open for a clone of a third sequence's chunk. One rewind() at a time
// would end the step and the second would find its window gone.
TEST(CellLayout, RewindManyTakesBackSeveralSequencesOfOneStep) {
  auto run = [](bool verify) {
    CellLayout c = make({full(), sliding(3)}, 32);
    const int32_t a = new_seq(c), b = new_seq(c), p = new_seq(c);
    prefill(c, a, 4);
    prefill(c, b, 4);
    if (verify) {
      step(c, {a, a, a, a, b, b, b, b, p, p, p}, {4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2});
      const std::vector<int32_t> seqs{a, b};
      const std::vector<int64_t> to{5, 7};
      Status s = c.rewind_many(seqs, to);
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(c.step_open());
      auto clone = c.seq_clone(p, 2);  // inside p's chunk: needs positions 0, 1
      EXPECT_TRUE(clone.ok()) << clone.status().to_string();
      if (clone.ok()) {
        EXPECT_TRUE(c.seq_rm(*clone).ok());
      }
    } else {
      step(c, {a, b, b, b, p, p, p}, {4, 4, 5, 6, 0, 1, 2});
    }
    return std::vector<int64_t>{c.pos(a), c.pos(b), c.pos(p), c.free_cells(), c.pool_free(0),
                                c.kept_from(a, 1), c.kept_from(b, 1), c.pool_room(1)};
  };
  EXPECT_EQ(run(true), run(false));
  EXPECT_EQ(run(true)[0], 5);
  EXPECT_EQ(run(true)[1], 7);
}

TEST(CellLayout, RewindManyRefusalsNameTheEntryAndChangeNothing) {
  CellLayout c = make({full(), sliding(3)}, 32);
  const int32_t a = new_seq(c), b = new_seq(c);
  prefill(c, b, 6);
  prefill(c, a, 4);  // ends b's step: b's sliding pool holds positions 4, 5 only
  const std::vector<int32_t> twice{a, a};
  const std::vector<int64_t> two{4, 4};
  EXPECT_EQ(c.rewind_many(twice, two).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> ab{a, b};
  const std::vector<int64_t> one{1};
  EXPECT_EQ(c.rewind_many(ab, one).code(), StatusCode::kInvalidArgument);
  const std::vector<int64_t> far{4, 2};  // a stays; b to 2 needs positions 0, 1: gone
  const Status s = c.rewind_many(ab, far);
  ASSERT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("sequence 1 to position 2"), std::string::npos) << s.message();
  EXPECT_EQ(c.pos(a), 4);
  EXPECT_EQ(c.pos(b), 6);
  const std::vector<int64_t> fine{6, 1};  // b stays; a's open step still holds position 0
  ASSERT_TRUE(c.rewind_many(std::vector<int32_t>{b, a}, fine).ok());
  EXPECT_EQ(c.pos(b), 6);
  EXPECT_EQ(c.pos(a), 1);
}

}  // namespace
}  // namespace kvcache
