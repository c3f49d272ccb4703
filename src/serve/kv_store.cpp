// The store thread and the store address. See kv_store.h.
#include "serve/kv_store.h"

#include <algorithm>
#include <charconv>

namespace kvcache::serve {
namespace {

constexpr int64_t kBatchBytes = int64_t{8} << 20;  // value bytes asked for in one MGET
// A failed write is tried once more after this, longer than the store's reconnect interval.
constexpr std::chrono::milliseconds kPutRetryWait{600};

int64_t rows_bytes(const std::vector<BlockLayerRows>& layers) {
  int64_t n = 0;
  for (const BlockLayerRows& r : layers) n += static_cast<int64_t>(r.k.size() + r.v.size());
  return n;
}

bool parse_int(std::string_view s, int lo, int hi, int& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && out >= lo && out <= hi;
}

}  // namespace

Result<StoreAddress> parse_store_url(std::string_view url) {
  const std::string at = "kv_store = \"" + std::string(url) + "\": ";
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme)
    return invalid_argument(at + "expected redis://HOST:PORT[/DB]");
  std::string_view rest = url.substr(kScheme.size());
  StoreAddress a;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    if (!parse_int(rest.substr(slash + 1), 0, 15, a.db))
      return invalid_argument(at + "database \"" + std::string(rest.substr(slash + 1)) +
                              "\", expected 0..15");
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return invalid_argument(at + "expected HOST:PORT after redis://");
  if (!parse_int(rest.substr(colon + 1), 1, 65535, a.port))
    return invalid_argument(at + "port \"" + std::string(rest.substr(colon + 1)) +
                            "\", expected 1..65535");
  a.host = std::string(rest.substr(0, colon));
  return a;
}

StoreWorker::StoreWorker(std::unique_ptr<BlockStore> store, BlockFormat format,
                         int64_t max_queued_put_bytes)
    : store_(std::move(store)),
      format_(std::move(format)),
      max_put_bytes_(max_queued_put_bytes),
      thread_([this] { run(); }) {}

StoreWorker::~StoreWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    lookups_.clear();
    puts_.clear();
  }
  work_cv_.notify_all();
  thread_.join();
}

void StoreWorker::lookup(LookupJob job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lookups_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

void StoreWorker::put(PutJob job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    const int64_t bytes = rows_bytes(job.layers);
    if (queued_put_bytes_ + bytes > max_put_bytes_) {
      ++stats_.puts_dropped;
      return;
    }
    queued_put_bytes_ += bytes;
    puts_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

std::vector<LookupAnswer> StoreWorker::take_answers() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<LookupAnswer> out;
  out.swap(answers_);
  return out;
}

bool StoreWorker::wait_answer(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lk(mu_);
  return answer_cv_.wait_until(lk, until, [&] { return !answers_.empty(); });
}

void StoreWorker::forget(int64_t ticket) {
  std::lock_guard<std::mutex> lk(mu_);
  lookups_.erase(std::remove_if(lookups_.begin(), lookups_.end(),
                                [&](const LookupJob& j) { return j.ticket == ticket; }),
                 lookups_.end());
  answers_.erase(std::remove_if(answers_.begin(), answers_.end(),
                                [&](const LookupAnswer& a) { return a.ticket == ticket; }),
                 answers_.end());
  if (running_ticket_ == ticket) running_ticket_ = -2;  // its answer is dropped when done
}

bool StoreWorker::flush(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_until(lk, until,
                             [&] { return !busy_ && lookups_.empty() && puts_.empty(); });
}

StoreStats StoreWorker::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void StoreWorker::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !lookups_.empty() || !puts_.empty(); });
    if (stop_) return;
    busy_ = true;
    if (!lookups_.empty()) {  // lookups first: a request may be waiting for one
      LookupJob job = std::move(lookups_.front());
      lookups_.pop_front();
      running_ticket_ = job.ticket;
      lk.unlock();
      LookupAnswer a;
      a.ticket = job.ticket;
      do_lookup(job, a);
      lk.lock();
      if (running_ticket_ == job.ticket) {
        answers_.push_back(std::move(a));
        answer_cv_.notify_all();
      }
      running_ticket_ = -1;
    } else {
      PutJob job = std::move(puts_.front());
      puts_.pop_front();
      queued_put_bytes_ -= rows_bytes(job.layers);
      lk.unlock();
      do_put(job);
      lk.lock();
    }
    busy_ = false;
    if (lookups_.empty() && puts_.empty()) idle_cv_.notify_all();
  }
}

