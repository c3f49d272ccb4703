// Sequence layout scenarios: full and ring plans, one advance per step, rewind floors and the
// step protocol (SPEC §3).
#include "core/sequence_layout.h"

#include <gtest/gtest.h>

namespace kvcache {
namespace {

LayerGeometry full() { return {1, 4, 4, 0}; }
LayerGeometry sliding(int32_t w) { return {1, 4, 4, w}; }

CacheConfig config(int64_t capacity, std::optional<int32_t> max_write = std::nullopt) {
  CacheConfig c;
  c.capacity = capacity;
  c.max_write = max_write;
  return c;
}

SequenceLayout make(std::vector<LayerGeometry> layers, CacheConfig c) {
  auto r = SequenceLayout::create(CacheGeometry{std::move(layers)}, c);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Runs one step over every layer; returns the plans.
std::vector<SequencePlan> step(SequenceLayout& s, int32_t n) {
  EXPECT_TRUE(s.declare_step(n).ok());
  std::vector<SequencePlan> plans;
  for (int32_t l = 0; l < s.n_layers(); ++l) {
    auto p = s.place(l);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) plans.push_back(*p);
  }
  return plans;
}

TEST(SequenceLayout, CreateRefusesInvalidGeometryWithTheReason) {
  auto r = SequenceLayout::create(CacheGeometry{}, config(8));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers = 0"), std::string::npos) << r.status().message();
  auto c = SequenceLayout::create(CacheGeometry{{full()}}, config(0));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(SequenceLayout, FullLayerAppendsAndReadsFromZero) {
  SequenceLayout s = make({full()}, config(16));
  EXPECT_EQ(s.step_limit(), 16);
  auto p = step(s, 5);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].start, 0);
  EXPECT_EQ(p[0].n_write, 1);
  EXPECT_EQ(p[0].write[0], (SlotRun{0, 5}));
  EXPECT_EQ(p[0].n_read, 1);
  EXPECT_EQ(p[0].read[0], (SlotRun{0, 5}));
  EXPECT_EQ(s.length(), 5);

  p = step(s, 3);
  EXPECT_EQ(p[0].start, 5);
  EXPECT_EQ(p[0].write[0], (SlotRun{5, 8}));
  EXPECT_EQ(p[0].read[0], (SlotRun{0, 8}));
  EXPECT_EQ(p[0].read_begin, 0);
  EXPECT_EQ(p[0].slots, 16);
  EXPECT_EQ(s.length(), 8);
}

TEST(SequenceLayout, RingWrapsWritesAndReadsOldestFirst) {
  // Window 4, max_write unset -> M = 4, R = 4 + 4 - 1 = 7 slots.
  SequenceLayout s = make({sliding(4)}, config(100));
  EXPECT_EQ(s.slots(0), 7);
  EXPECT_EQ(s.step_limit(), 4);
  step(s, 4);
  step(s, 3);  // length 7
  auto p = step(s, 1);
  // Position 7 writes slot 7 mod 7 = 0 and reads positions 4..7 = slots 4,5,6 then 0.
  EXPECT_EQ(p[0].start, 7);
  EXPECT_EQ(p[0].n_write, 1);
  EXPECT_EQ(p[0].write[0], (SlotRun{0, 1}));
  EXPECT_EQ(p[0].read_begin, 4);
  ASSERT_EQ(p[0].n_read, 2);
  EXPECT_EQ(p[0].read[0], (SlotRun{4, 7}));
  EXPECT_EQ(p[0].read[1], (SlotRun{0, 1}));
}

TEST(SequenceLayout, VisibleGivesEachQuerysWindowAsSlotRunsOldestFirst) {
  // Layer 0 full, layer 1 window 4 (R = 7 slots). Length 9 after steps of 4, 4, 1.
  SequenceLayout s = make({full(), sliding(4)}, config(100));
  step(s, 4);
  step(s, 4);
  step(s, 1);
  // Full: position 8 reads 0..8 = slots 0..8.
  Result<SlotRuns> f = s.visible(0, 8);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->n, 1);
  EXPECT_EQ(f->runs[0], (SlotRun{0, 9}));
  EXPECT_EQ(f->first, 0);
  // Ring: position 8 reads 5..8 = slots 5, 6 | 0, 1; position 6 reads 3..6 = slots 3..6.
  Result<SlotRuns> r = s.visible(1, 8);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->n, 2);
  EXPECT_EQ(r->first, 5);
  EXPECT_EQ(r->runs[0], (SlotRun{5, 7}));
  EXPECT_EQ(r->runs[1], (SlotRun{0, 2}));
  EXPECT_EQ(r->size(), 4);
  ASSERT_EQ(s.visible(1, 6)->n, 1);
  EXPECT_EQ(s.visible(1, 6)->runs[0], (SlotRun{3, 7}));
  EXPECT_EQ(s.slot(1, 8), 1);
  EXPECT_EQ(s.slot(0, 8), 8);
  // Lookback at length 9: positions 6..8 = slots 6 | 0, 1; none on the full layer.
  SlotRuns back = s.lookback(1);
  EXPECT_EQ(back.first, 6);
  ASSERT_EQ(back.n, 2);
  EXPECT_EQ(back.runs[0], (SlotRun{6, 7}));
  EXPECT_EQ(back.runs[1], (SlotRun{0, 2}));
  EXPECT_EQ(s.lookback(0).n, 0);
  EXPECT_EQ(s.visible(1, 9).status().code(), StatusCode::kOutOfRange);  // not placed
  EXPECT_EQ(s.visible(1, -1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.visible(2, 0).status().code(), StatusCode::kInvalidArgument);
  // Position 1 reads back to 0, which the ring (holding 2..8) no longer has.
  EXPECT_EQ(s.visible(1, 1).status().code(), StatusCode::kOutOfRange);
}

