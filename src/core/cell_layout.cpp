#include "core/cell_layout.h"

#include <algorithm>
#include <string>

#include "core/bit_tree.h"

namespace kvcache {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

struct Sequence {
  bool live = false;
  std::vector<int32_t> cells;  // index = position; holds positions [0, pos)
};

}  // namespace

struct CellLayout::State {
  CacheGeometry geometry;
  CacheConfig config;
  int32_t max_seqs = 0;

  // Cells [0, cell_pos.size()) have metadata; cells beyond it are free and never touched.
  std::vector<int64_t> cell_pos;     // per cell; -1 = free
  std::vector<int32_t> cell_owners;  // per cell; 0 = free
  BitTree free_cells;                // free cells among those with metadata
  BitTree used_cells;                // occupied cells
  int64_t n_used = 0;

  // Ids [0, seqs.size()) have been issued at some point; free ones are in free_ids.
  std::vector<Sequence> seqs;
  BitTree free_ids;
  int32_t n_live = 0;

  // The open step. Empty step_ids = no declaration (or a verb ended it).
  std::vector<int32_t> step_ids;
  std::vector<int64_t> step_pos;    // placed positions, one per token
  std::vector<int32_t> step_cells;  // placed cells, one per token; empty until placed
  std::vector<char> placed;         // per layer
  // Scratch for checking positions: next position per sequence within the step.
  std::vector<int64_t> scratch_next;
  std::vector<uint32_t> scratch_stamp;
  uint32_t stamp = 0;

  void end_step() {
    step_ids.clear();
    step_pos.clear();
    step_cells.clear();
    std::fill(placed.begin(), placed.end(), 0);
  }

  bool live(int32_t seq) const {
    return seq >= 0 && static_cast<size_t>(seq) < seqs.size() && seqs[seq].live;
  }

  int64_t pos(int32_t seq) const {
    return live(seq) ? static_cast<int64_t>(seqs[seq].cells.size()) : 0;
  }

  // Grow cell metadata (doubling, clamped to capacity) so a free cell exists. Needs
  // n_used < capacity.
  void grow_cells() {
    const int64_t old_n = static_cast<int64_t>(cell_pos.size());
    const int64_t n = std::min<int64_t>(config.capacity, std::max<int64_t>(64, 2 * old_n));
    cell_pos.resize(n, -1);
    cell_owners.resize(n, 0);
    free_cells.resize(n);
    used_cells.resize(n);
    for (int64_t c = old_n; c < n; ++c) free_cells.set(c);
  }

