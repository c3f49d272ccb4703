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

// The model: (seq, pos) -> cell, plus the set of live ids. Everything else is derived naively.
struct CellModel {
  int64_t capacity = 0;
  int32_t max_seqs = 0;
  std::set<int32_t> live;
  std::map<std::pair<int32_t, int64_t>, int32_t> cell_of;

  int64_t pos(int32_t s) const {
    int64_t n = 0;
    while (cell_of.count({s, n})) ++n;
    return n;
  }
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
  int32_t lowest_free_cell(const std::set<int32_t>& used) const {
    int32_t c = 0;
    while (used.count(c)) ++c;
    return c;
  }
  int32_t lowest_free_id() const {
    int32_t id = 0;
    while (live.count(id)) ++id;
    return id < max_seqs ? id : -1;
  }
  void drop_from(int32_t s, int64_t p) {
    for (auto it = cell_of.begin(); it != cell_of.end();)
      it = (it->first.first == s && it->first.second >= p) ? cell_of.erase(it) : std::next(it);
  }
  // Cells a query (s, p) sees with window w, oldest first: every (s, q) entry with q <= p
  // and, for a window, q > p - w (the SPEC's definition, read off the ordered map).
  std::vector<int32_t> visible(int32_t s, int64_t p, int32_t w) const {
    std::vector<int32_t> out;
    for (auto it = cell_of.lower_bound({s, INT64_MIN}); it != cell_of.end(); ++it) {
      const auto [seq, q] = it->first;
      if (seq != s || q > p) break;
      if (w == 0 || q > p - w) out.push_back(it->second);
    }
    return out;
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
    model_ = CellModel{c.capacity, max_seqs, {}, {}};
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
      model_.cell_of.clear();
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
    model_.live.insert(want);
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
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, want);
    model_.live.insert(want);
    const int64_t n = std::min(model_.pos(src), upto.value_or(INT64_MAX));
    for (int64_t p = 0; p < n; ++p) model_.cell_of[{want, p}] = model_.cell_of.at({src, p});
  }

  void seq_rm() {
    const int32_t s = any_id();
    Status st = c().seq_rm(s);
    if (!model_.live.count(s)) REFUSED(st.code(), StatusCode::kNotFound);
    ASSERT_TRUE(st.ok());
    model_.live.erase(s);
    model_.drop_from(s, 0);
  }

  void rewind() {
    const int32_t s = any_id();
    const int64_t p = rng_.range(-1, model_.pos(s) + 1);
    Status st = c().rewind(s, p);
    if (!model_.live.count(s)) REFUSED(st.code(), StatusCode::kNotFound);
    if (p < 0 || p > model_.pos(s)) REFUSED(st.code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(st.ok());
    model_.drop_from(s, p);
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
    std::set<int32_t> used = model_.occupied();
    if (static_cast<int64_t>(ids.size()) > model_.capacity - static_cast<int64_t>(used.size()))
      REFUSED(d.code(), StatusCode::kResourceExhausted);
    ASSERT_TRUE(d.ok()) << d.to_string();

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
        for (size_t i = 0; i < ids.size(); ++i) {
          const int32_t cell = model_.lowest_free_cell(used);
          used.insert(cell);
          model_.cell_of[{ids[i], pos[i]}] = cell;
        }
        placed_any = true;
      }
      for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ((*r)[i], model_.cell_of.at({ids[i], pos[i]}));
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

  void check_visible(int32_t layer, const std::vector<int32_t>& ids,
                     const std::vector<int64_t>& pos) {
    const int32_t w = layers_[static_cast<size_t>(layer)].window;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto v = c().visible(layer, static_cast<int32_t>(i));
      ASSERT_TRUE(v.ok());
      const std::vector<int32_t> want = model_.visible(ids[i], pos[i], w);
      ASSERT_EQ(std::vector<int32_t>(v->begin(), v->end()), want)
          << "layer " << layer << " token " << i;
      ASSERT_EQ(c().visible_first_pos(layer, static_cast<int32_t>(i)),
                w == 0 ? 0 : std::max<int64_t>(0, pos[i] - w + 1));
    }
  }

  void check() {
    const std::set<int32_t> used = model_.occupied();
    ASSERT_EQ(c().free_cells(), model_.capacity - static_cast<int64_t>(used.size()));
    ASSERT_EQ(c().used_end(), used.empty() ? 0 : *used.rbegin() + 1);
    std::vector<int32_t> owners(static_cast<size_t>(model_.capacity), 0);
    std::vector<int64_t> position(static_cast<size_t>(model_.capacity), -1);
    for (const auto& [k, v] : model_.cell_of) {
      ++owners[v];
      if (position[v] >= 0) {
        ASSERT_EQ(position[v], k.second) << "cell " << v << " holds two positions";
      }
      position[v] = k.second;
    }
    for (int32_t cell = 0; cell < model_.capacity; ++cell) {
      ASSERT_EQ(c().cell_owners(cell), owners[cell]) << "cell " << cell;
      ASSERT_EQ(c().cell_pos(cell), position[cell]) << "cell " << cell;
    }
    // One pass over the ordered map: each sequence's cells by position, which must run
    // 0, 1, 2, ... with no gap (positions continuous).
    std::map<int32_t, std::vector<int32_t>> cells_of;
    for (const auto& [k, v] : model_.cell_of) {
      std::vector<int32_t>& cells = cells_of[k.first];
      ASSERT_EQ(k.second, static_cast<int64_t>(cells.size())) << "seq " << k.first << " gap";
      cells.push_back(v);
    }
    for (int32_t s = -1; s <= model_.max_seqs; ++s) {
      ASSERT_EQ(c().live(s), model_.live.count(s) == 1) << "seq " << s;
      const std::vector<int32_t>& cells = cells_of[s];
      ASSERT_EQ(c().pos(s), static_cast<int64_t>(cells.size()));
      ASSERT_EQ(c().seq_len(s), static_cast<int64_t>(cells.size()));
      auto got = c().seq_cells(s);
      ASSERT_EQ(std::vector<int32_t>(got.begin(), got.end()), cells);
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
// there). A plan is checked by expanding its runs slot by slot.
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
    if (n < floor || n > length_) REFUSED(st.code(), StatusCode::kOutOfRange);
    ASSERT_TRUE(st.ok());
    length_ = n;
    ASSERT_FALSE(s().step_open());
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
};

TEST(SequenceLayoutProperty, RandomStepsAndRewindsMatchTheModel) {
  SequenceProperty p(0x73657175656e6365ULL);
  p.run(ops_per_layout());
}

}  // namespace
}  // namespace kvcache
