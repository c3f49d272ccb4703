// Session snapshots: one sequence's K/V rows and its tokens as a versioned, checksummed file
// (format byte for byte in docs/snapshot.md), captured with CacheControl::read_rows and
// restored with CacheControl::write_rows into either layout. Layer: engine. Decoding checks
// every size against the bytes at hand and every checksum before it allocates payload or
// touches a cache; it knows nothing of sessions, turns or chat messages (the caller keeps
// those).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/cache.h"
#include "core/geometry.h"
#include "core/status.h"

namespace kvcache::engine {

// Version 2 stores the key and the value type apart (q8_0 / q4_0 blocks as they are); version 1
// files (one kv dtype for both) are still read. Version 3 adds per-layer flags (bit 0: attention
// sinks) and is written only when a layer has sinks; other snapshots are still written as 2.
inline constexpr uint32_t kSnapshotVersion = 3;
inline constexpr uint32_t kSnapshotOldestVersion = 1;
inline constexpr char kSnapshotMagic[8] = {'K', 'V', 'C', 'S', 'N', 'A', 'P', '\0'};

// A decoded snapshot. Move-only in practice (the rows are big); copying is explicit.
struct Snapshot {
  uint64_t fingerprint = 0;       // program/fingerprint.h of the model that computed the K/V
  DType k_dtype = DType::kF32;    // the cache's key storage type
  DType v_dtype = DType::kF32;    // the cache's value storage type
  bool rotated = false;           // K and V stored Hadamard-rotated (CacheConfig::rotated())
  CacheGeometry geometry;
  int64_t positions = 0;          // the K/V covers positions [0, positions)
  // The conversation's ids: [0, positions) are in the K/V; the rest are pending (sampled but
  // not yet fed; a continuation feeds them first).
  std::vector<int32_t> tokens;
  // One per cache layer, in layer order, each ending at `positions`: a full layer all of
  // them, a Sliding(W) layer at least the last min(positions, W - 1).
  std::vector<LayerRows> layers;
};

// (bytes done, bytes in all) after each section; for progress output.
using SnapshotProgress = std::function<void(int64_t done, int64_t total)>;

// Copies seq's K/V out of the cache (read_rows over [0, pos(seq))). InvalidArgument when
// tokens holds fewer ids than the sequence has positions; the cache's errors otherwise.
Result<Snapshot> capture_snapshot(const CacheControl& cache, int32_t seq, uint64_t fingerprint,
                                  std::span<const int32_t> tokens);

// The encoded size and bytes (header, then one section per layer). The snapshot must be
// consistent (as capture_snapshot or decode_snapshot make it).
int64_t encoded_snapshot_bytes(const Snapshot& snapshot);
std::vector<uint8_t> encode_snapshot(const Snapshot& snapshot);

// Writes `path` whole or not at all (a temporary beside it, then a rename). NotFound when it
// cannot be created; DataLoss when a write fails (the temporary is removed).
Status save_snapshot(const std::string& path, const Snapshot& snapshot,
                     const SnapshotProgress& progress = nullptr);

// Parses and verifies: InvalidArgument for a file that is not a snapshot (magic), another
// version (the hint names both) or an impossible field (the message names it); DataLoss for
// a truncated file, trailing bytes or a checksum mismatch (naming the header or the layer).
Result<Snapshot> decode_snapshot(std::span<const uint8_t> bytes);
// The same from a file, reading each section straight into its rows. NotFound when the file
// cannot be opened.
Result<Snapshot> load_snapshot(const std::string& path, const SnapshotProgress& progress = nullptr);

// Whether the snapshot's K/V may be used by this model and cache: InvalidArgument naming what
// differs — the model fingerprint, the geometry (first differing layer and field), the key or
// value type (a q8_0 block is never read as anything else), the rotation — or a token id outside [0, vocab).
Status check_snapshot(const Snapshot& snapshot, uint64_t fingerprint, const CacheControl& cache,
                      int32_t vocab);

// check_snapshot, then writes positions [0, positions) into seq, which must be empty
// (FailedPrecondition otherwise). The cache's write_rows refusals (e.g. ResourceExhausted
// when it is too small) pass through; every refusal leaves the cache as it was.
Status restore_snapshot(CacheControl& cache, int32_t seq, const Snapshot& snapshot,
                        uint64_t fingerprint, int32_t vocab);

}  // namespace kvcache::engine
