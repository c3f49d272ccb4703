// Property tests: random verb/step sequences against deliberately simple models of both
// layouts, checked after every operation (SPEC §11). Seeded and deterministic. The op count
// comes from KVCACHE_PROPERTY_OPS (default 10000 per layout; the "long" ctest sets 1M+).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/cell_layout.h"
#include "core/sequence_layout.h"

namespace kvcache {
namespace {

// Asserts a refusal's code and leaves the calling op.
#define REFUSED(actual, code) \
  do {                        \
    ASSERT_EQ(actual, code);  \
    return;                   \
  } while (0)

int64_t ops_per_layout() {
  const char* env = std::getenv("KVCACHE_PROPERTY_OPS");
  if (env == nullptr) return 10000;
  const long long n = std::atoll(env);
  return n > 0 ? n : 10000;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int64_t range(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(g_);
  }
  bool chance(int percent) { return range(0, 99) < percent; }

 private:
  std::mt19937_64 g_;
};

std::vector<LayerGeometry> random_layers(Rng& rng) {
  std::vector<LayerGeometry> layers(static_cast<size_t>(rng.range(1, 4)));
  for (auto& l : layers) {
    l = {1, 4, 4, 0};
    if (rng.chance(60)) l.window = static_cast<int32_t>(rng.range(1, 6));
  }
  return layers;
}

// ===================================== cell layout =====================================

// The model, one per window pool: (seq, pos) -> cell, plus the live ids and each sequence's
// next position. A sliding pool drops a sequence's positions below next - W + 1 when a step
// it took part in ends (the next accepted declaration or verb). Everything else is derived
// naively; a verb but seq_clone and rewind is judged on a copy with the open step ended, as the
// layout judges it (a clone leaves the step open; a rewind truncates first, then ends it).
struct PoolModel {
  int32_t window = 0;
  int64_t cells = 0;  // the pool's maximum
  std::map<std::pair<int32_t, int64_t>, int32_t> cell_of;

  int32_t owners(int32_t c) const {
    int32_t n = 0;
    for (const auto& [k, v] : cell_of) n += v == c;
    return n;
  }
  std::set<int32_t> occupied() const {
    std::set<int32_t> used;
    for (const auto& [k, v] : cell_of) used.insert(v);
    return used;
  }
  static int32_t lowest_free_cell(const std::set<int32_t>& used) {
    int32_t c = 0;
    while (used.count(c)) ++c;
    return c;
  }
  void drop_from(int32_t s, int64_t p) {
    for (auto it = cell_of.begin(); it != cell_of.end();)
      it = (it->first.first == s && it->first.second >= p) ? cell_of.erase(it) : std::next(it);
  }
  void drop_below(int32_t s, int64_t p) {
    for (auto it = cell_of.begin(); it != cell_of.end();)
      it = (it->first.first == s && it->first.second < p) ? cell_of.erase(it) : std::next(it);
  }
  // Whether s holds every position in [lo, hi).
  bool holds(int32_t s, int64_t lo, int64_t hi) const {
    for (int64_t p = lo; p < hi; ++p)
      if (!cell_of.count({s, p})) return false;
    return true;
  }
  // Cells a query (s, p) sees, oldest first: every (s, q) entry with q <= p and, for a
  // window, q > p - w (the SPEC's definition, read off the ordered map).
  std::vector<int32_t> visible(int32_t s, int64_t p) const {
    std::vector<int32_t> out;
    for (auto it = cell_of.lower_bound({s, INT64_MIN}); it != cell_of.end(); ++it) {
      const auto [seq, q] = it->first;
      if (seq != s || q > p) break;
      if (window == 0 || q > p - window) out.push_back(it->second);
    }
    return out;
  }
};

struct CellModel {
  int64_t capacity = 0;
  int32_t max_seqs = 0;
  std::set<int32_t> live;
  std::map<int32_t, int64_t> next;
  std::vector<PoolModel> pools;    // ascending window, full (0) first
  std::vector<int32_t> step_seqs;  // the placed step's sequences; empty when none

