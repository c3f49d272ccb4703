#include "core/cell_layout.h"

#include <algorithm>
#include <string>

#include "core/bit_tree.h"
#include "core/str_cat.h"

namespace kvcache {
namespace {

// One sequence's cells in one pool: positions [low, low + size()) at cells[head...].
// Trimming the front advances head; the vector is compacted once half of it is dead.
struct Held {
  std::vector<int32_t> cells;
  size_t head = 0;
  int64_t low = 0;  // position of cells[head]

  int64_t size() const { return static_cast<int64_t>(cells.size() - head); }
  std::span<const int32_t> view() const { return std::span<const int32_t>(cells).subspan(head); }
  int32_t at(int64_t p) const { return cells[head + static_cast<size_t>(p - low)]; }
  void reset() {
    cells.clear();
    head = 0;
    low = 0;
  }
};

struct Sequence {
  bool live = false;
  int64_t next = 0;        // next position
  std::vector<Held> held;  // per pool
};

// One pool's cells. Cells [0, cell_pos.size()) have metadata; cells beyond it are free and
// never touched.
struct Pool {
  CellPool spec;
  std::vector<int64_t> cell_pos;     // per cell; -1 = free
  std::vector<int32_t> cell_owners;  // per cell; 0 = free
  BitTree free_cells;                // free cells among those with metadata
  BitTree used_cells;                // occupied cells
  int64_t n_used = 0;
  std::vector<int32_t> step_cells;   // the open step's cells, one per token; empty until placed
  int64_t pending_free = 0;          // cells the end of the placed step frees
  std::vector<int32_t> drops;        // scratch per cell for counting pending_free

  int64_t free() const { return spec.cells - n_used; }

  // Grow metadata (doubling, clamped to the pool's maximum) so a free cell exists.
  void grow() {
    const int64_t old_n = static_cast<int64_t>(cell_pos.size());
    const int64_t n = std::min<int64_t>(spec.cells, std::max<int64_t>(64, 2 * old_n));
    cell_pos.resize(n, -1);
    cell_owners.resize(n, 0);
    drops.resize(n, 0);
    free_cells.resize(n);
    used_cells.resize(n);
    for (int64_t c = old_n; c < n; ++c) free_cells.set(c);
  }

  int32_t claim(int64_t position) {
    if (free_cells.first() < 0) grow();
    const int64_t c = free_cells.first();
    free_cells.reset(c);
    used_cells.set(c);
    cell_pos[c] = position;
    cell_owners[c] = 1;
    ++n_used;
    return static_cast<int32_t>(c);
  }

  void drop_owner(int32_t c) {
    if (--cell_owners[c] > 0) return;
    cell_pos[c] = -1;
    used_cells.reset(c);
    free_cells.set(c);
    --n_used;
  }
};


std::string pool_name(const CellPool& p) {
  std::string layers;
  for (int32_t l : p.layers) layers += str_cat(layers.empty() ? "" : ", ", l);
  return str_cat(p.window > 0 ? str_cat("sliding(", p.window, ")") : std::string("full"),
                 " pool (layers ", layers, ")");
}

}  // namespace

struct CellLayout::State {
  CacheGeometry geometry;
  CacheConfig config;
  int32_t max_seqs = 0;
  std::vector<Pool> pools;
  std::vector<int32_t> layer_pool;  // per layer

  // Ids [0, seqs.size()) have been issued at some point; free ones are in free_ids.
  std::vector<Sequence> seqs;
  BitTree free_ids;
  int32_t n_live = 0;

  // The open step. Empty step_ids = no declaration (or a verb ended it).
  std::vector<int32_t> step_ids;
  std::vector<int64_t> step_pos;    // placed positions, one per token
  std::vector<char> placed;         // per layer
  // Scratch: next position per sequence within the step; stamps mark sequences seen.
  std::vector<int64_t> scratch_next;
  std::vector<uint32_t> scratch_stamp;
  uint32_t stamp = 0;
  std::vector<int32_t> touched;     // scratch: cells counted in count_pending_free

  bool step_placed() const { return !step_pos.empty(); }

