// Session snapshots. See snapshot.h; the format is specified in docs/snapshot.md.
#include "engine/snapshot.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include <xxhash.h>

#include "core/str_cat.h"
#include "program/byte_writer.h"

namespace kvcache::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "snapshots are little-endian; this build writes host order");

constexpr int64_t kPreambleBytes = 16;             // magic, u32 version, u32 header length
constexpr int64_t kChecksumBytes = 8;
constexpr int64_t kMaxHeaderBytes = int64_t{1} << 28;  // 256 MiB: ~64M token ids
constexpr uint32_t kMaxLayers = 1u << 16;
// kv_heads, head_dim, value_dim, window; version 3 adds u32 layer flags (bit 0: sinks).
int64_t layer_geometry_bytes(uint32_t version) { return version >= 3 ? 20 : 16; }
constexpr int64_t kLayerRangeBytes = 16;           // first, n

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// ---- encoding ----

using Writer = program::ByteWriter;

// The version a snapshot is written in: 3 when a layer has sinks (its geometry needs the layer
// flags), else 2, so files of models without sinks stay readable by version-2 readers.
uint32_t write_version(const Snapshot& s) {
  for (const LayerGeometry& l : s.geometry.layers)
    if (l.sinks) return 3;
  return 2;
}

// Preamble, header body and the header checksum.
std::vector<uint8_t> encode_header(const Snapshot& s) {
  const uint32_t version = write_version(s);
  Writer body;
  body.put<uint64_t>(s.fingerprint);
  body.put<uint32_t>(static_cast<uint32_t>(s.k_dtype));
  body.put<uint32_t>(static_cast<uint32_t>(s.v_dtype));
  body.put<uint32_t>(s.rotated ? 1u : 0u);  // flags: bit 0 = rotated
  body.put<uint32_t>(static_cast<uint32_t>(s.geometry.layers.size()));
  for (const LayerGeometry& l : s.geometry.layers) {
    body.put<int32_t>(l.kv_heads);
    body.put<int32_t>(l.head_dim);
    body.put<int32_t>(l.value_dim);
    body.put<int32_t>(l.window);
    if (version >= 3) body.put<uint32_t>(l.sinks ? 1u : 0u);
  }
  body.put<int64_t>(s.positions);
  body.put<uint64_t>(s.tokens.size());
  body.put_bytes(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
  for (const LayerRows& r : s.layers) {
    body.put<int64_t>(r.first);
    body.put<int64_t>(r.n);
  }
  Writer out;
  out.put_bytes(kSnapshotMagic, sizeof kSnapshotMagic);
  out.put<uint32_t>(version);
  out.put<uint32_t>(static_cast<uint32_t>(body.bytes().size()));
  out.put_bytes(body.bytes().data(), body.bytes().size());
  out.put<uint64_t>(XXH3_64bits(out.bytes().data(), out.bytes().size()));
  return out.take();
}

uint64_t section_checksum(const LayerRows& r) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, r.k.data(), r.k.size());
  XXH3_64bits_update(st, r.v.data(), r.v.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// Where encoded bytes go: false when a write failed.
using Sink = std::function<bool(const void* data, size_t n)>;

bool write_all(const Snapshot& s, const Sink& sink, const SnapshotProgress& progress) {
  const int64_t total = encoded_snapshot_bytes(s);
  const std::vector<uint8_t> header = encode_header(s);
  if (!sink(header.data(), header.size())) return false;
  int64_t done = static_cast<int64_t>(header.size());
  for (const LayerRows& r : s.layers) {
    const uint64_t sum = section_checksum(r);
    if (!sink(r.k.data(), r.k.size()) || !sink(r.v.data(), r.v.size()) ||
        !sink(&sum, sizeof sum))
      return false;
    done += static_cast<int64_t>(r.k.size() + r.v.size()) + kChecksumBytes;
    if (progress) progress(done, total);
  }
  return true;
}

// ---- decoding ----

// Random access to the encoded bytes: a span or an open file.
class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  // Reads [offset, offset + n) into dst; false when the bytes are not there.
  virtual bool read(int64_t offset, void* dst, int64_t n) = 0;
};

class SpanSource final : public Source {
 public:
  explicit SpanSource(std::span<const uint8_t> b) : b_(b) {}
  int64_t size() const override { return static_cast<int64_t>(b_.size()); }
  bool read(int64_t offset, void* dst, int64_t n) override {
    if (offset < 0 || n < 0 || offset + n > size()) return false;
    if (n > 0) std::memcpy(dst, b_.data() + offset, static_cast<size_t>(n));
    return true;
  }

