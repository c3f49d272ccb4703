// Prometheus text exposition of the server's numbers: requests by endpoint and status (counted
// here), and the engine thread's published snapshot (tokens, prefix-cache hits, sessions,
// cache cells and bytes, step-time histogram, preemptions). Layer: server.
// It does not scrape anything itself or keep history beyond monotonic counters.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "server/engine_loop.h"

namespace kvcache::server {

// Thread-safety: add() and counts() from any thread.
class RequestCounters {
 public:
  using Counts = std::map<std::pair<std::string, int>, int64_t>;  // (endpoint, status) -> n
  void add(std::string_view endpoint, int status);
  Counts counts() const;

 private:
  mutable std::mutex mu_;
  Counts counts_;
};

// Every metric is prefixed kvcache_ (names listed in docs/server.md).
std::string metrics_text(const EngineSnapshot& s, const RequestCounters::Counts& requests);

}  // namespace kvcache::server