TEST(SequenceLayout, TwoRewindsBelowAWindowOfOnesOldestStillSeeTheNextWrite) {
  // Window 1, max_write 2: R = 2 slots. At length 4 the ring holds 2..3; rewind(2) then
  // rewind(1) (floor 0 at length 2) leaves it holding nothing below 1. The step at 1 writes
  // position 1, which its query must see (it once stayed marked as held from 2 only).
  SequenceLayout s = make({sliding(1)}, config(27, 2));
  step(s, 2);
  step(s, 2);
  EXPECT_EQ(s.held_from(0), 2);
  ASSERT_TRUE(s.rewind(2).ok());
  ASSERT_TRUE(s.rewind(1).ok());
  EXPECT_EQ(s.held_from(0), 1);
  step(s, 1);
  EXPECT_EQ(s.held_from(0), 1);
  Result<SlotRuns> vis = s.visible(0, 1);
  ASSERT_TRUE(vis.ok()) << vis.status().to_string();
  EXPECT_EQ(vis->first, 1);
  ASSERT_EQ(vis->n, 1);
  EXPECT_EQ(vis->runs[0], (SlotRun{1, 2}));
}

TEST(SequenceLayout, RingWriteSplitsIntoTwoRuns) {
  SequenceLayout s = make({sliding(4)}, config(100));
  step(s, 4);
  step(s, 2);  // length 6
  auto p = step(s, 3);
  // Positions 6,7,8 -> slots 6 | 0,1. Reads positions 3..8 -> slots 3..6 | 0..1.
  ASSERT_EQ(p[0].n_write, 2);
  EXPECT_EQ(p[0].write[0], (SlotRun{6, 7}));
  EXPECT_EQ(p[0].write[1], (SlotRun{0, 2}));
  EXPECT_EQ(p[0].read_begin, 3);
  ASSERT_EQ(p[0].n_read, 2);
  EXPECT_EQ(p[0].read[0], (SlotRun{3, 7}));
  EXPECT_EQ(p[0].read[1], (SlotRun{0, 2}));
}