// Fetches the run in batches of about kBatchBytes (one MGET each), so one reply stays bounded
// and a miss stops the transfer early; validates each block in chain order.
void StoreWorker::do_lookup(const LookupJob& job, LookupAnswer& out) {
  const size_t b = static_cast<size_t>(format_.block_tokens);
  const size_t batch = static_cast<size_t>(
      std::max<int64_t>(1, kBatchBytes / std::max<int64_t>(1, format_.value_bytes())));
  StoreStats s;  // added under the lock at the end
  s.lookups = 1;
  uint64_t parent = job.parent;
  bool stop = false;
  std::vector<std::string> run;  // the accepted values, in chain order
  for (size_t at = 0; at < job.keys.size() && !stop; at += batch) {
    std::vector<std::string> names;
    for (size_t i = at; i < std::min(job.keys.size(), at + batch); ++i)
      names.push_back(block_store_key(job.keys[i]));
    Result<std::vector<std::optional<std::string>>> got = store_->get(names);
    if (!got.ok()) {
      s.errors = 1;
      break;
    }
    for (const std::optional<std::string>& v : *got)
      if (v) s.bytes_in += static_cast<int64_t>(v->size());
    for (size_t k = 0; k < got->size(); ++k) {
      const std::optional<std::string>& v = (*got)[k];
      if (!v) {
        s.misses = 1;
        stop = true;
        break;
      }
      const size_t i = at + k;
      BlockId id;
      id.key = job.keys[i];
      id.parent = parent;
      id.index = job.first_index + static_cast<int64_t>(i);
      id.tokens = std::span<const int32_t>(job.tokens).subspan(i * b, b);
      DecodedBlock d = decode_block(format_, id, *v, /*copy_rows=*/false);
      if (d.fault != BlockFault::kNone) {
        (d.fault == BlockFault::kChecksum ? s.checksum_failures : s.rejected_blocks) = 1;
        if (!store_->remove(names[k]).ok()) s.errors = 1;
        stop = true;
        break;
      }
      run.push_back(std::move(*(*got)[k]));
      parent = job.keys[i];
    }
  }
  s.hit_blocks = static_cast<int64_t>(run.size());
  if (!run.empty()) assemble(job, run, out);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.lookups += s.lookups;
  stats_.errors += s.errors;
  stats_.misses += s.misses;
  stats_.bytes_in += s.bytes_in;
  stats_.checksum_failures += s.checksum_failures;
  stats_.rejected_blocks += s.rejected_blocks;
  stats_.hit_blocks += s.hit_blocks;
}

// Per cache layer the rows of [from, to) the importer needs (all on a full layer, the last
// W - 1 on a sliding one), one contiguous copy per block and layer out of the values.
void StoreWorker::assemble(const LookupJob& job, const std::vector<std::string>& run,
                           LookupAnswer& out) const {
  const BlockFormat& f = format_;
  const int64_t b = f.block_tokens, first = job.first_index;
  out.blocks = static_cast<int64_t>(run.size());
  out.from = job.from;
  out.to = (first + out.blocks) * b;
  for (int32_t l = 0; l < static_cast<int32_t>(f.geometry.layers.size()); ++l) {
    const int32_t w = f.geometry.layers[static_cast<size_t>(l)].window;
    const int64_t lo = std::max(out.from, first_visible(w, out.to));
    const int64_t kb = f.k_row_bytes(l), vb = f.v_row_bytes(l);
    LayerRows r;
    r.layer = l;
    r.first = lo;
    r.n = out.to - lo;
    r.k.reserve(static_cast<size_t>(r.n * kb));
    r.v.reserve(static_cast<size_t>(r.n * vb));
    for (int64_t blk = lo / b; r.n > 0 && blk < out.to / b; ++blk) {
      // Rows [p0, p1) of this block; the block keeps rows from rows_first() <= p0 on.
      const int64_t p0 = std::max(lo, blk * b), p1 = (blk + 1) * b;
      const std::string& v = run[static_cast<size_t>(blk - first)];
      const int64_t row = p0 - f.rows_first(l, blk);
      const char* k = v.data() + f.layer_offset(l) + row * kb;
      const char* vv = v.data() + f.layer_offset(l) + f.rows(l) * kb + row * vb;
      r.k.insert(r.k.end(), k, k + (p1 - p0) * kb);
      r.v.insert(r.v.end(), vv, vv + (p1 - p0) * vb);
    }
    out.rows.push_back(std::move(r));
  }
}

void StoreWorker::do_put(PutJob& job) {
  BlockId id;
  id.key = job.key;
  id.parent = job.parent;
  id.index = job.index;
  id.tokens = job.tokens;
  Result<std::string> value = encode_block(format_, id, job.layers);
  StoreStats s;
  if (!value.ok()) {
    s.errors = 1;  // rows of the wrong size: a bug upstream, never sent
  } else {
    const std::string name = block_store_key(job.key);
    Result<bool> put = store_->put_if_absent(name, *value);
    const bool retried = !put.ok();
    if (retried) {
      // One transient failure (a timeout under load) must not lose this block and, through the
      // store's reconnect interval, the next ones: count it, wait past that interval (or until
      // stop), try once more. The engine never waits for this thread.
      std::unique_lock<std::mutex> lk(mu_);
      ++stats_.errors;
      if (work_cv_.wait_for(lk, kPutRetryWait, [&] { return stop_; })) return;
      lk.unlock();
      put = store_->put_if_absent(name, *value);
    }
    if (!put.ok()) {
      s.errors = retried ? 0 : 1;  // a failed retry was counted before it
    } else {
      s.bytes_out = static_cast<int64_t>(value->size());
      (*put ? s.puts : s.puts_existing) = 1;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_.errors += s.errors;
  stats_.bytes_out += s.bytes_out;
  stats_.puts += s.puts;
  stats_.puts_existing += s.puts_existing;
}

}  // namespace kvcache::serve