  int64_t pos(int32_t s) const { return next.count(s) ? next.at(s) : 0; }
  int32_t lowest_free_id() const {
    int32_t id = 0;
    while (live.count(id)) ++id;
    return id < max_seqs ? id : -1;
  }
  static int64_t low(int64_t n, int32_t w) { return w > 0 ? std::max<int64_t>(0, n - w + 1) : 0; }
  void end_step() {
    for (PoolModel& pool : pools)
      if (pool.window > 0)
        for (int32_t s : step_seqs) pool.drop_below(s, low(pos(s), pool.window));
    step_seqs.clear();
  }
  CellModel ended() const {
    CellModel m = *this;
    m.end_step();
    return m;
  }
  // Whether every pool holds what continuing s from position p needs (its window before p).
  bool holds_window(int32_t s, int64_t p) const {
    for (const PoolModel& pool : pools)
      if (!pool.holds(s, low(p, pool.window), p)) return false;
    return true;
  }
  void drop_from(int32_t s, int64_t p) {
    for (PoolModel& pool : pools) pool.drop_from(s, p);
    next[s] = p;
  }
};

class CellProperty {
 public:
  CellProperty(uint64_t seed) : rng_(seed) { reset(); }

  void reset() {
    layers_ = random_layers(rng_);
    CacheConfig c;
    // Mostly small pools (frequent exhaustion); some span several bitset words.
    c.capacity = rng_.chance(70) ? rng_.range(4, 40) : rng_.range(60, 300);
    const auto max_seqs = static_cast<int32_t>(rng_.range(1, 6));
    auto r = CellLayout::create(CacheGeometry{layers_}, c, max_seqs);
    ASSERT_TRUE(r.ok());
    layout_.emplace(std::move(r).value());
    model_ = CellModel{c.capacity, max_seqs, {}, {}, {}, {}};
    std::set<int32_t> windows;
    for (const auto& l : layers_) windows.insert(l.window);
    for (int32_t w : windows)  // sliding: max_seqs * (W - 1) + W cells, at most capacity
      model_.pools.push_back({w, w == 0 ? c.capacity
                                        : std::min<int64_t>(c.capacity, max_seqs * (w - 1) + w),
                              {}});
  }

  void run(int64_t n_ops) {
    for (int64_t i = 0; i < n_ops && !::testing::Test::HasFailure(); ++i) {
      if (i % 400 == 399) reset();
      op();
      check();
    }
  }

 private:
  CellLayout& c() { return *layout_; }

  int32_t any_id() { return static_cast<int32_t>(rng_.range(-1, model_.max_seqs)); }

  void op() {
    const int64_t kind = rng_.range(0, 99);
    if (kind < 12) return (void)seq_new();
    if (kind < 22) return seq_clone();
    if (kind < 30) return seq_rm();
    if (kind < 40) return rewind();
    if (kind < 41) {
      c().clear();
      model_.live.clear();
      model_.next.clear();
      model_.step_seqs.clear();
      for (PoolModel& p : model_.pools) p.cell_of.clear();
      return;
    }
    step();
  }

  // Returns whether the verb was accepted (a refused verb leaves an open step standing).
  bool seq_new() {
    const int32_t want = model_.lowest_free_id();
    auto r = c().seq_new();
    if (want < 0) {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
      return false;
    }
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.ok() ? *r : -2, want);
    model_.end_step();
    model_.live.insert(want);
    model_.next[want] = 0;
    return true;
  }