  // A fresh stamp for marking sequences once per pass over the step's tokens.
  uint32_t next_stamp() {
    if (++stamp == 0) {  // wrapped: forget every old stamp
      std::fill(scratch_stamp.begin(), scratch_stamp.end(), 0);
      stamp = 1;
    }
    if (scratch_next.size() < seqs.size()) {
      scratch_next.resize(seqs.size(), 0);
      scratch_stamp.resize(seqs.size(), 0);
    }
    return stamp;
  }

  // Frees a sliding pool's cells of `seq` that no future query can see.
  void trim(int32_t seq, size_t g) {
    Pool& pool = pools[g];
    Held& h = seqs[seq].held[g];
    const int64_t keep = first_visible(pool.spec.window, seqs[seq].next);
    while (h.low < keep && h.size() > 0) {
      pool.drop_owner(h.cells[h.head++]);
      ++h.low;
    }
    if (h.head > 32 && 2 * h.head > h.cells.size()) {
      h.cells.erase(h.cells.begin(), h.cells.begin() + static_cast<std::ptrdiff_t>(h.head));
      h.head = 0;
    }
  }

  // The step is over (a verb or the next declaration): the sliding pools forget what only its
  // queries could see.
  void end_step() {
    if (step_placed())
      for (size_t g = 0; g < pools.size(); ++g)
        if (pools[g].spec.window > 0)
          for (int32_t seq : step_ids) trim(seq, g);
    step_ids.clear();
    step_pos.clear();
    for (Pool& p : pools) {
      p.step_cells.clear();
      p.pending_free = 0;
    }
    std::fill(placed.begin(), placed.end(), 0);
  }

  // Cells the end of the just-placed step frees in sliding pool g: a cell frees when every
  // owner drops it. Counted with per-cell scratch; O(cells dropped).
  int64_t count_pending_free(size_t g) {
    Pool& pool = pools[g];
    const uint32_t st = next_stamp();
    touched.clear();
    int64_t freed = 0;
    for (int32_t seq : step_ids) {
      if (scratch_stamp[seq] == st) continue;
      scratch_stamp[seq] = st;
      const Held& h = seqs[seq].held[g];
      const int64_t keep = first_visible(pool.spec.window, seqs[seq].next);
      for (int64_t p = h.low; p < keep && p < h.low + h.size(); ++p) {
        const int32_t c = h.at(p);
        if (pool.drops[c]++ == 0) touched.push_back(c);
        if (pool.drops[c] == pool.cell_owners[c]) ++freed;
      }
    }
    for (int32_t c : touched) pool.drops[c] = 0;
    return freed;
  }

  bool live(int32_t seq) const {
    return seq >= 0 && static_cast<size_t>(seq) < seqs.size() && seqs[seq].live;
  }

  int64_t pos(int32_t seq) const { return live(seq) ? seqs[seq].next : 0; }

  // Drop the sequence's positions >= p in every pool. Needs p >= the held low of each
  // sliding pool that holds anything before p, or p == 0.
  void truncate(int32_t seq, int64_t p) {
    Sequence& s = seqs[seq];
    for (size_t g = 0; g < pools.size(); ++g) {
      Held& h = s.held[g];
      const int64_t from = std::max(p, h.low);
      for (int64_t q = from; q < h.low + h.size(); ++q) pools[g].drop_owner(h.at(q));
      if (p <= h.low) h.reset();
      else h.cells.resize(h.head + static_cast<size_t>(p - h.low));
      if (h.size() == 0) h.low = p;
    }
    s.next = p;
  }

  // The sliding pool where `seq` no longer holds the W - 1 positions before p (0 <= p <=
  // its next): during an open step it may still hold more than between steps. -1 when none.
  int32_t missing_held(int32_t seq, int64_t p) const {
    if (p == 0) return -1;
    for (size_t g = 0; g < pools.size(); ++g) {
      const int32_t w = pools[g].spec.window;
      const Held& h = seqs[seq].held[g];
      if (w > 1 && first_visible(w, p) < (h.size() > 0 ? h.low : p)) return static_cast<int32_t>(g);
    }
    return -1;
  }

  // The lowest position `seq` holds in pool g (its next position when it holds none there).
  int64_t held_low(int32_t seq, size_t g) const {
    const Held& h = seqs[seq].held[g];
    return h.size() > 0 ? h.low : seqs[seq].next;
  }