  int32_t claim_cell(int64_t position) {
    if (free_cells.first() < 0) grow_cells();
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

  // Drop the sequence's positions >= p.
  void truncate(int32_t seq, int64_t p) {
    std::vector<int32_t>& cells = seqs[seq].cells;
    for (size_t i = static_cast<size_t>(p); i < cells.size(); ++i) drop_owner(cells[i]);
    cells.resize(static_cast<size_t>(p));
  }

  // Token i's position must be its sequence's next one, advancing within the step. Only the
  // scratch counters change.
  Status check_positions(std::span<const int64_t> positions) {
    if (++stamp == 0) {  // wrapped: forget every old stamp
      std::fill(scratch_stamp.begin(), scratch_stamp.end(), 0);
      stamp = 1;
    }
    if (scratch_next.size() < seqs.size()) {
      scratch_next.resize(seqs.size(), 0);
      scratch_stamp.resize(seqs.size(), 0);
    }
    for (size_t i = 0; i < positions.size(); ++i) {
      const int32_t seq = step_ids[i];
      if (scratch_stamp[seq] != stamp) {
        scratch_stamp[seq] = stamp;
        scratch_next[seq] = pos(seq);
      }
      const int64_t expected = scratch_next[seq]++;
      if (positions[i] != expected)
        return invalid_argument("cell_layout.place: token " + str(static_cast<int64_t>(i)) +
                                " of sequence " + str(seq) + " at position " +
                                str(positions[i]) + ", expected " + str(expected) +
                                " (the sequence's next position)");
    }
    return ok_status();
  }

  // Lowest free id, -1 when max_seqs ids are live.
  int32_t take_id() {
    int64_t id = free_ids.first();
    if (id < 0) {
      if (seqs.size() >= static_cast<size_t>(max_seqs)) return -1;
      id = static_cast<int64_t>(seqs.size());
      seqs.emplace_back();
      if (free_ids.size() < id + 1)  // room for later releases; doubling keeps growth cheap
        free_ids.resize(std::min<int64_t>(max_seqs, std::max<int64_t>(64, 2 * id)));
    } else {
      free_ids.reset(id);
    }
    seqs[id].live = true;
    ++n_live;
    return static_cast<int32_t>(id);
  }
};

CellLayout::CellLayout(std::unique_ptr<State> state) : s_(std::move(state)) {}
CellLayout::CellLayout(CellLayout&&) noexcept = default;
CellLayout& CellLayout::operator=(CellLayout&&) noexcept = default;
CellLayout::~CellLayout() = default;

Result<CellLayout> CellLayout::create(const CacheGeometry& geometry, const CacheConfig& config,
                                      int32_t max_seqs) {
  KVCACHE_RETURN_IF_ERROR(validate(geometry, config, "cell_layout.create"));
  if (max_seqs < 1)
    return invalid_argument("cell_layout.create: max_seqs = " + str(max_seqs) +
                            ", expected >= 1");
  auto s = std::make_unique<State>();
  s->geometry = geometry;
  s->config = config;
  s->max_seqs = max_seqs;
  s->placed.assign(geometry.layers.size(), 0);
  return CellLayout(std::move(s));
}

const CacheGeometry& CellLayout::geometry() const { return s_->geometry; }
const CacheConfig& CellLayout::config() const { return s_->config; }
int32_t CellLayout::n_layers() const { return static_cast<int32_t>(s_->geometry.layers.size()); }

// ---- sequence verbs ----

Result<int32_t> CellLayout::seq_new() {
  const int32_t id = s_->take_id();
  if (id < 0)
    return resource_exhausted("cell_layout.seq_new: all " + str(s_->max_seqs) +
                              " sequence ids are live (seq_rm one first)");
  s_->end_step();
  return id;
}

Result<int32_t> CellLayout::seq_clone(int32_t src, std::optional<int64_t> upto) {
  if (!s_->live(src))
    return not_found("cell_layout.seq_clone: source sequence " + str(src) + " is not live");
  if (upto && *upto < 0)
    return invalid_argument("cell_layout.seq_clone: upto = " + str(*upto) + ", expected >= 0");
  const int32_t id = s_->take_id();
  if (id < 0)
    return resource_exhausted("cell_layout.seq_clone: all " + str(s_->max_seqs) +
                              " sequence ids are live (seq_rm one first)");
  const std::vector<int32_t>& from = s_->seqs[src].cells;
  const size_t n = upto ? std::min<size_t>(from.size(), static_cast<size_t>(*upto)) : from.size();
  std::vector<int32_t>& to = s_->seqs[id].cells;
  to.assign(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(n));
  for (int32_t c : to) ++s_->cell_owners[c];
  s_->end_step();
  return id;
}

Status CellLayout::seq_rm(int32_t seq) {
  if (!s_->live(seq))
    return not_found("cell_layout.seq_rm: sequence " + str(seq) + " is not live");
  s_->truncate(seq, 0);
  s_->seqs[seq].cells.shrink_to_fit();
  s_->seqs[seq].live = false;
  s_->free_ids.set(seq);
  --s_->n_live;
  s_->end_step();
  return ok_status();
}

Status CellLayout::rewind(int32_t seq, int64_t pos) {
  if (!s_->live(seq))
    return not_found("cell_layout.rewind: sequence " + str(seq) + " is not live");
  const int64_t end = s_->pos(seq);
  if (pos < 0 || pos > end)
    return out_of_range("cell_layout.rewind: sequence " + str(seq) + " to position " +
                        str(pos) + ", expected 0.." + str(end) + " (rewind never grows)");
  s_->truncate(seq, pos);
  s_->end_step();
  return ok_status();
}

void CellLayout::clear() {
  auto fresh = std::make_unique<State>();
  fresh->geometry = std::move(s_->geometry);
  fresh->config = s_->config;
  fresh->max_seqs = s_->max_seqs;
  fresh->placed.assign(fresh->geometry.layers.size(), 0);
  s_ = std::move(fresh);
}

// ---- queries ----

bool CellLayout::live(int32_t seq) const { return s_->live(seq); }
int64_t CellLayout::pos(int32_t seq) const { return s_->pos(seq); }
int64_t CellLayout::seq_len(int32_t seq) const { return s_->pos(seq); }
int32_t CellLayout::max_seqs() const { return s_->max_seqs; }
int64_t CellLayout::capacity() const { return s_->config.capacity; }
int64_t CellLayout::free_cells() const { return s_->config.capacity - s_->n_used; }
int64_t CellLayout::used_end() const { return s_->used_cells.last() + 1; }

int64_t CellLayout::cell_pos(int32_t cell) const {
  if (cell < 0 || static_cast<size_t>(cell) >= s_->cell_pos.size()) return -1;
  return s_->cell_pos[cell];
}

int32_t CellLayout::cell_owners(int32_t cell) const {
  if (cell < 0 || static_cast<size_t>(cell) >= s_->cell_owners.size()) return 0;
  return s_->cell_owners[cell];
}

std::span<const int32_t> CellLayout::seq_cells(int32_t seq) const {
  if (!s_->live(seq)) return {};
  return s_->seqs[seq].cells;
}

// ---- a step ----

Status CellLayout::declare_step(std::span<const int32_t> seq_ids) {
  if (seq_ids.empty())
    return invalid_argument("cell_layout.declare_step: no tokens, expected at least one id");
  for (size_t i = 0; i < seq_ids.size(); ++i)
    if (!s_->live(seq_ids[i]))
      return not_found("cell_layout.declare_step: token " + str(static_cast<int64_t>(i)) +
                       " names sequence " + str(seq_ids[i]) + ", which is not live");
  const auto n = static_cast<int64_t>(seq_ids.size());
  if (n > free_cells())
    return resource_exhausted("cell_layout.declare_step: " + str(n) + " tokens, but only " +
                              str(free_cells()) + " of " + str(capacity()) +
                              " cells are free");
  s_->end_step();
  s_->step_ids.assign(seq_ids.begin(), seq_ids.end());
  return ok_status();
}

bool CellLayout::step_open() const { return !s_->step_ids.empty(); }
std::span<const int32_t> CellLayout::step_seq_ids() const { return s_->step_ids; }
std::span<const int32_t> CellLayout::step_cells() const { return s_->step_cells; }

bool CellLayout::placed(int32_t layer) const {
  return layer >= 0 && layer < n_layers() && s_->placed[layer] != 0;
}

Result<std::span<const int32_t>> CellLayout::place(int32_t layer,
                                                  std::span<const int64_t> positions) {
  State& s = *s_;
  if (layer < 0 || layer >= n_layers())
    return invalid_argument("cell_layout.place: layer " + str(layer) + ", expected 0.." +
                            str(n_layers() - 1));
  if (s.step_ids.empty())
    return failed_precondition("cell_layout.place: layer " + str(layer) +
                               " has no declared step (declare_step first; a sequence verb "
                               "ends the step)");
  if (s.placed[layer])
    return failed_precondition("cell_layout.place: layer " + str(layer) +
                               " was already placed in this step (declare the next step first)");
  if (positions.size() != s.step_ids.size())
    return invalid_argument("cell_layout.place: " + str(static_cast<int64_t>(positions.size())) +
                            " positions, expected " +
                            str(static_cast<int64_t>(s.step_ids.size())) +
                            " (one per declared token)");
  if (!s.step_cells.empty()) {
    for (size_t i = 0; i < positions.size(); ++i)
      if (positions[i] != s.step_pos[i])
        return invalid_argument("cell_layout.place: layer " + str(layer) + " token " +
                                str(static_cast<int64_t>(i)) + " at position " +
                                str(positions[i]) + ", expected " + str(s.step_pos[i]) +
                                " (the step's placed position)");
    s.placed[layer] = 1;
    return std::span<const int32_t>(s.step_cells);
  }
  KVCACHE_RETURN_IF_ERROR(s.check_positions(positions));
  s.step_pos.assign(positions.begin(), positions.end());
  s.step_cells.reserve(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    const int32_t cell = s.claim_cell(positions[i]);
    s.seqs[s.step_ids[i]].cells.push_back(cell);
    s.step_cells.push_back(cell);
  }
  s.placed[layer] = 1;
  return std::span<const int32_t>(s.step_cells);
}

Result<std::span<const int32_t>> CellLayout::visible(int32_t layer, int32_t token) const {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument("cell_layout.visible: layer " + str(layer) + ", expected 0.." +
                            str(n_layers() - 1));
  if (!s_->placed[layer])
    return failed_precondition("cell_layout.visible: layer " + str(layer) +
                               " is not placed in the current step");
  if (token < 0 || static_cast<size_t>(token) >= s_->step_ids.size())
    return invalid_argument("cell_layout.visible: token " + str(token) + ", expected 0.." +
                            str(static_cast<int64_t>(s_->step_ids.size()) - 1));
  const std::vector<int32_t>& cells = s_->seqs[s_->step_ids[token]].cells;
  const int64_t first = visible_first_pos(layer, token);
  const int64_t p = s_->step_pos[token];
  return std::span<const int32_t>(cells).subspan(static_cast<size_t>(first),
                                                 static_cast<size_t>(p - first + 1));
}

int64_t CellLayout::visible_first_pos(int32_t layer, int32_t token) const {
  if (!placed(layer) || token < 0 || static_cast<size_t>(token) >= s_->step_pos.size())
    return -1;
  const int32_t w = s_->geometry.layers[layer].window;
  const int64_t p = s_->step_pos[token];
  return w > 0 ? std::max<int64_t>(0, p - w + 1) : 0;
}

}  // namespace kvcache