 private:
  std::span<const uint8_t> b_;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

class FileSource final : public Source {
 public:
  FileSource(FilePtr f, int64_t size) : f_(std::move(f)), size_(size) {}
  int64_t size() const override { return size_; }
  bool read(int64_t offset, void* dst, int64_t n) override {
    if (offset < 0 || n < 0 || offset + n > size_) return false;
    if (n == 0) return true;
    if (offset != at_ && std::fseek(f_.get(), static_cast<long>(offset), SEEK_SET) != 0)
      return false;
    const size_t got = std::fread(dst, 1, static_cast<size_t>(n), f_.get());
    at_ = offset + static_cast<int64_t>(got);
    return got == static_cast<size_t>(n);
  }

 private:
  FilePtr f_;
  int64_t size_ = 0;
  int64_t at_ = 0;
};

// Bounded reads from the in-memory header body.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool get(T& v) {
    if (b_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  size_t left() const { return b_.size() - at_; }
  const uint8_t* here() const { return b_.data() + at_; }
  void skip(size_t n) { at_ += n; }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

Status short_header(const char* field) {
  return invalid_argument(std::string("snapshot header: it ends inside ") + field);
}

// One stored type number: the type, or InvalidArgument naming `what`.
Status parse_dtype_number(Cursor& c, const char* what, DType& out) {
  uint32_t n = 0;
  if (!c.get(n)) return short_header(what);
  if (n > static_cast<uint32_t>(DType::kQ4_0))
    return invalid_argument(str_cat("snapshot header: ", what, " ", n,
                                    " is unknown (0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0; written "
                                    "by a newer kvcache?)"));
  out = static_cast<DType>(n);
  return ok_status();
}

// The header body's fields, checked for consistency (not yet against any cache). Version 1
// has one kv dtype for K and V, version 2 a key type then a value type.
Status parse_body(std::span<const uint8_t> body, uint32_t version, Snapshot& s) {
  Cursor c(body);
  uint32_t n_layers = 0;
  if (!c.get(s.fingerprint)) return short_header("the fingerprint");
  if (version == 1) {
    KVCACHE_RETURN_IF_ERROR(parse_dtype_number(c, "the kv dtype", s.k_dtype));
    s.v_dtype = s.k_dtype;
  } else {
    KVCACHE_RETURN_IF_ERROR(parse_dtype_number(c, "the key type", s.k_dtype));
    KVCACHE_RETURN_IF_ERROR(parse_dtype_number(c, "the value type", s.v_dtype));
    uint32_t flags = 0;
    if (!c.get(flags)) return short_header("the flags");
    if (flags > 1)
      return invalid_argument(str_cat("snapshot header: flags = ", flags,
                                      ", expected 0 or 1 (bit 0: rotated K/V)"));
    s.rotated = flags == 1;
  }
  if (!c.get(n_layers)) return short_header("the layer count");
  if (n_layers < 1 || n_layers > kMaxLayers)
    return invalid_argument(
        str_cat("snapshot header: ", n_layers, " cache layers, expected 1..", kMaxLayers));
  if (c.left() < n_layers * static_cast<size_t>(layer_geometry_bytes(version)))
    return short_header("the layer geometry");
  s.geometry.layers.resize(n_layers);
  for (size_t i = 0; i < n_layers; ++i) {
    LayerGeometry& l = s.geometry.layers[i];
    (void)c.get(l.kv_heads), (void)c.get(l.head_dim), (void)c.get(l.value_dim);
    (void)c.get(l.window);
    uint32_t flags = 0;
    if (version >= 3) (void)c.get(flags);
    if (flags > 1)
      return invalid_argument(str_cat("snapshot header: layer ", i, " flags = ", flags,
                                      ", expected 0 or 1 (bit 0: attention sinks)"));
    l.sinks = flags == 1;
  }
  if (auto why = why_invalid(s.geometry))
    return invalid_argument("snapshot header: " + why->message());
  for (size_t i = 0; i < n_layers; ++i)
    if (!bytes_per_cell(s.geometry.layers[i], s.k_dtype, s.v_dtype))
      return invalid_argument(str_cat("snapshot header: layer ", i,
                                      " has a row size that overflows or is no whole number of ",
                                      to_string(s.k_dtype), " / ", to_string(s.v_dtype),
                                      " blocks"));
  uint64_t n_tokens = 0;
  if (!c.get(s.positions)) return short_header("the position count");
  if (!c.get(n_tokens)) return short_header("the token count");
  if (s.positions < 0 || static_cast<uint64_t>(s.positions) > n_tokens)
    return invalid_argument(str_cat("snapshot header: ", s.positions, " positions with ", n_tokens,
                                    " token ids, expected 0 <= positions <= tokens"));
  if (n_tokens > c.left() / sizeof(int32_t)) return short_header("the token ids");
  s.tokens.resize(static_cast<size_t>(n_tokens));
  if (!s.tokens.empty()) std::memcpy(s.tokens.data(), c.here(), s.tokens.size() * sizeof(int32_t));
  c.skip(s.tokens.size() * sizeof(int32_t));
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.tokens[i] < 0)
      return invalid_argument(
          str_cat("snapshot header: token ", i, " = ", s.tokens[i], ", expected >= 0"));
  if (c.left() < n_layers * static_cast<size_t>(kLayerRangeBytes))
    return short_header("the layer row ranges");
  s.layers.resize(n_layers);
  for (uint32_t i = 0; i < n_layers; ++i) {
    LayerRows& r = s.layers[i];
    r.layer = static_cast<int32_t>(i);
    (void)c.get(r.first), (void)c.get(r.n);
    const LayerGeometry& l = s.geometry.layers[i];
    const int64_t least = s.positions - first_visible(l, s.positions);
    if (r.first < 0 || r.n < least || r.n > s.positions || r.first != s.positions - r.n)
      return invalid_argument(str_cat("snapshot header: layer ", i, " rows [", r.first, ", +", r.n,
                                      "), expected the last n >= ", least, " of the ", s.positions,
                                      " positions"));
  }
  if (c.left() != 0)
    return invalid_argument(str_cat("snapshot header: ", c.left(), " bytes after the last field"));
  return ok_status();
}

// The bytes of layer i's K and V sections (geometry checked by parse_body, n <= positions).
std::optional<int64_t> section_bytes(const Snapshot& s, size_t i, bool k) {
  const LayerGeometry& l = s.geometry.layers[i];
  auto a = checked_mul(s.layers[i].n, l.kv_heads);
  auto row = k ? row_bytes(s.k_dtype, l.head_dim) : row_bytes(s.v_dtype, l.value_dim);
  return a && row ? checked_mul(*a, *row) : std::nullopt;
}

Result<Snapshot> decode(Source& src, const SnapshotProgress& progress) {
  const int64_t size = src.size();
  uint8_t pre[kPreambleBytes] = {};
  if (size < static_cast<int64_t>(sizeof kSnapshotMagic) ||
      !src.read(0, pre, std::min<int64_t>(size, kPreambleBytes)))
    return data_loss(str_cat("snapshot: ", size, " bytes, too short for a snapshot (truncated?)"));
  if (std::memcmp(pre, kSnapshotMagic, sizeof kSnapshotMagic) != 0)
    return invalid_argument("snapshot: not a kvcache snapshot (it does not start with the magic "
                            "\"KVCSNAP\\0\")");
  if (size < kPreambleBytes)
    return data_loss(str_cat("snapshot: ", size, " bytes, truncated inside the preamble"));
  uint32_t version = 0, header_len = 0;
  std::memcpy(&version, pre + 8, 4);
  std::memcpy(&header_len, pre + 12, 4);
  if (version < kSnapshotOldestVersion || version > kSnapshotVersion)
    return invalid_argument(str_cat("snapshot: format version ", version, ", this build reads ",
                                    kSnapshotOldestVersion, "..", kSnapshotVersion,
                                    " (hint: save it again with the kvcache that reads it)"));
  if (header_len > kMaxHeaderBytes)
    return invalid_argument(
        str_cat("snapshot: header of ", header_len, " bytes, expected <= ", kMaxHeaderBytes));
  const int64_t header_end = kPreambleBytes + header_len + kChecksumBytes;
  if (size < header_end)
    return data_loss(str_cat("snapshot: ", size, " bytes, truncated inside the header (",
                             header_end, " bytes)"));
  std::vector<uint8_t> head(static_cast<size_t>(header_end));
  if (!src.read(0, head.data(), header_end))
    return data_loss("snapshot: reading the header failed");
  uint64_t stored = 0;
  std::memcpy(&stored, head.data() + header_end - kChecksumBytes, kChecksumBytes);
  if (XXH3_64bits(head.data(), static_cast<size_t>(header_end - kChecksumBytes)) != stored)
    return data_loss("snapshot: header checksum mismatch (the file is corrupt)");
  Snapshot s;
  KVCACHE_RETURN_IF_ERROR(parse_body(
      std::span<const uint8_t>(head).subspan(kPreambleBytes, header_len), version, s));
  int64_t total = header_end;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    auto k = section_bytes(s, i, true), v = section_bytes(s, i, false);
    auto kv = k && v ? checked_add(*k, *v) : std::nullopt;
    auto sec = kv ? checked_add(*kv, kChecksumBytes) : std::nullopt;
    auto t = sec ? checked_add(total, *sec) : std::nullopt;
    if (!t || *t > size)
      return data_loss(str_cat("snapshot: ", size, " bytes, truncated: layer ", i,
                               "'s rows end past the end of the file"));
    total = *t;
  }
  if (total != size)
    return data_loss(
        str_cat("snapshot: ", size - total, " bytes after the last layer (", total, " expected)"));
  int64_t at = header_end;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    LayerRows& r = s.layers[i];
    r.k.resize(static_cast<size_t>(*section_bytes(s, i, true)));
    r.v.resize(static_cast<size_t>(*section_bytes(s, i, false)));
    const auto nk = static_cast<int64_t>(r.k.size()), nv = static_cast<int64_t>(r.v.size());
    uint64_t sum = 0;
    if (!src.read(at, r.k.data(), nk) || !src.read(at + nk, r.v.data(), nv) ||
        !src.read(at + nk + nv, &sum, kChecksumBytes))
      return data_loss(str_cat("snapshot: reading layer ", i, " failed"));
    if (section_checksum(r) != sum)
      return data_loss(
          str_cat("snapshot: layer ", i, " rows checksum mismatch (the file is corrupt)"));
    at += nk + nv + kChecksumBytes;
    if (progress) progress(at, total);
  }
  return s;
}

