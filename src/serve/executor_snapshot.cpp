// Saved prefixes: a held prompt prefix exported as a snapshot, a snapshot imported as a
// retained sequence the prefix index knows. See executor.h (export_prefix, import_prefix).
#include <algorithm>
#include <string>

#include "core/str_cat.h"
#include "serve/executor.h"
#include "serve/executor_state.h"

namespace kvcache::serve {
namespace {

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

Result<engine::Snapshot> Executor::export_prefix(std::span<const int32_t> tokens) {
  int32_t best_seq = -1;
  int64_t best = 0;
  auto consider = [&](int32_t seq) {
    const std::span<const int32_t> held = held_tokens(seq);
    const int64_t n = common_prefix(held, tokens);
    if (sliding_ && n != static_cast<int64_t>(held.size())) return;
    if (n > best) best = n, best_seq = seq;
  };
  for (const auto& [seq, r] : retained_) consider(seq);
  for (const auto& [seq, sid] : seq_session_) consider(seq);
  if (best_seq < 0)
    return not_found(str_cat("export prefix: no sequence of the pool holds a prefix of these ",
                             static_cast<int64_t>(tokens.size()), " tokens",
                             sliding_ ? " whole (with sliding windows the holder must hold "
                                        "exactly the prefix)"
                                      : ""));
  Result<std::vector<LayerRows>> rows = cache_->read_rows(best_seq, 0, best);
  if (!rows.ok()) return rows.status();
  engine::Snapshot s;
  s.fingerprint = model_.fingerprint();
  s.k_dtype = setup_.config.key_type();
  s.v_dtype = setup_.config.value_type();
  s.rotated = setup_.config.rotated();
  s.geometry = setup_.geometry;
  s.positions = best;
  s.tokens.assign(tokens.begin(), tokens.begin() + best);
  s.layers = std::move(*rows);
  auto r = retained_.find(best_seq);
  if (r != retained_.end()) r->second.last_use = ++tick_;
  return s;
}

Result<int64_t> Executor::import_prefix(const engine::Snapshot& snapshot) {
  if (!opt_.prefix_cache)
    return failed_precondition("import prefix: the prefix cache is off, nothing would use it");
  KVCACHE_RETURN_IF_ERROR(
      engine::check_snapshot(snapshot, model_.fingerprint(), *cache_, model_.hparams().vocab));
  const int64_t n = snapshot.positions;
  if (n < 1 || n > max_session_tokens_)
    return invalid_argument(str_cat("import prefix: ", n, " positions, expected 1..",
                                    max_session_tokens_, " (max_session_tokens)"));
  int32_t seq = -1;
  if (!new_seq(std::nullopt, seq))
    return resource_exhausted("import prefix: no free sequence id");
  for (;;) {
    Status st = cache_->write_rows(seq, 0, n, snapshot.layers);
    if (st.ok()) break;
    if (st.code() != StatusCode::kResourceExhausted || !evict_one_retained(std::nullopt)) {
      (void)cache_->seq_rm(seq);
      return st;
    }
  }
  Retained r;
  r.seq = seq;
  r.tokens.assign(snapshot.tokens.begin(), snapshot.tokens.begin() + n);
  r.last_use = ++tick_;
  index_.add(seq, r.tokens);
  retained_.emplace(seq, std::move(r));
  return n;
}

}  // namespace kvcache::serve