  void seq_clone() {
    const int32_t src = any_id();
    std::optional<int64_t> upto;
    if (rng_.chance(60)) upto = rng_.range(-1, model_.pos(src) + 1);
    auto r = c().seq_clone(src, upto);
    if (!model_.live.count(src)) REFUSED(r.status().code(), StatusCode::kNotFound);
    if (upto && *upto < 0)
      REFUSED(r.status().code(), StatusCode::kInvalidArgument);
    const int32_t want = model_.lowest_free_id();
    if (want < 0)
      REFUSED(r.status().code(), StatusCode::kResourceExhausted);
    // A clone leaves an open step open, so it is judged on what src holds now.
    const int64_t n = std::min(model_.pos(src), upto.value_or(INT64_MAX));
    if (!model_.holds_window(src, n)) REFUSED(r.status().code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(*r, want);
    model_.live.insert(want);
    model_.next[want] = n;
    for (PoolModel& pool : model_.pools)
      for (int64_t p = CellModel::low(n, pool.window); p < n; ++p)
        pool.cell_of[{want, p}] = pool.cell_of.at({src, p});
  }

  void seq_rm() {
    const int32_t s = any_id();
    Status st = c().seq_rm(s);
    if (!model_.live.count(s)) REFUSED(st.code(), StatusCode::kNotFound);
    ASSERT_TRUE(st.ok());
    model_.end_step();
    model_.live.erase(s);
    model_.drop_from(s, 0);
    model_.next.erase(s);
  }

  void rewind() {
    const int32_t s = any_id();
    const int64_t p = rng_.range(-1, model_.pos(s) + 1);
    Status st = c().rewind(s, p);
    if (!model_.live.count(s)) REFUSED(st.code(), StatusCode::kNotFound);
    if (p < 0 || p > model_.pos(s)) REFUSED(st.code(), StatusCode::kOutOfRange);
    // Judged on what is held now: right after a step its start's window is still there, so
    // the step's own tokens can be taken back; the step ends after the truncation.
    if (!model_.holds_window(s, p)) REFUSED(st.code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(st.ok()) << st.to_string();
    model_.drop_from(s, p);
    model_.end_step();
  }

  // A step: random tokens (sometimes a bad id), a declaration, then layers in random order
  // with occasional wrong positions, repeats and a verb in between.
  void step() {
    std::vector<int32_t> ids(static_cast<size_t>(rng_.range(0, model_.capacity > 40 ? 24 : 6)));
    for (auto& id : ids)
      id = model_.live.empty() || rng_.chance(5)
               ? any_id()
               : *std::next(model_.live.begin(),
                            rng_.range(0, static_cast<int64_t>(model_.live.size()) - 1));
    Status d = c().declare_step(ids);
    if (ids.empty()) REFUSED(d.code(), StatusCode::kInvalidArgument);
    for (int32_t id : ids)
      if (!model_.live.count(id)) REFUSED(d.code(), StatusCode::kNotFound);
    CellModel m = model_.ended();
    for (const PoolModel& pool : m.pools)
      if (static_cast<int64_t>(ids.size()) >
          pool.cells - static_cast<int64_t>(pool.occupied().size()))
        REFUSED(d.code(), StatusCode::kResourceExhausted);
    ASSERT_TRUE(d.ok()) << d.to_string();
    model_ = std::move(m);

    // The right positions and the cells the model expects (lowest free, token order).
    std::vector<int64_t> pos(ids.size());
    std::map<int32_t, int64_t> next;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!next.count(ids[i])) next[ids[i]] = model_.pos(ids[i]);
      pos[i] = next[ids[i]]++;
    }
    std::vector<int32_t> order(layers_.size());
    for (size_t l = 0; l < order.size(); ++l) order[l] = static_cast<int32_t>(l);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<uint32_t>(rng_.range(0, 1 << 30))));
    bool placed_any = false;
    for (int32_t layer : order) {
      if (rng_.chance(10)) {  // wrong positions: refused, nothing changes, the step stands
        std::vector<int64_t> bad = pos;
        bad[static_cast<size_t>(rng_.range(0, static_cast<int64_t>(bad.size()) - 1))] +=
            rng_.chance(50) ? 1 : -1;
        ASSERT_EQ(c().place(layer, bad).status().code(), StatusCode::kInvalidArgument);
        check();
      }
      auto r = c().place(layer, pos);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      if (!placed_any) {
        for (PoolModel& pool : model_.pools) {
          std::set<int32_t> used = pool.occupied();
          for (size_t i = 0; i < ids.size(); ++i) {
            const int32_t cell = PoolModel::lowest_free_cell(used);
            used.insert(cell);
            pool.cell_of[{ids[i], pos[i]}] = cell;
          }
        }
        for (const auto& [s, n] : next) model_.next[s] = n;
        model_.step_seqs = ids;
        placed_any = true;
      }
      const PoolModel& pool = model_.pools[static_cast<size_t>(pool_index(layer))];
      ASSERT_EQ(c().pool_of(layer), pool_index(layer));
      for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ((*r)[i], pool.cell_of.at({ids[i], pos[i]}));
      check_visible(layer, ids, pos);
      if (rng_.chance(5)) {
        ASSERT_EQ(c().place(layer, pos).status().code(), StatusCode::kFailedPrecondition);
      }
      if (rng_.chance(4) && seq_new()) {  // an accepted verb between layers ends the step
        for (int32_t l = 0; l < static_cast<int32_t>(layers_.size()); ++l)
          ASSERT_EQ(c().place(l, pos).status().code(), StatusCode::kFailedPrecondition);
        return;
      }
    }
  }

  int32_t pool_index(int32_t layer) const {
    for (size_t g = 0; g < model_.pools.size(); ++g)
      if (model_.pools[g].window == layers_[static_cast<size_t>(layer)].window)
        return static_cast<int32_t>(g);
    return -1;
  }

  void check_visible(int32_t layer, const std::vector<int32_t>& ids,
                     const std::vector<int64_t>& pos) {
    const int32_t w = layers_[static_cast<size_t>(layer)].window;
    const PoolModel& pool = model_.pools[static_cast<size_t>(pool_index(layer))];
    for (size_t i = 0; i < ids.size(); ++i) {
      auto v = c().visible(layer, static_cast<int32_t>(i));
      ASSERT_TRUE(v.ok());
      const std::vector<int32_t> want = pool.visible(ids[i], pos[i]);
      ASSERT_EQ(std::vector<int32_t>(v->begin(), v->end()), want)
          << "layer " << layer << " token " << i;
      ASSERT_EQ(c().visible_first_pos(layer, static_cast<int32_t>(i)),
                w == 0 ? 0 : std::max<int64_t>(0, pos[i] - w + 1));
    }
  }

  void check() {
    ASSERT_EQ(c().n_pools(), static_cast<int32_t>(model_.pools.size()));
    int64_t free_cells = model_.capacity;
    const CellModel ended = model_.ended();
    for (size_t g = 0; g < model_.pools.size(); ++g) {
      const PoolModel& pool = model_.pools[g];
      const auto gi = static_cast<int32_t>(g);
      ASSERT_EQ(c().pool(gi).window, pool.window);
      ASSERT_EQ(c().pool(gi).cells, pool.cells);
      const std::set<int32_t> used = pool.occupied();
      ASSERT_EQ(c().pool_free(gi), pool.cells - static_cast<int64_t>(used.size()));
      ASSERT_EQ(c().pool_used_end(gi), used.empty() ? 0 : *used.rbegin() + 1);
      free_cells = std::min<int64_t>(
          free_cells, pool.cells - static_cast<int64_t>(ended.pools[g].occupied().size()));
      std::vector<int32_t> owners(static_cast<size_t>(pool.cells), 0);
      std::vector<int64_t> position(static_cast<size_t>(pool.cells), -1);
      for (const auto& [k, v] : pool.cell_of) {
        ++owners[v];
        if (position[v] >= 0) {
          ASSERT_EQ(position[v], k.second) << "pool " << g << " cell " << v << " holds two positions";
        }
        position[v] = k.second;
      }
      for (int32_t cell = 0; cell < pool.cells; ++cell) {
        ASSERT_EQ(c().cell_owners(gi, cell), owners[cell]) << "pool " << g << " cell " << cell;
        ASSERT_EQ(c().cell_pos(gi, cell), position[cell]) << "pool " << g << " cell " << cell;
      }
      // One pass over the ordered map: each sequence's cells by position, which must run
      // without a gap up to its next position (positions continuous), from 0 in the full pool.
      std::map<int32_t, std::vector<int32_t>> cells_of;
      std::map<int32_t, int64_t> first;
      for (const auto& [k, v] : pool.cell_of) {
        std::vector<int32_t>& cells = cells_of[k.first];
        if (cells.empty()) first[k.first] = k.second;
        ASSERT_EQ(k.second, first[k.first] + static_cast<int64_t>(cells.size()))
            << "pool " << g << " seq " << k.first << " gap";
        cells.push_back(v);
      }
      for (int32_t s : model_.live) {
        const std::vector<int32_t>& cells = cells_of[s];
        if (!cells.empty()) {
          ASSERT_EQ(first[s] + static_cast<int64_t>(cells.size()), model_.pos(s));
          ASSERT_EQ(c().held_first_pos(s, gi), first[s]);
        }
        if (pool.window == 0) {
          ASSERT_EQ(cells.size(), static_cast<size_t>(model_.pos(s)));
        }
        auto got = c().held(s, gi);
        ASSERT_EQ(std::vector<int32_t>(got.begin(), got.end()), cells) << "pool " << g << " seq " << s;
      }
    }
    ASSERT_EQ(c().free_cells(), free_cells);
    for (int32_t s = -1; s <= model_.max_seqs; ++s) {
      ASSERT_EQ(c().live(s), model_.live.count(s) == 1) << "seq " << s;
      ASSERT_EQ(c().pos(s), model_.live.count(s) ? model_.pos(s) : 0);
      ASSERT_EQ(c().seq_len(s), c().pos(s));
    }
  }

  Rng rng_;
  std::vector<LayerGeometry> layers_;
  std::optional<CellLayout> layout_;
  CellModel model_;
};

