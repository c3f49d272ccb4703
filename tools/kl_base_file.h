// `kvcache perplexity --kl-base FILE`: the baseline file holding the full next-token
// log-probabilities of every scored position of a run, so a later run (another K/V type) can
// report KL divergence and top-1 agreement against it. Layer: tools. The format (little-endian,
// docs/perplexity.md): a 48-byte header — magic "KVPPLKL\0", u32 version, u32 vocab, u32 ctx,
// u32 windows, u64 tokens, u64 token fingerprint, u64 rows — then rows x vocab float32, window
// by window in position order. It reads and writes rows; it computes no divergence.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace kvcache::tools {

struct KlBaseHeader {
  uint32_t vocab = 0;
  uint32_t ctx = 0;           // tokens per window
  uint32_t windows = 0;
  uint64_t tokens = 0;        // windows x ctx: every token run
  uint64_t fingerprint = 0;   // token_fingerprint() of those tokens
  uint64_t rows = 0;          // scored positions: windows x (ctx - ctx / 2)
};

// FNV-1a (64-bit) over the ids' little-endian bytes: which tokens a base was made from.
uint64_t token_fingerprint(std::span<const int32_t> ids);

// Whether `path` names an existing file (of any kind: a directory is then refused by open).
bool kl_base_exists(const std::string& path);

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Reads a base row by row. Move-only.
class KlBaseReader {
 public:
  // Opens `path` and checks its header and size against `want` (this run's). InvalidArgument
  // naming the file and what differs (magic, version, vocab, ctx, token count, fingerprint,
  // size); NotFound when it cannot be opened.
  static Result<KlBaseReader> open(const std::string& path, const KlBaseHeader& want);
  // The next row (vocab floats). DataLoss when the file ends early.
  Status next(std::span<float> row);

 private:
  std::string path_;
  FilePtr file_;
};

// Writes a base to `path` + ".part" and renames it to `path` on finish(), so an interrupted
// run leaves no file a later run would read. Move-only.
class KlBaseWriter {
 public:
  KlBaseWriter() = default;
  KlBaseWriter(KlBaseWriter&&) = default;
  KlBaseWriter& operator=(KlBaseWriter&&) = default;
  ~KlBaseWriter();  // unfinished: removes the .part file
  static Result<KlBaseWriter> create(const std::string& path, const KlBaseHeader& header);
  Status append(std::span<const float> row);
  // Checks that header.rows rows were written, closes and renames.
  Status finish();

 private:
  std::string path_;
  FilePtr file_;
  uint64_t want_rows_ = 0, rows_ = 0;
};

}  // namespace kvcache::tools
