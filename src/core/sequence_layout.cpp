#include "core/sequence_layout.h"

#include <algorithm>
#include <string>

#include "core/str_cat.h"

namespace kvcache {
namespace {

// Positions [first, first + n) of a ring of r slots as at most two slot runs, oldest first.
int32_t ring_runs(int64_t first, int64_t n, int64_t r, std::array<SlotRun, 2>& runs) {
  if (n <= 0) return 0;
  const int64_t s0 = first % r;
  if (s0 + n <= r) {
    runs[0] = {s0, s0 + n};
    return 1;
  }
  runs[0] = {s0, r};
  runs[1] = {0, s0 + n - r};
  return 2;
}

}  // namespace

SequenceLayout::SequenceLayout(CacheGeometry g, CacheConfig c)
    : geometry_(std::move(g)), config_(c) {
  step_limit_ = kvcache::step_limit(geometry_, config_);
  placed_.assign(geometry_.layers.size(), false);
  ring_low_.assign(geometry_.layers.size(), 0);
}

Result<SequenceLayout> SequenceLayout::create(const CacheGeometry& geometry,
                                              const CacheConfig& config) {
  KVCACHE_RETURN_IF_ERROR(validate(geometry, config, "sequence_layout.create"));
  return SequenceLayout(geometry, config);
}

int64_t SequenceLayout::slots(int32_t layer) const {
  if (layer < 0 || layer >= n_layers()) return 0;
  return sequence_slots(geometry_.layers[layer], config_);
}

int64_t SequenceLayout::held_from(int32_t layer) const {
  if (layer < 0 || layer >= n_layers() || !geometry_.layers[layer].sliding()) return 0;
  return std::min(ring_low_[layer], length_);
}

int64_t SequenceLayout::slot(int32_t layer, int64_t pos) const {
  return geometry_.layers[layer].sliding() ? pos % sequence_slots(geometry_.layers[layer], config_)
                                           : pos;
}

Result<SlotRuns> SequenceLayout::visible(int32_t layer, int64_t pos) const {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("sequence_layout.visible: layer ", layer, ", expected 0..", n_layers() - 1));
  if (pos < 0 || pos >= length_)
    return out_of_range(str_cat("sequence_layout.visible: position ", pos, ", expected 0..",
                                length_ - 1, " (a query reads only placed positions)"));
  const LayerGeometry& l = geometry_.layers[layer];
  SlotRuns r;
  r.first = first_visible(l, pos);
  if (r.first < held_from(layer))
    return out_of_range(str_cat("sequence_layout.visible: layer ", layer, " position ", pos,
                                " reads back to ", r.first, ", the ring holds from ",
                                held_from(layer)));
  r.n = ring_runs(r.first, pos + 1 - r.first, slots(layer), r.runs);
  return r;
}

SlotRuns SequenceLayout::lookback(int32_t layer) const {
  SlotRuns r;
  if (layer < 0 || layer >= n_layers() || !geometry_.layers[layer].sliding()) return r;
  r.first = first_visible(geometry_.layers[layer], length_);
  r.n = ring_runs(r.first, length_ - r.first, slots(layer), r.runs);
  return r;
}

bool SequenceLayout::can_extend(int64_t n) const {
  return n >= 0 && n <= step_limit_ && length_ + n <= config_.capacity;
}

int64_t SequenceLayout::rewind_floor() const {
  int64_t floor = 0;
  for (size_t i = 0; i < geometry_.layers.size(); ++i) {
    const LayerGeometry& l = geometry_.layers[i];
    if (!l.sliding()) continue;
    const int64_t m = step_rows(l.window, config_);
    floor = std::max(floor, length_ - m);
    // After a rewind the ring may hold less than R positions: the next step must still find
    // its W-1 look-back positions intact (a window of 1 looks back at nothing).
    if (ring_low_[i] > 0 && l.window > 1) floor = std::max(floor, ring_low_[i] + l.window - 1);
  }
  return std::min(std::max<int64_t>(floor, 0), length_);
}

Result<SequencePlan> SequenceLayout::plan(int32_t layer, int64_t start, int32_t n_tokens) const {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("sequence_layout.plan: layer ", layer, ", expected 0..", n_layers() - 1));
  if (n_tokens <= 0 || n_tokens > step_limit_)
    return invalid_argument(
        str_cat("sequence_layout.plan: step of ", n_tokens, " tokens, expected 1..", step_limit_));
  if (start < 0 || start + n_tokens > config_.capacity)
    return invalid_argument(str_cat("sequence_layout.plan: positions [", start, ", ",
                                    start + n_tokens, "), expected within [0, ", config_.capacity,
                                    ")"));
  const LayerGeometry& l = geometry_.layers[layer];
  SequencePlan p;
  p.start = start;
  p.n_tokens = n_tokens;
  p.window = l.window;
  p.slots = sequence_slots(l, config_);
  const int64_t end = start + n_tokens;
  if (!l.sliding()) {
    p.write[0] = {start, end};
    p.n_write = 1;
    p.read[0] = {0, end};
    p.n_read = 1;
    p.read_begin = 0;
    return p;
  }
  p.n_write = ring_runs(start, n_tokens, p.slots, p.write);
  p.read_begin = first_visible(l, start);
  p.n_read = ring_runs(p.read_begin, end - p.read_begin, p.slots, p.read);
  return p;
}

