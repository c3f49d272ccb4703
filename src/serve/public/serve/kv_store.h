// A prefix-block store shared by replicas, and the store thread that talks to it beside the
// executor. Layer: serve. BlockStore is the blocking client face (Redis: redis_store.cpp);
// StoreWorker owns one on its own thread: lookups (a run of consecutive block keys, stopping at
// the first missing or refused block) and writes (SET NX) queue there, so the engine step never
// waits on the network. Block bytes are validated here (block_codec.h); a failure of any kind
// is a miss and a counter, never an error for a request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/cache.h"
#include "core/status.h"
#include "serve/block_codec.h"

namespace kvcache::serve {

// Thread-safety: not thread-safe; one caller (the store thread).
class BlockStore {
 public:
  virtual ~BlockStore() = default;
  // The values of `keys` in order; nullopt for a missing key. A non-ok Status when the store
  // cannot be reached or answers with an error.
  virtual Result<std::vector<std::optional<std::string>>> get(
      std::span<const std::string> keys) = 0;
  // Writes the value unless the key exists (atomic: no reader sees a partial value). True when
  // written, false when the key existed.
  virtual Result<bool> put_if_absent(const std::string& key, std::string_view value) = 0;
  // Deletes the key (a value found damaged, so that a sound one can be written).
  virtual Status remove(const std::string& key) = 0;
};

// redis://HOST:PORT[/DB]
struct StoreAddress {
  std::string host;
  int port = 6379;
  int db = 0;
};
// InvalidArgument naming the flag's value and what was expected.
Result<StoreAddress> parse_store_url(std::string_view url);

struct RedisTimeouts {
  std::chrono::milliseconds connect{250};
  std::chrono::milliseconds command{2000};
  std::chrono::milliseconds retry{500};  // after a connection failure, no new attempt before
};
// Connects lazily (the first call), reconnects after failures at most once per `retry`.
std::unique_ptr<BlockStore> make_redis_store(const StoreAddress& address,
                                             const RedisTimeouts& timeouts = {});

struct StoreStats {
  int64_t lookups = 0;            // runs asked for
  int64_t hit_blocks = 0;         // blocks fetched and accepted
  int64_t misses = 0;             // runs that stopped at a missing key
  int64_t bytes_in = 0;           // value bytes received
  int64_t bytes_out = 0;          // value bytes sent (SET NX)
  int64_t puts = 0;               // blocks written
  int64_t puts_existing = 0;      // blocks the store already had (NX refused)
  int64_t puts_dropped = 0;       // not sent: the write queue was full
  int64_t checksum_failures = 0;  // values refused: size, magic or checksum
  int64_t rejected_blocks = 0;    // values refused: intact but another key, model or tokens
                                  // (a refused value is deleted so a sound one can replace it)
  int64_t errors = 0;             // store calls that failed (unreachable, error replies)
};

// A run of consecutive blocks to fetch: keys[i] is block first_index + i. The asker holds
// positions [0, from), from in block first_index.
struct LookupJob {
  int64_t ticket = -1;
  int64_t first_index = 0;
  int64_t from = 0;
  uint64_t parent = 0;            // key of block first_index - 1 (0 for block 0)
  std::vector<uint64_t> keys;
  std::vector<int32_t> tokens;    // keys.size() × B ids
};

// The accepted leading run, ready for Cache::write_rows(seq, from, to, rows): per cache layer
// the rows of [from, to) (a sliding layer: only the last W - 1 of them). Assembled on the
// store thread, so the engine thread only writes them.
struct LookupAnswer {
  int64_t ticket = -1;
  int64_t blocks = 0;  // accepted blocks; 0 = nothing to import
  int64_t from = 0, to = 0;
  std::vector<LayerRows> rows;
};

struct PutJob {
  uint64_t key = 0, parent = 0;
  int64_t index = 0;
  std::vector<int32_t> tokens;         // B ids
  std::vector<BlockLayerRows> layers;  // rows per format.rows(layer)
};

// Thread-safety: every method may be called from any thread; the executor's thread uses it.
class StoreWorker {
 public:
  // `max_queued_put_bytes`: rows waiting to be written beyond which new writes are dropped.
  StoreWorker(std::unique_ptr<BlockStore> store, BlockFormat format,
              int64_t max_queued_put_bytes = int64_t{256} << 20);
  ~StoreWorker();  // drops what is queued and joins the thread
  StoreWorker(const StoreWorker&) = delete;
  StoreWorker& operator=(const StoreWorker&) = delete;

  const BlockFormat& format() const { return format_; }
  void lookup(LookupJob job);
  void put(PutJob job);
  // Answers ready now (each ticket once), in the order they finished.
  std::vector<LookupAnswer> take_answers();
  // Waits until an answer is ready or `until`; true when one is.
  bool wait_answer(std::chrono::steady_clock::time_point until);
  // Drops the ticket's job or answer (the asker stopped waiting).
  void forget(int64_t ticket);
  // Waits until no lookup or write is queued or running, or until `until`; true when idle.
  bool flush(std::chrono::steady_clock::time_point until);
  StoreStats stats() const;

 private:
  void run();
  void do_lookup(const LookupJob& job, LookupAnswer& out);
  void assemble(const LookupJob& job, const std::vector<std::string>& run, LookupAnswer& out) const;
  void do_put(PutJob& job);

  std::unique_ptr<BlockStore> store_;
  const BlockFormat format_;
  const int64_t max_put_bytes_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, answer_cv_, idle_cv_;
  std::deque<LookupJob> lookups_;
  std::deque<PutJob> puts_;
  int64_t queued_put_bytes_ = 0;
  std::vector<LookupAnswer> answers_;
  int64_t running_ticket_ = -1;  // the lookup in progress; -1 = none
  bool busy_ = false, stop_ = false;
  StoreStats stats_;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace kvcache::serve