TEST(CellLayoutProperty, RandomVerbsAndStepsMatchTheModel) {
  CellProperty p(0x6b76636163686531ULL);
  p.run(ops_per_layout());
}

// =================================== sequence layout ===================================

// The model: a length and, per layer, what each storage slot holds (the position last written
// there). A plan, visible() and lookback() are checked by expanding their runs slot by slot
// against the brute force: each position of the range must sit in the slot the model says.
// A checkpoint copies the lookback slots' positions; a restore writes them back where the
// layout's lookback() says, as the byte layer does.
class SequenceProperty {
 public:
  SequenceProperty(uint64_t seed) : rng_(seed) { reset(); }

  void reset() {
    layers_ = random_layers(rng_);
    config_ = CacheConfig{};
    config_.capacity = rng_.range(1, 40);
    if (rng_.chance(50)) config_.max_write = static_cast<int32_t>(rng_.range(1, 7));
    auto r = SequenceLayout::create(CacheGeometry{layers_}, config_);
    ASSERT_TRUE(r.ok());
    layout_.emplace(std::move(r).value());
    saved_.reset();
    length_ = 0;
    slots_.clear();
    for (const auto& l : layers_) slots_.emplace_back(static_cast<size_t>(ring(l)), -1);
    limit_ = config_.max_write.value_or(static_cast<int32_t>(config_.capacity));
    for (const auto& l : layers_)
      if (l.sliding()) limit_ = std::min<int64_t>(limit_, config_.max_write.value_or(l.window));
    limit_ = std::min(limit_, config_.capacity);
  }

