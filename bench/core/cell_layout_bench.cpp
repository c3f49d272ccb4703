// Cell-layout bookkeeping cost (SPEC §10): ns per token of a decode step of S sequences over a
// pool of C cells, a 512-token prefill, seq_rm and rewind. The cost must stay flat as C grows
// with S fixed. Run with --benchmark_format=json. Model: 4 layers, windows full/512/full/512
// (a full pool of C cells and a sliding(512) pool of S * 511 + 512 cells); steps of at most
// 512 tokens. Decode and prefill advance the sequences and rebuild the pool (untimed) when
// it is nearly full, since a sliding sequence cannot rewind past its window. The rewind
// benchmark uses a full-only model (4 full layers).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "core/cell_layout.h"

namespace kvcache {
namespace {

constexpr int64_t kPrefill = 512;

CellLayout make_layout(int64_t capacity, int32_t max_seqs, bool windows = true) {
  const int32_t w = windows ? 512 : 0;
  CacheGeometry g{{{8, 128, 128, 0}, {8, 128, 128, w}, {8, 128, 128, 0}, {8, 128, 128, w}}};
  CacheConfig c;
  c.capacity = capacity;
  c.max_write = static_cast<int32_t>(kPrefill);
  auto r = CellLayout::create(g, c, max_seqs);
  if (!r.ok()) {
    std::fprintf(stderr, "bench: %s\n", r.status().to_string().c_str());
    std::abort();
  }
  return std::move(r).value();
}

void must(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s\n", s.to_string().c_str());
    std::abort();
  }
}

// One full step: declare, place every layer, ask every layer for every token's visible cells.
void run_step(CellLayout& c, const std::vector<int32_t>& ids, const std::vector<int64_t>& pos) {
  must(c.declare_step(ids));
  for (int32_t l = 0; l < c.n_layers(); ++l) {
    auto placed = c.place(l, pos);
    if (!placed.ok()) must(placed.status());
    for (int32_t t = 0; t < static_cast<int32_t>(ids.size()); ++t) {
      auto v = c.visible(l, t);
      benchmark::DoNotOptimize(v.ok() ? v->data() : nullptr);
    }
  }
}

// Appends n tokens to seq in steps of at most 512 (setup only: places the first layer).
void fill(CellLayout& c, int32_t seq, int64_t n) {
  while (n > 0) {
    const int64_t t = std::min(n, kPrefill);
    std::vector<int32_t> ids(static_cast<size_t>(t), seq);
    std::vector<int64_t> pos(static_cast<size_t>(t));
    std::iota(pos.begin(), pos.end(), c.pos(seq));
    must(c.declare_step(ids));
    auto placed = c.place(0, pos);
    if (!placed.ok()) must(placed.status());
    n -= t;
  }
}

// Sequences 0..s-1 holding `each` positions apiece (from a cleared layout).
void populate(CellLayout& c, int32_t s, int64_t each) {
  c.clear();
  for (int32_t i = 0; i < s; ++i) {
    auto id = c.seq_new();
    if (!id.ok()) must(id.status());
    fill(c, *id, each);
  }
}

CellLayout populated(int64_t capacity, int32_t s, int64_t each, bool windows = true) {
  CellLayout c = make_layout(capacity, s + 1, windows);
  populate(c, s, each);
  return c;
}

void set_ns_per_token(benchmark::State& state, int64_t tokens_per_iter) {
  state.SetItemsProcessed(state.iterations() * tokens_per_iter);
  // Inverted rate of (tokens / 1e9) per second = ns per token.
  state.counters["ns_per_token"] = benchmark::Counter(
      static_cast<double>(tokens_per_iter) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// One decode token per sequence per step; the sequences advance through the pool, which is
// rebuilt (untimed) to `each` positions per sequence whenever a step would not fit.
void BM_CellDecodeStep(benchmark::State& state) {
  const auto s = static_cast<int32_t>(state.range(0));
  const int64_t cap = state.range(1);
  const int64_t each = cap / s - std::min<int64_t>(1024, cap / s / 2);
  CellLayout c = populated(cap, s, each);
  std::vector<int32_t> ids(static_cast<size_t>(s));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<int64_t> pos(static_cast<size_t>(s));
  for (auto _ : state) {
    if (c.free_cells() < s) {
      state.PauseTiming();
      populate(c, s, each);
      state.ResumeTiming();
    }
    for (int32_t i = 0; i < s; ++i) pos[i] = c.pos(i);
    run_step(c, ids, pos);
  }
  set_ns_per_token(state, s);
  state.counters["used_end"] = static_cast<double>(c.used_end());
  state.counters["sliding_cells"] = static_cast<double>(c.pool(1).cells);
}

// A 512-token prefill of sequence 0 while S-1 others hold most of the pool; sequence 0 is
// started over (rewind to 0, untimed) when the next prefill would not fit.
void BM_CellPrefill512(benchmark::State& state) {
  const auto s = static_cast<int32_t>(state.range(0));
  const int64_t cap = state.range(1);
  CellLayout c = populated(cap, s, (cap - 4 * kPrefill) / s);
  std::vector<int32_t> ids(static_cast<size_t>(kPrefill), 0);
  std::vector<int64_t> pos(static_cast<size_t>(kPrefill));
  for (auto _ : state) {
    if (c.free_cells() < kPrefill) {
      state.PauseTiming();
      must(c.rewind(0, 0));
      state.ResumeTiming();
    }
    std::iota(pos.begin(), pos.end(), c.pos(0));
    run_step(c, ids, pos);
  }
  set_ns_per_token(state, kPrefill);
}

// seq_rm of a sequence that alone owns C/S cells (refilled outside the timing).
void BM_CellSeqRm(benchmark::State& state) {
  const auto s = static_cast<int32_t>(state.range(0));
  const int64_t cap = state.range(1);
  const int64_t each = cap / s;
  CellLayout c = populated(cap, s - 1, each);
  for (auto _ : state) {
    state.PauseTiming();
    auto id = c.seq_new();
    if (!id.ok()) must(id.status());
    fill(c, *id, each);
    state.ResumeTiming();
    must(c.seq_rm(*id));
  }
  state.SetItemsProcessed(state.iterations() * each);
  state.counters["ns_per_cell"] = benchmark::Counter(
      static_cast<double>(each) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// A fork of a sequence holding C/S cells and its removal (owner counts only; nothing frees).
void BM_CellCloneRm(benchmark::State& state) {
  const auto s = static_cast<int32_t>(state.range(0));
  const int64_t cap = state.range(1);
  const int64_t each = cap / s;
  CellLayout c = populated(cap, s, each);
  for (auto _ : state) {
    auto id = c.seq_clone(0, std::nullopt);
    if (!id.ok()) must(id.status());
    must(c.seq_rm(*id));
  }
  state.SetItemsProcessed(state.iterations() * each);
}

// Rewinding 256 tokens of one sequence (re-appended outside the timing); full layers only,
// since a sliding(512) sequence cannot rewind past its window.
void BM_CellRewind256(benchmark::State& state) {
  const auto s = static_cast<int32_t>(state.range(0));
  const int64_t cap = state.range(1);
  CellLayout c = populated(cap, s, cap / s, false);
  const int64_t end = c.pos(0);
  const int64_t back = std::min<int64_t>(256, end);
  for (auto _ : state) {
    must(c.rewind(0, end - back));
    state.PauseTiming();
    fill(c, 0, back);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * back);
  state.counters["ns_per_cell"] = benchmark::Counter(
      static_cast<double>(back) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void grid(benchmark::internal::Benchmark* b) {
  b->ArgNames({"S", "C"});
  for (int64_t s : {1, 8, 64})
    for (int64_t c : {4096, 65536, 262144}) b->Args({s, c});
}

BENCHMARK(BM_CellDecodeStep)->Apply(grid);
BENCHMARK(BM_CellPrefill512)->Apply(grid);
BENCHMARK(BM_CellSeqRm)->Apply(grid)->Iterations(200);
BENCHMARK(BM_CellCloneRm)->Apply(grid);
BENCHMARK(BM_CellRewind256)->Apply(grid)->Iterations(5000);

}  // namespace
}  // namespace kvcache

BENCHMARK_MAIN();