std::string geometry_difference(const CacheGeometry& snap, const CacheGeometry& mine) {
  if (snap.layers.size() != mine.layers.size())
    return str_cat(snap.layers.size(), " cache layers in the snapshot, ", mine.layers.size(),
                   " in this cache");
  for (size_t i = 0; i < snap.layers.size(); ++i) {
    const LayerGeometry& a = snap.layers[i];
    const LayerGeometry& b = mine.layers[i];
    const std::pair<const char*, std::pair<int32_t, int32_t>> fields[] = {
        {"kv_heads", {a.kv_heads, b.kv_heads}},
        {"head_dim", {a.head_dim, b.head_dim}},
        {"value_dim", {a.value_dim, b.value_dim}},
        {"window", {a.window, b.window}},
        {"sinks", {a.sinks ? 1 : 0, b.sinks ? 1 : 0}}};
    for (const auto& [name, v] : fields)
      if (v.first != v.second)
        return str_cat("cache layer ", i, " ", name, " = ", v.first, " in the snapshot, ", v.second,
                       " in this cache");
  }
  return {};
}

}  // namespace

Result<Snapshot> capture_snapshot(const CacheControl& cache, int32_t seq, uint64_t fingerprint,
                                  std::span<const int32_t> tokens) {
  const int64_t positions = cache.pos(seq);
  if (static_cast<int64_t>(tokens.size()) < positions)
    return invalid_argument(str_cat("capture_snapshot: ", tokens.size(),
                                    " token ids for a sequence of ", positions,
                                    " positions, expected at least one per position"));
  Result<std::vector<LayerRows>> rows = cache.read_rows(seq, 0, positions);
  if (!rows.ok()) return rows.status();
  Snapshot s;
  s.fingerprint = fingerprint;
  s.k_dtype = cache.config().key_type();
  s.v_dtype = cache.config().value_type();
  s.rotated = cache.config().rotated();
  s.geometry = cache.geometry();
  s.positions = positions;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.layers = std::move(*rows);
  return s;
}

