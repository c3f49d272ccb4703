// The executor's side of the shared prefix-block store: a lookup at admission (the session
// waits, unstepped, for the answer or its deadline), the import of fetched blocks into the
// session's cells, and the write of each prompt block right after the step that completed it.
// Store I/O itself runs on the StoreWorker's thread (kv_store.h). See docs/executor.md.
#include <algorithm>

#include "serve/executor.h"
#include "serve/executor_state.h"

namespace kvcache::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kIdleSlice = std::chrono::milliseconds(20);  // longest wait inside one step()

}  // namespace

bool Executor::flush_store(std::chrono::milliseconds timeout) {
  return !store_ || store_->flush(Clock::now() + timeout);
}

// Called once a session holds its sequence: asks the store for the prompt's blocks past what
// the pool gave, and sets the first block this session will write.
void Executor::store_begin(Session& s, bool first_admission) {
  if (!store_) return;
  const int64_t b = index_.block_tokens();
  s.store_next = s.fed / b;
  s.store_parent = 0;
  // Full blocks of all but the last prompt token (its logits start the generation).
  const std::span<const int32_t> want =
      std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.prompt_len - 1));
  const std::vector<uint64_t> keys = index_.keys(want);
  if (s.store_next > 0 && s.store_next <= static_cast<int64_t>(keys.size()))
    s.store_parent = keys[static_cast<size_t>(s.store_next - 1)];
  if (s.store_next >= static_cast<int64_t>(keys.size())) return;  // nothing the store could add
  LookupJob job;
  job.ticket = s.id;
  job.first_index = s.store_next;
  job.from = s.fed;
  job.parent = s.store_parent;
  job.keys.assign(keys.begin() + s.store_next, keys.end());
  job.tokens.assign(want.begin() + s.store_next * b,
                    want.begin() + static_cast<int64_t>(keys.size()) * b);
  store_->lookup(std::move(job));
  s.store_wait = true;
  s.store_counts = first_admission;
  s.store_deadline = Clock::now() + std::chrono::milliseconds(opt_.store_wait_ms);
}

void Executor::store_forget(Session& s) {
  if (!s.store_wait) return;
  store_->forget(s.id);
  s.store_wait = false;
}

void Executor::store_poll() {
  if (!store_) return;
  for (LookupAnswer& a : store_->take_answers()) {
    auto it = sessions_.find(a.ticket);
    if (it == sessions_.end() || !it->second->store_wait) continue;  // gone meanwhile
    Session& s = *it->second;
    s.store_wait = false;
    store_import(s, a);
  }
  const Clock::time_point now = Clock::now();
  for (int64_t sid : running_) {
    Session& s = *sessions_.at(sid);
    if (s.store_wait && now >= s.store_deadline) {
      store_forget(s);  // it prefills what the store did not answer in time
      ++stats_.store_timeouts;
    }
  }
}

// Nothing to step: wait for an answer, at most until the earliest deadline and one slice (so
// the caller's loop still sees new work and cancellations).
void Executor::store_idle_wait() {
  if (!store_) return;
  Clock::time_point until = Clock::now() + kIdleSlice;
  for (int64_t sid : running_) {
    const Session& s = *sessions_.at(sid);
    if (s.store_wait) until = std::min(until, s.store_deadline);
  }
  store_->wait_answer(until);
  store_poll();
}

// The sliding-window rows a block holds are those a query at its end can see; they are only in
// the cache until the sequence moves W - 1 past them. So while a prompt block remains to be
// written, a prefill chunk may not end past max(j·B + W - 1, (j+1)·B), j = that block: then
// every block the chunk completes is still whole when it is read.
int64_t Executor::store_chunk_end(const Session& s) const {
  constexpr int64_t kNoLimit = INT64_MAX;
  if (!store_ || min_window_ == 0 || s.store_next < 0) return kNoLimit;
  const int64_t b = index_.block_tokens();
  if ((s.store_next + 1) * b > s.prompt_len) return kNoLimit;
  return std::max(s.store_next * b + min_window_ - 1, (s.store_next + 1) * b);
}

// Writes the answer's rows after what the session holds: positions [fed, end of the last
// block), assembled by the store thread. No room or a refused write: nothing is imported (it
// prefills).
void Executor::store_import(Session& s, LookupAnswer& a) {
  if (a.blocks == 0 || a.from != s.fed || a.to <= s.fed) return;
  const int64_t b = index_.block_tokens();
  const int64_t from = s.fed, to = a.to;
  if (!make_room(to - from)) return;
  if (!cache_->write_rows(s.seq, from, to, a.rows).ok()) return;
  s.fed = to;
  s.store_next = to / b;
  const std::span<const int32_t> held = std::span<const int32_t>(s.tokens).first(static_cast<size_t>(to));
  s.store_parent = index_.keys(held).back();
  index_.add(s.seq, held);
  const int64_t n = to - from;
  stats_.store_hit_tokens += n;
  if (s.store_counts) {
    stats_.prefix_hit_tokens += n;
    stats_.prefix_miss_tokens -= n;
    if (s.completion == 0) requests_.at(s.request)->result.cached_prompt_tokens += n;
  }
}

// After a step: hands every prompt block the session completed to the store thread (the rows
// are copied now, while the sliding layers still hold them; see store_chunk_end).
void Executor::store_capture(Session& s) {
  if (!store_ || s.store_next < 0) return;
  const BlockFormat& f = store_->format();
  const int64_t b = f.block_tokens;
  while ((s.store_next + 1) * b <= std::min(s.fed, s.prompt_len)) {
    const int64_t j = s.store_next, end = (j + 1) * b;
    Result<std::vector<LayerRows>> got = cache_->read_rows(s.seq, j * b, end);
    PutJob job;
    job.index = j;
    job.parent = s.store_parent;
    job.tokens.assign(s.tokens.begin() + j * b, s.tokens.begin() + end);
    job.key = block_key(index_.seed(), job.parent, job.tokens);
    bool whole = got.ok() && got->size() == f.geometry.layers.size();
    for (int32_t l = 0; whole && l < static_cast<int32_t>(got->size()); ++l) {
      const LayerRows& r = (*got)[static_cast<size_t>(l)];
      const int64_t lo = f.rows_first(l, j), n = f.rows(l);
      BlockLayerRows out;
      if (n > 0) {
        const int64_t skip = lo - r.first;  // rows read that the block does not keep
        if (skip < 0 || skip + n > r.n) {
          whole = false;  // the cache no longer holds a row the block needs
          break;
        }
        const auto kb = static_cast<size_t>(f.k_row_bytes(l));
        const auto vb = static_cast<size_t>(f.v_row_bytes(l));
        out.k.assign(r.k.begin() + skip * kb, r.k.begin() + (skip + n) * kb);
        out.v.assign(r.v.begin() + skip * vb, r.v.begin() + (skip + n) * vb);
      }
      job.layers.push_back(std::move(out));
    }
    if (!whole) {
      s.store_next = -1;  // a gap ends the chain: later blocks could never be reached
      return;
    }
    s.store_parent = job.key;
    ++s.store_next;
    store_->put(std::move(job));
  }
}

}  // namespace kvcache::serve