TEST(SequenceLayout, StepWiderThanMaxWriteIsRefused) {
  SequenceLayout s = make({full(), sliding(8)}, config(100, 2));
  EXPECT_EQ(s.step_limit(), 2);
  Status st = s.declare_step(3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("3 tokens, expected 1..2"), std::string::npos) << st.message();
  EXPECT_EQ(s.declare_step(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.declare_step(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.step_open());
  EXPECT_EQ(s.plan(1, 0, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.can_extend(3));
  EXPECT_TRUE(s.can_extend(2));
}

TEST(SequenceLayout, CapacityShortfallIsResourceExhausted) {
  SequenceLayout s = make({full()}, config(5));
  step(s, 4);
  EXPECT_FALSE(s.can_extend(2));
  EXPECT_TRUE(s.can_extend(1));
  EXPECT_EQ(s.declare_step(2).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.length(), 4);
  EXPECT_EQ(s.plan(0, 4, 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(SequenceLayout, FullAndSlidingModelAdvancesOncePerStep) {
  SequenceLayout s = make({full(), sliding(4), full(), sliding(4)}, config(64));
  ASSERT_TRUE(s.declare_step(3).ok());
  EXPECT_EQ(s.length(), 0);
  for (int32_t l = 0; l < 4; ++l) {
    auto p = s.place(l);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->start, 0);
    EXPECT_EQ(p->n_tokens, 3);
    EXPECT_EQ(s.length(), 3);  // advanced by the first layer only
  }
  ASSERT_TRUE(s.declare_step(2).ok());
  auto p = s.place(3);  // any layer may go first
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->start, 3);
  EXPECT_EQ(s.length(), 5);
  auto q = s.place(0);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->start, 3);
  EXPECT_EQ(s.length(), 5);
}

TEST(SequenceLayout, SameLayerTwiceInOneStepIsRefused) {
  SequenceLayout s = make({full(), sliding(4)}, config(64));
  ASSERT_TRUE(s.declare_step(1).ok());
  ASSERT_TRUE(s.place(0).ok());
  EXPECT_EQ(s.place(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.length(), 1);
}

TEST(SequenceLayout, PlacedReturnsThePlanOfAnAlreadyPlacedLayer) {
  SequenceLayout s = make({full(), sliding(4)}, config(64));
  ASSERT_TRUE(s.declare_step(2).ok());
  EXPECT_EQ(s.placed(1).status().code(), StatusCode::kFailedPrecondition);
  auto p = s.place(1);
  ASSERT_TRUE(p.ok());
  auto again = s.placed(1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->start, 0);
  EXPECT_EQ(again->write[0], p->write[0]);
  EXPECT_EQ(s.placed(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.placed(2).status().code(), StatusCode::kInvalidArgument);
}

TEST(SequenceLayout, StepThatDoesNotContinueTheSequenceIsRefused) {
  SequenceLayout s = make({full(), sliding(4)}, config(64));
  // No declaration at all.
  EXPECT_EQ(s.place(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.length(), 0);
  step(s, 2);
  // A second step's place without declaring it.
  EXPECT_EQ(s.place(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.place(1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.length(), 2);
  // Layer out of range.
  ASSERT_TRUE(s.declare_step(1).ok());
  EXPECT_EQ(s.place(2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.place(-1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.length(), 2);
}

TEST(SequenceLayout, RewindAndClearEndTheOpenStep) {
  SequenceLayout s = make({full(), full()}, config(64));
  step(s, 4);
  ASSERT_TRUE(s.declare_step(1).ok());
  ASSERT_TRUE(s.place(0).ok());
  ASSERT_TRUE(s.rewind(3).ok());
  EXPECT_FALSE(s.step_open());
  EXPECT_EQ(s.place(1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.length(), 3);

  ASSERT_TRUE(s.declare_step(1).ok());
  s.clear();
  EXPECT_EQ(s.place(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.length(), 0);
}

TEST(SequenceLayout, RefusedRewindLeavesTheStepStanding) {
  SequenceLayout s = make({full(), full()}, config(64));
  step(s, 4);
  ASSERT_TRUE(s.declare_step(2).ok());
  ASSERT_TRUE(s.place(0).ok());
  EXPECT_EQ(s.rewind(9).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(s.step_open());
  auto p = s.place(1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->start, 4);
  EXPECT_EQ(s.length(), 6);
}

TEST(SequenceLayout, WindowOfOneLooksBackAtNothing) {
  // W = 1, M = 1: one slot; every step reads only its own token, so any length >= L - 1 is
  // a valid rewind target even after an earlier rewind.
  SequenceLayout s = make({sliding(1)}, config(64));
  EXPECT_EQ(s.slots(0), 1);
  for (int i = 0; i < 5; ++i) step(s, 1);
  auto p = step(s, 1);
  EXPECT_EQ(p[0].write[0], (SlotRun{0, 1}));
  EXPECT_EQ(p[0].read_begin, 5);
  EXPECT_EQ(p[0].read[0], (SlotRun{0, 1}));
  ASSERT_TRUE(s.rewind(5).ok());
  EXPECT_EQ(s.rewind_floor(), 4);
  EXPECT_TRUE(s.rewind(4).ok());
}

TEST(SequenceLayout, RewindFloorWhenMaxWriteIsBelowWindow) {
  // Window 4, max_write 1: R = 4 slots hold positions 6..9 at length 10; the next step at
  // length L' reads back to L'-3, so L' >= 9 = L - M.
  SequenceLayout s = make({full(), sliding(4)}, config(64, 1));
  for (int i = 0; i < 10; ++i) step(s, 1);
  EXPECT_EQ(s.rewind_floor(), 9);
  Status refused = s.rewind(8);
  EXPECT_EQ(refused.code(), StatusCode::kOutOfRange);
  EXPECT_NE(refused.message().find("floor 9"), std::string::npos) << refused.message();
  EXPECT_EQ(s.length(), 10);
  EXPECT_TRUE(s.rewind(9).ok());
  EXPECT_EQ(s.length(), 9);
}

TEST(SequenceLayout, RewindToZeroAlwaysWorksBelowTheFloor) {
  // Window 4, max_write 1, length 10: floor 9, yet 0 needs nothing read back: it is a clear.
  SequenceLayout s = make({full(), sliding(4)}, config(64, 1));
  for (int i = 0; i < 10; ++i) step(s, 1);
  ASSERT_EQ(s.rewind_floor(), 9);
  ASSERT_TRUE(s.rewind(0).ok());
  EXPECT_EQ(s.length(), 0);
  EXPECT_EQ(s.rewind_floor(), 0);
  // The rings start over: the first step reads only its own position.
  auto plans = step(s, 1);
  EXPECT_EQ(plans[1].read_begin, 0);
  EXPECT_EQ(plans[1].n_read, 1);
}

TEST(SequenceLayout, RestoreGoesBelowTheFloorAndKeepsOnlyTheRestoredWindow) {
  // Window 4, max_write 4, length 10 (ring of 7 holds 3..9, floor 6). restore(5) is for a
  // byte layer writing back positions 2..4: afterwards the rings hold only those, so the
  // floor is 5 itself (5 - M = 1 but 2 + 4 - 1 = 5).
  SequenceLayout s = make({sliding(4)}, config(64, 4));
  step(s, 4);
  step(s, 4);
  step(s, 2);
  ASSERT_EQ(s.rewind(5).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(s.restore(5).ok());
  EXPECT_EQ(s.length(), 5);
  EXPECT_EQ(s.rewind_floor(), 5);
  EXPECT_EQ(s.restore(6).code(), StatusCode::kOutOfRange);  // restore never grows
  EXPECT_EQ(s.restore(-1).code(), StatusCode::kOutOfRange);
  auto plans = step(s, 1);  // position 5 reads 2..5
  EXPECT_EQ(plans[0].read_begin, 2);
}

TEST(SequenceLayout, RewindFloorWhenMaxWriteEqualsWindow) {
  // Window 4, max_write 4: R = 7 slots hold positions 3..9; floor = 10 - 4 = 6.
  SequenceLayout s = make({sliding(4)}, config(64, 4));
  step(s, 4);
  step(s, 4);
  step(s, 2);
  EXPECT_EQ(s.rewind_floor(), 6);
  EXPECT_EQ(s.rewind(5).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.length(), 10);
  EXPECT_TRUE(s.rewind(6).ok());
  EXPECT_EQ(s.length(), 6);
}

TEST(SequenceLayout, RewindFloorRisesAfterARewindDroppedRingPositions) {
  // Window 4, max_write 4, length 10: ring holds 3..9. Rewind to 6 leaves 3..5, so the next
  // rewind cannot go below 3 + 4 - 1 = 6 even though 6 - M = 2.
  SequenceLayout s = make({sliding(4)}, config(64, 4));
  step(s, 4);
  step(s, 4);
  step(s, 2);
  ASSERT_TRUE(s.rewind(6).ok());
  EXPECT_EQ(s.rewind_floor(), 6);
  EXPECT_EQ(s.rewind(5).code(), StatusCode::kOutOfRange);
  // One more token (position 6, slot 6) evicts nothing held: floor 3 + 3 = 6 still.
  step(s, 1);
  EXPECT_EQ(s.rewind_floor(), 6);
  EXPECT_TRUE(s.rewind(6).ok());
}

TEST(SequenceLayout, FullOnlyModelRewindsToZero) {
  SequenceLayout s = make({full()}, config(64));
  step(s, 30);
  EXPECT_EQ(s.rewind_floor(), 0);
  EXPECT_TRUE(s.rewind(0).ok());
  EXPECT_EQ(s.length(), 0);
}

TEST(SequenceLayout, RewindNeverGrows) {
  SequenceLayout s = make({full()}, config(64));
  step(s, 5);
  Status st = s.rewind(6);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("rewind never grows"), std::string::npos);
  EXPECT_EQ(s.rewind(-1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.length(), 5);
  EXPECT_TRUE(s.rewind(5).ok());
  EXPECT_EQ(s.length(), 5);
}

TEST(SequenceLayout, ClearRestoresAllRoom) {
  SequenceLayout s = make({full(), sliding(4)}, config(8));
  step(s, 4);
  step(s, 4);
  EXPECT_FALSE(s.can_extend(1));
  EXPECT_EQ(s.declare_step(1).code(), StatusCode::kResourceExhausted);
  s.clear();
  EXPECT_EQ(s.length(), 0);
  EXPECT_EQ(s.rewind_floor(), 0);
  EXPECT_TRUE(s.can_extend(4));
  auto p = step(s, 4);
  EXPECT_EQ(p[1].write[0], (SlotRun{0, 4}));
}

TEST(SequenceLayout, RefusedDeclarationKeepsTheStandingOne) {
  SequenceLayout s = make({full(), full()}, config(4));
  step(s, 2);
  ASSERT_TRUE(s.declare_step(2).ok());
  EXPECT_EQ(s.declare_step(3).code(), StatusCode::kResourceExhausted);  // 2 + 3 > 4
  EXPECT_EQ(s.declare_step(5).code(), StatusCode::kInvalidArgument);   // wider than 4
  EXPECT_TRUE(s.step_open());
  EXPECT_EQ(s.step_tokens(), 2);
  EXPECT_EQ(s.step_start(), 2);
  auto p = s.place(0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_tokens, 2);
  EXPECT_EQ(s.length(), 4);
}

TEST(SequenceLayout, RingClampedToCapacity) {
  // W + M - 1 = 7 > capacity 5: the ring is the whole capacity; slot = position.
  SequenceLayout s = make({sliding(4)}, config(5));
  EXPECT_EQ(s.slots(0), 5);
  step(s, 4);
  auto p = step(s, 1);
  EXPECT_EQ(p[0].write[0], (SlotRun{4, 5}));
  EXPECT_EQ(p[0].n_read, 1);
  EXPECT_EQ(p[0].read[0], (SlotRun{1, 5}));
}

TEST(SequenceLayout, CopiesAreIndependent) {
  SequenceLayout a = make({full(), sliding(4)}, config(64));
  step(a, 3);
  SequenceLayout b = a;
  step(b, 2);
  EXPECT_EQ(a.length(), 3);
  EXPECT_EQ(b.length(), 5);
}

}  // namespace
}  // namespace kvcache