int64_t encoded_snapshot_bytes(const Snapshot& s) {
  const auto layers = static_cast<int64_t>(s.layers.size());
  // preamble, fingerprint, key and value types, flags, layer count, geometry, positions,
  // token count, ids, ranges, header checksum; then per layer its K and V rows and checksum
  int64_t n = kPreambleBytes + 8 + 4 + 4 + 4 + 4 + layer_geometry_bytes(write_version(s)) * layers +
              8 + 8 +
              4 * static_cast<int64_t>(s.tokens.size()) + kLayerRangeBytes * layers +
              kChecksumBytes;
  for (const LayerRows& r : s.layers)
    n += static_cast<int64_t>(r.k.size() + r.v.size()) + kChecksumBytes;
  return n;
}

std::vector<uint8_t> encode_snapshot(const Snapshot& s) {
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(encoded_snapshot_bytes(s)));
  (void)write_all(s, [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    if (n > 0) out.insert(out.end(), b, b + n);
    return true;
  }, nullptr);
  return out;
}

Status save_snapshot(const std::string& path, const Snapshot& s,
                     const SnapshotProgress& progress) {
  const std::string tmp = path + ".tmp";
  FilePtr f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return not_found("save snapshot: cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = write_all(s, [&](const void* p, size_t n) {
    return n == 0 || std::fwrite(p, 1, n, f.get()) == n;
  }, progress);
  ok = std::fclose(f.release()) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return ok_status();
  std::remove(tmp.c_str());
  return data_loss("save snapshot: writing " + path + " failed: " + std::strerror(errno));
}