  // Token i's position must be its sequence's next one, advancing within the step. Only the
  // scratch counters change.
  Status check_positions(std::span<const int64_t> positions) {
    const uint32_t st = next_stamp();
    for (size_t i = 0; i < positions.size(); ++i) {
      const int32_t seq = step_ids[i];
      if (scratch_stamp[seq] != st) {
        scratch_stamp[seq] = st;
        scratch_next[seq] = pos(seq);
      }
      const int64_t expected = scratch_next[seq]++;
      if (positions[i] != expected)
        return invalid_argument(str_cat("cell_layout.place: token ", i, " of sequence ", seq,
                                        " at position ", positions[i], ", expected ", expected,
                                        " (the sequence's next position)"));
    }
    return ok_status();
  }

  bool id_available() const {
    return free_ids.first() >= 0 || seqs.size() < static_cast<size_t>(max_seqs);
  }

  // Lowest free id, -1 when max_seqs ids are live.
  int32_t take_id() {
    int64_t id = free_ids.first();
    if (id < 0) {
      if (seqs.size() >= static_cast<size_t>(max_seqs)) return -1;
      id = static_cast<int64_t>(seqs.size());
      seqs.emplace_back();
      seqs.back().held.resize(pools.size());
      if (free_ids.size() < id + 1)  // room for later releases; doubling keeps growth cheap
        free_ids.resize(std::min<int64_t>(max_seqs, std::max<int64_t>(64, 2 * id)));
    } else {
      free_ids.reset(id);
    }
    seqs[id].live = true;
    seqs[id].next = 0;
    ++n_live;
    return static_cast<int32_t>(id);
  }