Status SequenceLayout::declare_step(int32_t n_tokens) {
  if (n_tokens <= 0 || n_tokens > step_limit_)
    return invalid_argument(str_cat("sequence_layout.declare_step: ", n_tokens,
                                    " tokens, expected 1..", step_limit_,
                                    " (the widest step this layout accepts)"));
  if (length_ + n_tokens > config_.capacity)
    return resource_exhausted(str_cat("sequence_layout.declare_step: ", n_tokens,
                                      " tokens at length ", length_, " exceed capacity ",
                                      config_.capacity));
  step_tokens_ = n_tokens;
  step_start_ = length_;
  step_committed_ = false;
  std::fill(placed_.begin(), placed_.end(), false);
  return ok_status();
}

Result<SequencePlan> SequenceLayout::place(int32_t layer) {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("sequence_layout.place: layer ", layer, ", expected 0..", n_layers() - 1));
  if (step_tokens_ == 0)
    return failed_precondition(str_cat("sequence_layout.place: layer ", layer,
                                       " has no declared step (declare_step first)"));
  if (placed_[layer])
    return failed_precondition(
        str_cat("sequence_layout.place: layer ", layer,
                " was already placed in this step (declare the next step first)"));
  Result<SequencePlan> p = plan(layer, step_start_, step_tokens_);
  if (!p.ok()) return p;
  if (!step_committed_) commit_step();
  placed_[layer] = true;
  return p;
}

void SequenceLayout::commit_step() {
  const int64_t end = step_start_ + step_tokens_;
  for (size_t i = 0; i < geometry_.layers.size(); ++i) {
    if (!geometry_.layers[i].sliding()) continue;
    const int64_t r = sequence_slots(geometry_.layers[i], config_);
    ring_low_[i] = std::max(ring_low_[i], end - r);
  }
  length_ = end;
  step_committed_ = true;
}

Result<SequencePlan> SequenceLayout::placed(int32_t layer) const {
  if (layer < 0 || layer >= n_layers())
    return invalid_argument(
        str_cat("sequence_layout.placed: layer ", layer, ", expected 0..", n_layers() - 1));
  if (step_tokens_ == 0 || !placed_[layer])
    return failed_precondition(
        str_cat("sequence_layout.placed: layer ", layer, " was not placed in the current step"));
  return plan(layer, step_start_, step_tokens_);
}

void SequenceLayout::end_step() {
  step_tokens_ = 0;
  step_start_ = length_;
  step_committed_ = false;
  std::fill(placed_.begin(), placed_.end(), false);
}

Status SequenceLayout::rewind(int64_t new_len) {
  if (new_len < 0 || new_len > length_)
    return out_of_range(str_cat("sequence_layout.rewind: length ", new_len, ", expected 0..",
                                length_, " (rewind never grows)"));
  if (new_len == 0) {
    clear();
    return ok_status();
  }
  const int64_t floor = rewind_floor();
  if (new_len < floor)
    return out_of_range(str_cat("sequence_layout.rewind: length ", new_len, " is below the floor ",
                                floor,
                                " (sliding-window rings no longer hold the positions it needs)"));
  // A ring whose oldest held position is above new_len now holds none below it (only a window
  // of 1 can get here: the floor keeps every other ring's oldest at or below new_len); the
  // next step's writes start at new_len.
  for (int64_t& low : ring_low_) low = std::min(low, new_len);
  length_ = new_len;
  end_step();
  return ok_status();
}

Status SequenceLayout::restore(int64_t new_len) {
  if (new_len < 0 || new_len > length_)
    return out_of_range(str_cat("sequence_layout.restore: length ", new_len, ", expected 0..",
                                length_, " (restore never grows)"));
  for (size_t i = 0; i < geometry_.layers.size(); ++i)
    if (geometry_.layers[i].sliding())
      ring_low_[i] = first_visible(geometry_.layers[i], new_len);
  length_ = new_len;
  end_step();
  return ok_status();
}

void SequenceLayout::clear() {
  length_ = 0;
  std::fill(ring_low_.begin(), ring_low_.end(), 0);
  end_step();
}

}  // namespace kvcache