  void run(int64_t n_ops) {
    for (int64_t i = 0; i < n_ops && !::testing::Test::HasFailure(); ++i) {
      if (i % 300 == 299) reset();
      const int64_t kind = rng_.range(0, 99);
      if (kind < 15) rewind();
      else if (kind < 17) clear();
      else if (kind < 25) pure_plan();
      else if (kind < 28) checkpoint();
      else if (kind < 31) restore();
      else step();
      check();
    }
  }

 private:
  SequenceLayout& s() { return *layout_; }

  std::string describe() const {
    std::ostringstream d;
    d << "capacity " << config_.capacity << " max_write " << config_.max_write.value_or(0)
      << " length " << length_ << " windows";
    for (const auto& l : layers_) d << ' ' << l.window;
    return d.str();
  }

  int64_t ring(const LayerGeometry& l) const {
    if (!l.sliding()) return config_.capacity;
    return std::min<int64_t>(l.window + config_.max_write.value_or(l.window) - 1,
                             config_.capacity);
  }
  int64_t slot_of(size_t layer, int64_t p) const { return p % ring(layers_[layer]); }
  bool held(size_t layer, int64_t p) const { return slots_[layer][slot_of(layer, p)] == p; }

  // Lowest rewind target such that every target in [floor, L] finds the positions its next
  // step reads back still in the rings, and never below the SPEC's max(0, L - M).
  int64_t expected_floor() const {
    int64_t floor = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!layers_[l].sliding()) continue;
      floor = std::max(floor, length_ - config_.max_write.value_or(layers_[l].window));
    }
    for (int64_t n = length_; n >= 0; --n) {
      bool safe = true;
      for (size_t l = 0; l < layers_.size(); ++l)
        if (layers_[l].sliding())
          for (int64_t p = std::max<int64_t>(0, n - layers_[l].window + 1); p < n; ++p)
            safe = safe && held(l, p);
      if (!safe) return std::max(floor, n + 1);
    }
    return std::max<int64_t>(floor, 0);
  }

  void rewind() {
    const int64_t n = rng_.range(-1, length_ + 1);
    const int64_t floor = expected_floor();
    ASSERT_EQ(s().rewind_floor(), floor) << describe();
    Status st = s().rewind(n);
    if (n < 0 || n > length_ || (n > 0 && n < floor))  // 0 always works: it is a clear
      REFUSED(st.code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(st.ok());
    if (n == 0) return clear();
    length_ = n;
    ASSERT_FALSE(s().step_open());
  }

  // What a byte layer's checkpoint copies: the lookback runs of every layer, which must hold
  // positions [max(0, L - W + 1), L) of a sliding layer in order, and nothing of a full one.
  void checkpoint() {
    Saved saved{length_, {}};
    for (size_t l = 0; l < layers_.size(); ++l) {
      const SlotRuns back = s().lookback(static_cast<int32_t>(l));
      const std::vector<int64_t> slots = expand(back.runs, back.n);
      const int64_t lo =
          layers_[l].sliding() ? std::max<int64_t>(0, length_ - layers_[l].window + 1) : length_;
      if (layers_[l].sliding()) {
        ASSERT_EQ(back.first, lo);
      }
      ASSERT_EQ(static_cast<int64_t>(slots.size()), length_ - lo) << describe();
      std::vector<int64_t> held;
      for (size_t j = 0; j < slots.size(); ++j) {
        ASSERT_EQ(slots_[l][slots[j]], lo + static_cast<int64_t>(j)) << describe();
        held.push_back(slots_[l][slots[j]]);
      }
      saved.positions.push_back(held);
    }
    saved_ = saved;
  }

  // restore() to the checkpoint's length, then the saved positions go back to the lookback
  // slots; the rings are known to hold only those afterwards.
  void restore() {
    if (!saved_) return;
    Status st = s().restore(saved_->at);
    if (saved_->at > length_) REFUSED(st.code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(st.ok());
    length_ = saved_->at;
    ASSERT_FALSE(s().step_open());
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!layers_[l].sliding()) continue;
      std::fill(slots_[l].begin(), slots_[l].end(), -1);
      const SlotRuns back = s().lookback(static_cast<int32_t>(l));
      const std::vector<int64_t> slots = expand(back.runs, back.n);
      ASSERT_EQ(slots.size(), saved_->positions[l].size());
      for (size_t j = 0; j < slots.size(); ++j) slots_[l][slots[j]] = saved_->positions[l][j];
    }
  }

  void clear() {
    s().clear();
    length_ = 0;
    for (auto& v : slots_) std::fill(v.begin(), v.end(), -1);
  }

  // plan() is pure: random arguments, the state must not move.
  void pure_plan() {
    const auto layer = static_cast<int32_t>(rng_.range(-1, static_cast<int64_t>(layers_.size())));
    const int64_t start = rng_.range(-1, config_.capacity);
    const auto n = static_cast<int32_t>(rng_.range(-1, limit_ + 1));
    auto r = s().plan(layer, start, n);
    const bool ok = layer >= 0 && layer < static_cast<int32_t>(layers_.size()) && n > 0 &&
                    n <= limit_ && start >= 0 && start + n <= config_.capacity;
    ASSERT_EQ(r.ok(), ok);
    if (!ok) {
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }

  // Expands runs into slots.
  static std::vector<int64_t> expand(const std::array<SlotRun, 2>& runs, int32_t n) {
    std::vector<int64_t> out;
    for (int32_t i = 0; i < n; ++i)
      for (int64_t x = runs[i].begin; x < runs[i].end; ++x) out.push_back(x);
    return out;
  }

  void step() {
    const auto n = static_cast<int32_t>(rng_.range(-1, limit_ + 1));
    Status d = s().declare_step(n);
    if (n <= 0 || n > limit_) REFUSED(d.code(), StatusCode::kInvalidArgument);
    if (length_ + n > config_.capacity)
      REFUSED(d.code(), StatusCode::kResourceExhausted);
    ASSERT_TRUE(d.ok());
    const int64_t start = length_;
    std::vector<int32_t> order(layers_.size());
    for (size_t l = 0; l < order.size(); ++l) order[l] = static_cast<int32_t>(l);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<uint32_t>(rng_.range(0, 1 << 30))));
    for (int32_t layer : order) {
      auto p = s().place(layer);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      if (length_ != start + n) {  // the step's first placement commits every layer's writes
        for (size_t l = 0; l < layers_.size(); ++l)
          for (int32_t i = 0; i < n; ++i) slots_[l][slot_of(l, start + i)] = start + i;
      }
      length_ = start + n;
      ASSERT_EQ(s().length(), length_);
      check_plan(static_cast<size_t>(layer), *p, start, n);
      auto again = s().placed(layer);
      ASSERT_TRUE(again.ok());
      ASSERT_EQ(again->write, p->write);
      ASSERT_EQ(again->read, p->read);
      if (rng_.chance(5)) {
        ASSERT_EQ(s().place(layer).status().code(), StatusCode::kFailedPrecondition);
      }
      if (rng_.chance(3)) {  // a verb between layers ends the step
        rewind();
        for (int32_t l = 0; l < static_cast<int32_t>(layers_.size()); ++l) {
          if (!s().step_open()) {
            ASSERT_EQ(s().place(l).status().code(), StatusCode::kFailedPrecondition);
          }
        }
        return;
      }
    }
  }

  // Writes land at the model's slots; every position read is held once the step is written.
  void check_plan(size_t layer, const SequencePlan& p, int64_t start, int32_t n) {
    const LayerGeometry& l = layers_[layer];
    ASSERT_EQ(p.start, start);
    ASSERT_EQ(p.n_tokens, n);
    ASSERT_EQ(p.slots, ring(l));
    const std::vector<int64_t> writes = expand(p.write, p.n_write);
    ASSERT_EQ(writes.size(), static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) ASSERT_EQ(writes[i], slot_of(layer, start + i));
    const int64_t read_begin = l.sliding() ? std::max<int64_t>(0, start - l.window + 1) : 0;
    ASSERT_EQ(p.read_begin, read_begin);
    const std::vector<int64_t> reads = expand(p.read, p.n_read);
    ASSERT_EQ(static_cast<int64_t>(reads.size()), start + n - read_begin);
    for (size_t i = 0; i < reads.size(); ++i) {
      const int64_t pos = read_begin + static_cast<int64_t>(i);
      ASSERT_EQ(reads[i], slot_of(layer, pos));
      ASSERT_EQ(slots_[layer][reads[i]], pos) << "layer " << layer << " lost position " << pos;
    }
    // visible(): query i reads positions max(0, p - W + 1)..p (0..p on a full layer), each in
    // the slot the model wrote it to.
    const auto li = static_cast<int32_t>(layer);
    for (int32_t i = 0; i < n; ++i) {
      const int64_t pos = start + i;
      const int64_t lo = l.sliding() ? std::max<int64_t>(0, pos - l.window + 1) : 0;
      Result<SlotRuns> vis = s().visible(li, pos);
      ASSERT_TRUE(vis.ok()) << vis.status().to_string() << " " << describe();
      ASSERT_EQ(vis->first, lo);
      const std::vector<int64_t> seen = expand(vis->runs, vis->n);
      ASSERT_EQ(static_cast<int64_t>(seen.size()), pos - lo + 1) << describe();
      for (size_t j = 0; j < seen.size(); ++j) {
        ASSERT_EQ(seen[j], s().slot(li, lo + static_cast<int64_t>(j)));
        ASSERT_EQ(slots_[layer][seen[j]], lo + static_cast<int64_t>(j))
            << "layer " << layer << " query " << pos << " " << describe();
      }
    }
    ASSERT_EQ(s().visible(li, length_).status().code(), StatusCode::kOutOfRange);
  }

  void check() {
    ASSERT_EQ(s().length(), length_);
    ASSERT_EQ(s().step_limit(), limit_);
    ASSERT_EQ(s().can_extend(1), length_ + 1 <= config_.capacity && limit_ >= 1);
  }

  Rng rng_;
  std::vector<LayerGeometry> layers_;
  CacheConfig config_;
  std::optional<SequenceLayout> layout_;
  int64_t length_ = 0;
  int64_t limit_ = 0;
  std::vector<std::vector<int64_t>> slots_;  // per layer, per slot: position held, -1 = none
  struct Saved {
    int64_t at = 0;                              // the length at the checkpoint
    std::vector<std::vector<int64_t>> positions;  // per layer: the lookback positions copied
  };
  std::optional<Saved> saved_;
};

TEST(SequenceLayoutProperty, RandomStepsAndRewindsMatchTheModel) {
  SequenceProperty p(0x73657175656e6365ULL);
  p.run(ops_per_layout());
}

}  // namespace
}  // namespace kvcache