  void init(CacheGeometry g, const CacheConfig& c) {
    geometry = std::move(g);
    config = c;
    max_seqs = cell_max_seqs(c);
    placed.assign(geometry.layers.size(), 0);
    layer_pool.assign(geometry.layers.size(), 0);
    for (const CellPool& spec : cell_pools(geometry, config)) {
      for (int32_t l : spec.layers)
        layer_pool[static_cast<size_t>(l)] = static_cast<int32_t>(pools.size());
      pools.push_back(Pool{});
      pools.back().spec = spec;
    }
  }
};

CellLayout::CellLayout(std::unique_ptr<State> state) : s_(std::move(state)) {}
CellLayout::CellLayout(CellLayout&&) noexcept = default;
CellLayout& CellLayout::operator=(CellLayout&&) noexcept = default;
CellLayout::~CellLayout() = default;

Result<CellLayout> CellLayout::create(const CacheGeometry& geometry, const CacheConfig& config) {
  KVCACHE_RETURN_IF_ERROR(validate(geometry, config, "cell_layout.create"));
  auto s = std::make_unique<State>();
  CacheConfig c = config;
  c.max_seqs = cell_max_seqs(config);
  s->init(geometry, c);
  return CellLayout(std::move(s));
}

Result<CellLayout> CellLayout::create(const CacheGeometry& geometry, const CacheConfig& config,
                                      int32_t max_seqs) {
  CacheConfig c = config;
  c.max_seqs = max_seqs;
  return create(geometry, c);
}

const CacheGeometry& CellLayout::geometry() const { return s_->geometry; }
const CacheConfig& CellLayout::config() const { return s_->config; }
int32_t CellLayout::n_layers() const { return static_cast<int32_t>(s_->geometry.layers.size()); }

// ---- sequence verbs ----

Result<int32_t> CellLayout::seq_new() {
  if (!s_->id_available())
    return resource_exhausted(str_cat("cell_layout.seq_new: all ", s_->max_seqs,
                                      " sequence ids are live (seq_rm one first)"));
  s_->end_step();
  return s_->take_id();
}

Result<int32_t> CellLayout::seq_clone(int32_t src, std::optional<int64_t> upto) {
  State& s = *s_;
  if (!s.live(src))
    return not_found(str_cat("cell_layout.seq_clone: source sequence ", src, " is not live"));
  if (upto && *upto < 0)
    return invalid_argument(str_cat("cell_layout.seq_clone: upto = ", *upto, ", expected >= 0"));
  if (!s.id_available())
    return resource_exhausted(str_cat("cell_layout.seq_clone: all ", s.max_seqs,
                                      " sequence ids are live (seq_rm one first)"));
  const int64_t next = s.seqs[src].next;
  const int64_t n = upto ? std::min(next, *upto) : next;
  if (const int32_t g = s.missing_held(src, n); g >= 0) {
    const int32_t w = s.pools[g].spec.window;
    const Held& h = s.seqs[src].held[g];
    return out_of_range(str_cat("cell_layout.seq_clone: sequence ", src, " up to position ", n,
                                ": the ", pool_name(s.pools[g].spec), " holds its positions ",
                                h.size() > 0 ? h.low : next, "..", next - 1,
                                " only, the clone needs ", first_visible(w, n), "..", n - 1));
  }
  const int32_t id = s.take_id();
  for (size_t g = 0; g < s.pools.size(); ++g) {
    const Held& from = s.seqs[src].held[g];
    Held& to = s.seqs[id].held[g];
    to.reset();
    to.low = first_visible(s.pools[g].spec.window, n);
    for (int64_t p = to.low; p < n; ++p) {
      to.cells.push_back(from.at(p));
      ++s.pools[g].cell_owners[to.cells.back()];
    }
    if (to.size() == 0) to.low = n;
  }
  s.seqs[id].next = n;
  // The clone now owns cells the open step's end would have freed: count them again.
  if (s.step_placed())
    for (size_t g = 0; g < s.pools.size(); ++g)
      if (s.pools[g].spec.window > 0) s.pools[g].pending_free = s.count_pending_free(g);
  return id;
}

Status CellLayout::seq_rm(int32_t seq) {
  if (!s_->live(seq))
    return not_found(str_cat("cell_layout.seq_rm: sequence ", seq, " is not live"));
  s_->end_step();
  s_->truncate(seq, 0);
  for (Held& h : s_->seqs[seq].held) h.cells.shrink_to_fit();
  s_->seqs[seq].live = false;
  s_->free_ids.set(seq);
  --s_->n_live;
  return ok_status();
}

Status CellLayout::rewind(int32_t seq, int64_t pos) {
  KVCACHE_RETURN_IF_ERROR(
      rewind_many(std::span<const int32_t>(&seq, 1), std::span<const int64_t>(&pos, 1)));
  s_->end_step();  // the step's end trims against the new position
  return ok_status();
}

Status CellLayout::rewind_many(std::span<const int32_t> seqs, std::span<const int64_t> positions) {
  State& s = *s_;
  if (seqs.size() != positions.size())
    return invalid_argument(str_cat("cell_layout.rewind: ", static_cast<int64_t>(seqs.size()),
                                    " sequences and ", static_cast<int64_t>(positions.size()),
                                    " positions, expected one position per sequence"));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int32_t seq = seqs[i];
    const int64_t pos = positions[i];
    if (!s.live(seq))
      return not_found(str_cat("cell_layout.rewind: sequence ", seq, " is not live"));
    if (std::find(seqs.begin(), seqs.begin() + static_cast<std::ptrdiff_t>(i), seq) !=
        seqs.begin() + static_cast<std::ptrdiff_t>(i))
      return invalid_argument(str_cat("cell_layout.rewind: sequence ", seq,
                                      " named twice, expected each at most once"));
    const int64_t end = s.pos(seq);
    if (pos < 0 || pos > end)
      return out_of_range(str_cat("cell_layout.rewind: sequence ", seq, " to position ", pos,
                                  ", expected 0..", end, " (rewind never grows)"));
    // What is held, not what a step's end keeps: while the step that wrote the last positions
    // is open the pools still hold the window its start needed, so its tokens can be taken
    // back (a speculative step's rejected drafts).
    if (const int32_t g = s.missing_held(seq, pos); g >= 0) {
      const int32_t w = s.pools[g].spec.window;
      return out_of_range(str_cat("cell_layout.rewind: sequence ", seq, " to position ", pos,
                                  ": the ", pool_name(s.pools[g].spec), " holds its positions ",
                                  s.held_low(seq, static_cast<size_t>(g)), "..", end - 1,
                                  " only, position ", pos, " needs ", first_visible(w, pos), "..",
                                  pos - 1, " (rewind to 0 always works)"));
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) s.truncate(seqs[i], positions[i]);
  // A placed step stays open (its end trims against the new positions; until then clones of
  // its other sequences may still be taken); what that end frees is counted again. A step
  // only declared ends: its positions no longer continue the sequences.
  if (!s.step_placed()) {
    s.end_step();
    return ok_status();
  }
  for (size_t g = 0; g < s.pools.size(); ++g)
    if (s.pools[g].spec.window > 0) s.pools[g].pending_free = s.count_pending_free(g);
  return ok_status();
}

void CellLayout::clear() {
  auto fresh = std::make_unique<State>();
  fresh->init(std::move(s_->geometry), s_->config);
  s_ = std::move(fresh);
}

// ---- queries ----

bool CellLayout::live(int32_t seq) const { return s_->live(seq); }
int64_t CellLayout::pos(int32_t seq) const { return s_->pos(seq); }
int64_t CellLayout::seq_len(int32_t seq) const { return s_->pos(seq); }
int32_t CellLayout::max_seqs() const { return s_->max_seqs; }
int64_t CellLayout::capacity() const { return s_->config.capacity; }

int64_t CellLayout::free_cells() const {
  int64_t n = s_->config.capacity;
  for (const Pool& p : s_->pools) n = std::min(n, p.free() + p.pending_free);
  return n;
}

int64_t CellLayout::used_end() const { return pool_used_end(0); }
int64_t CellLayout::cell_pos(int32_t cell) const { return cell_pos(0, cell); }
int32_t CellLayout::cell_owners(int32_t cell) const { return cell_owners(0, cell); }
std::span<const int32_t> CellLayout::seq_cells(int32_t seq) const { return held(seq, 0); }

int32_t CellLayout::n_pools() const { return static_cast<int32_t>(s_->pools.size()); }

int32_t CellLayout::pool_of(int32_t layer) const {
  return layer >= 0 && layer < n_layers() ? s_->layer_pool[layer] : -1;
}

const CellPool& CellLayout::pool(int32_t pool) const { return s_->pools.at(pool).spec; }
int64_t CellLayout::pool_free(int32_t pool) const { return s_->pools.at(pool).free(); }
int64_t CellLayout::pool_room(int32_t pool) const {
  const Pool& p = s_->pools.at(pool);
  return p.free() + p.pending_free;
}
int64_t CellLayout::pool_used_end(int32_t pool) const {
  return s_->pools.at(pool).used_cells.last() + 1;
}

int64_t CellLayout::cell_pos(int32_t pool, int32_t cell) const {
  const Pool& p = s_->pools.at(pool);
  if (cell < 0 || static_cast<size_t>(cell) >= p.cell_pos.size()) return -1;
  return p.cell_pos[cell];
}

int32_t CellLayout::cell_owners(int32_t pool, int32_t cell) const {
  const Pool& p = s_->pools.at(pool);
  if (cell < 0 || static_cast<size_t>(cell) >= p.cell_owners.size()) return 0;
  return p.cell_owners[cell];
}

std::span<const int32_t> CellLayout::held(int32_t seq, int32_t pool) const {
  if (!s_->live(seq) || pool < 0 || pool >= n_pools()) return {};
  return s_->seqs[seq].held[pool].view();
}

int64_t CellLayout::held_first_pos(int32_t seq, int32_t pool) const {
  if (!s_->live(seq) || pool < 0 || pool >= n_pools()) return 0;
  return s_->seqs[seq].held[pool].low;
}

int64_t CellLayout::kept_from(int32_t seq, int32_t pool) const {
  if (!s_->live(seq) || pool < 0 || pool >= n_pools()) return 0;
  return std::max(held_first_pos(seq, pool),
                  first_visible(s_->pools[pool].spec.window, s_->pos(seq)));
}

// ---- a step ----

Status CellLayout::declare_step(std::span<const int32_t> seq_ids) {
  State& s = *s_;
  if (seq_ids.empty())
    return invalid_argument("cell_layout.declare_step: no tokens, expected at least one id");
  for (size_t i = 0; i < seq_ids.size(); ++i)
    if (!s.live(seq_ids[i]))
      return not_found(str_cat("cell_layout.declare_step: token ", i, " names sequence ",
                               seq_ids[i], ", which is not live"));
  const auto n = static_cast<int64_t>(seq_ids.size());
  for (const Pool& p : s.pools) {
    const int64_t room = p.free() + p.pending_free;
    if (n <= room) continue;
    if (p.spec.window == 0)
      return resource_exhausted(str_cat("cell_layout.declare_step: ", n, " tokens, but only ", room,
                                        " of ", p.spec.cells, " cells are free"));
    return resource_exhausted(str_cat("cell_layout.declare_step: ", n, " tokens, but the ",
                                      pool_name(p.spec), " has only ", room, " of ", p.spec.cells,
                                      " cells free"));
  }
  s.end_step();
  s.step_ids.assign(seq_ids.begin(), seq_ids.end());
  return ok_status();
}

bool CellLayout::step_open() const { return !s_->step_ids.empty(); }
std::span<const int32_t> CellLayout::step_seq_ids() const { return s_->step_ids; }
std::span<const int32_t> CellLayout::step_cells() const { return s_->pools[0].step_cells; }

std::span<const int32_t> CellLayout::step_cells(int32_t layer) const {
  const int32_t g = pool_of(layer);
  if (g < 0) return {};
  return s_->pools[g].step_cells;
}

bool CellLayout::placed(int32_t layer) const {
  return layer >= 0 && layer < n_layers() && s_->placed[layer] != 0;
}

Result<std::span<const int32_t>> CellLayout::place(int32_t layer,
                                                  std::span<const int64_t> positions) {
  State& s = *s_;
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("cell_layout.place: layer ", layer, ", expected 0..", n_layers() - 1));
  if (s.step_ids.empty())
    return failed_precondition(str_cat("cell_layout.place: layer ", layer,
                                       " has no declared step (declare_step first; a sequence verb "
                                       "ends the step)"));
  if (s.placed[layer])
    return failed_precondition(
        str_cat("cell_layout.place: layer ", layer,
                " was already placed in this step (declare the next step first)"));
  if (positions.size() != s.step_ids.size())
    return invalid_argument(str_cat("cell_layout.place: ", positions.size(),
                                    " positions, expected ", s.step_ids.size(),
                                    " (one per declared token)"));
  Pool& mine = s.pools[s.layer_pool[layer]];
  if (s.step_placed()) {
    for (size_t i = 0; i < positions.size(); ++i)
      if (positions[i] != s.step_pos[i])
        return invalid_argument(str_cat("cell_layout.place: layer ", layer, " token ", i,
                                        " at position ", positions[i], ", expected ", s.step_pos[i],
                                        " (the step's placed position)"));
    s.placed[layer] = 1;
    return std::span<const int32_t>(mine.step_cells);
  }
  KVCACHE_RETURN_IF_ERROR(s.check_positions(positions));
  s.step_pos.assign(positions.begin(), positions.end());
  for (Pool& pool : s.pools) pool.step_cells.reserve(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    Sequence& seq = s.seqs[s.step_ids[i]];
    for (size_t g = 0; g < s.pools.size(); ++g) {
      const int32_t cell = s.pools[g].claim(positions[i]);
      Held& h = seq.held[g];
      if (h.size() == 0) h.low = positions[i];
      h.cells.push_back(cell);
      s.pools[g].step_cells.push_back(cell);
    }
    ++seq.next;
  }
  for (size_t g = 0; g < s.pools.size(); ++g)
    if (s.pools[g].spec.window > 0) s.pools[g].pending_free = s.count_pending_free(g);
  s.placed[layer] = 1;
  return std::span<const int32_t>(mine.step_cells);
}

Result<std::span<const int32_t>> CellLayout::visible(int32_t layer, int32_t token) const {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("cell_layout.visible: layer ", layer, ", expected 0..", n_layers() - 1));
  if (!s_->placed[layer])
    return failed_precondition(
        str_cat("cell_layout.visible: layer ", layer, " is not placed in the current step"));
  if (token < 0 || static_cast<size_t>(token) >= s_->step_ids.size())
    return invalid_argument(str_cat("cell_layout.visible: token ", token, ", expected 0..",
                                    static_cast<int64_t>(s_->step_ids.size()) - 1));
  const Held& h = s_->seqs[s_->step_ids[token]].held[s_->layer_pool[layer]];
  const int64_t first = visible_first_pos(layer, token);
  const int64_t p = s_->step_pos[token];
  return h.view().subspan(static_cast<size_t>(first - h.low),
                          static_cast<size_t>(p - first + 1));
}

int64_t CellLayout::visible_first_pos(int32_t layer, int32_t token) const {
  if (!placed(layer) || token < 0 || static_cast<size_t>(token) >= s_->step_pos.size())
    return -1;
  return first_visible(s_->geometry.layers[layer].window, s_->step_pos[token]);
}

}  // namespace kvcache
