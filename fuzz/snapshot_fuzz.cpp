// libFuzzer target for session snapshots (engine/snapshot.h): decode; a refusal must be
// DataLoss or InvalidArgument; an accepted file must re-encode to the same bytes and, when its
// cache is small, restore into both cpu layouts and read back the rows it stored. Any crash,
// sanitizer report or huge allocation is a bug. Also compiled into engine_tests to replay the
// corpus (fuzz/corpus/snapshot).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include "cpu/cpu_cache.h"
#include "engine/snapshot.h"
#include "fuzz_targets.h"

namespace {

constexpr int64_t kMaxCacheBytes = int64_t{1} << 24;

// The cache holds the rows the snapshot stored for the positions it keeps.
bool rows_match(const kvcache::LayerRows& stored, const kvcache::LayerRows& held) {
  if (held.first < stored.first || held.first + held.n != stored.first + stored.n) return false;
  if (held.n == 0) return true;
  const size_t kb = stored.k.size() / static_cast<size_t>(stored.n);
  const size_t vb = stored.v.size() / static_cast<size_t>(stored.n);
  const auto skip = static_cast<size_t>(held.first - stored.first);
  return held.k.size() == kb * static_cast<size_t>(held.n) &&
         held.v.size() == vb * static_cast<size_t>(held.n) &&
         std::equal(held.k.begin(), held.k.end(), stored.k.begin() + skip * kb) &&
         std::equal(held.v.begin(), held.v.end(), stored.v.begin() + skip * vb);
}

void restore_into(std::string_view kind, const kvcache::engine::Snapshot& s, int64_t capacity) {
  using namespace kvcache;
  CacheConfig c;
  c.capacity = capacity;
  c.kv_dtype = s.k_dtype;
  c.v_dtype = s.v_dtype;
  c.max_seqs = 1;
  auto cache = cpu::make_cpu_cache(kind, s.geometry, c);
  if (!cache.ok()) return;  // e.g. an allocation the host refuses
  const int32_t seq = *(*cache)->open_seq();  // a fresh cache: 0, or the cell layout's first id
  Status st = engine::restore_snapshot(**cache, seq, s, s.fingerprint,
                                       std::numeric_limits<int32_t>::max());
  if (st.code() == StatusCode::kResourceExhausted) return;
  if (!st.ok() || (*cache)->pos(seq) != s.positions) __builtin_trap();
  auto back = (*cache)->read_rows(seq, 0, s.positions);
  if (!back.ok() || back->size() != s.layers.size()) __builtin_trap();
  for (size_t i = 0; i < back->size(); ++i)
    if (!rows_match(s.layers[i], (*back)[i])) __builtin_trap();
}

}  // namespace

int kvcache::fuzz::snapshot_one(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto snap = engine::decode_snapshot(bytes);
  if (!snap.ok()) {
    const StatusCode code = snap.status().code();
    if (code != StatusCode::kDataLoss && code != StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  // A file of the current version encodes back to its own bytes (an older one is rewritten in
  // the current version).
  uint32_t version = 0;
  std::memcpy(&version, data + 8, 4);  // decoded: at least the preamble is there
  const std::vector<uint8_t> again = engine::encode_snapshot(*snap);
  if (version == engine::kSnapshotVersion &&
      (again.size() != size || (size > 0 && std::memcmp(again.data(), data, size) != 0)))
    __builtin_trap();
  const auto per_cell = bytes_per_cell(snap->geometry, snap->k_dtype, snap->v_dtype);
  const int64_t capacity = std::max<int64_t>(1, snap->positions);
  if (!per_cell || *per_cell > kMaxCacheBytes / capacity) return 0;
  restore_into(kSequenceKind, *snap, capacity);
  restore_into(kCellKind, *snap, capacity);
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::snapshot_one)