Result<Snapshot> decode_snapshot(std::span<const uint8_t> bytes) {
  SpanSource src(bytes);
  return decode(src, nullptr);
}

Result<Snapshot> load_snapshot(const std::string& path, const SnapshotProgress& progress) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return not_found("load snapshot: cannot open " + path + ": " + std::strerror(errno));
  if (std::fseek(f.get(), 0, SEEK_END) != 0)
    return invalid_argument("load snapshot: " + path + " is not a regular file");
  const long size = std::ftell(f.get());
  if (size < 0 || std::fseek(f.get(), 0, SEEK_SET) != 0)
    return invalid_argument("load snapshot: " + path + " is not a regular file");
  FileSource src(std::move(f), size);
  Result<Snapshot> s = decode(src, progress);
  if (!s.ok()) return Status(s.status().code(), path + ": " + s.status().message());
  return s;
}

Status check_snapshot(const Snapshot& s, uint64_t fingerprint, const CacheControl& cache,
                      int32_t vocab) {
  if (s.fingerprint != fingerprint)
    return invalid_argument("snapshot: made by another model (model fingerprint " +
                            hex(s.fingerprint) + ", this model's is " + hex(fingerprint) + ")");
  if (const std::string d = geometry_difference(s.geometry, cache.geometry()); !d.empty())
    return invalid_argument("snapshot: another cache geometry: " + d);
  const DType ck = cache.config().key_type(), cv = cache.config().value_type();
  if (s.k_dtype != ck || s.v_dtype != cv) {
    if (s.k_dtype == s.v_dtype && ck == cv)
      return invalid_argument(str_cat("snapshot: kv dtype ", to_string(s.k_dtype),
                                      ", this cache stores ", to_string(ck),
                                      " (build the cache with kv dtype ", to_string(s.k_dtype),
                                      ")"));
    return invalid_argument(str_cat("snapshot: K/V stored as k ", to_string(s.k_dtype), ", v ",
                                    to_string(s.v_dtype), "; this cache stores k ", to_string(ck),
                                    ", v ", to_string(cv), " (build the cache with k_dtype ",
                                    to_string(s.k_dtype), " and v_dtype ", to_string(s.v_dtype),
                                    ")"));
  }
  if (s.rotated != cache.config().rotated())
    return invalid_argument(str_cat("snapshot: K/V stored ", s.rotated ? "rotated" : "unrotated",
                                    ", this cache stores them ",
                                    cache.config().rotated() ? "rotated" : "unrotated",
                                    " (build the cache with kv_rotate ",
                                    s.rotated ? "on" : "off", ")"));
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.tokens[i] >= vocab)
      return invalid_argument(str_cat("snapshot: token ", i, " = ", s.tokens[i],
                                      ", expected < the model's vocabulary of ", vocab));
  return ok_status();
}

Status restore_snapshot(CacheControl& cache, int32_t seq, const Snapshot& s, uint64_t fingerprint,
                        int32_t vocab) {
  KVCACHE_RETURN_IF_ERROR(check_snapshot(s, fingerprint, cache, vocab));
  if (cache.pos(seq) != 0)
    return failed_precondition(str_cat("restore snapshot: sequence ", seq, " holds ",
                                       cache.pos(seq), " positions, expected an empty sequence"));
  return cache.write_rows(seq, 0, s.positions, s.layers);
}

}  // namespace kvcache::engine
