// The perplexity baseline file. See kl_base_file.h.
#include "kl_base_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "core/str_cat.h"
#include "program/byte_writer.h"

namespace kvcache::tools {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'P', 'P', 'L', 'K', 'L', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;
constexpr uint64_t kMaxVocab = uint64_t{1} << 24;

std::vector<uint8_t> encode(const KlBaseHeader& h) {
  program::ByteWriter w;
  w.put_bytes(kMagic, sizeof(kMagic));
  for (uint32_t v : {kVersion, h.vocab, h.ctx, h.windows}) w.put<uint32_t>(v);
  for (uint64_t v : {h.tokens, h.fingerprint, h.rows}) w.put<uint64_t>(v);
  return w.take();
}

template <typename T>
T field(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));
  return v;
}

// The header's fields against this run's, in the order a user would fix them.
Status check_header(const uint8_t* b, const KlBaseHeader& want) {
  if (std::memcmp(b, kMagic, sizeof(kMagic)) != 0)
    return invalid_argument("not a kvcache perplexity base file (bad magic)");
  if (const auto v = field<uint32_t>(b + 8); v != kVersion)
    return invalid_argument(str_cat("format version ", v, ", this build reads ", kVersion));
  if (const auto v = field<uint32_t>(b + 12); v != want.vocab)
    return invalid_argument(
        str_cat("vocabulary of ", v, " in the base, ", want.vocab, " in this model"));
  if (const auto v = field<uint32_t>(b + 16); v != want.ctx)
    return invalid_argument(str_cat("made with --ctx ", v, ", this run has --ctx ", want.ctx));
  const auto windows = field<uint32_t>(b + 20);
  const auto tokens = field<uint64_t>(b + 24);
  if (windows != want.windows || tokens != want.tokens)
    return invalid_argument(str_cat("made over ", tokens, " tokens (", windows,
                                    " windows), this run has ", want.tokens, " (", want.windows,
                                    " windows): another --text-file?"));
  if (const auto v = field<uint64_t>(b + 32); v != want.fingerprint)
    return invalid_argument(str_cat("made from other tokens (fingerprint ", v, ", this text ",
                                    want.fingerprint, "): another --text-file or tokenizer?"));
  if (const auto v = field<uint64_t>(b + 40); v != want.rows)
    return invalid_argument(str_cat("holds ", v, " rows, expected ", want.rows));
  return ok_status();
}

Status io_error(const std::string& path, const char* what) {
  return data_loss(str_cat(path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

uint64_t token_fingerprint(std::span<const int32_t> ids) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int i = 0; i < 4; ++i) {
      h ^= (u >> (8 * i)) & 0xFFu;
      h *= 0x100000001b3ull;  // FNV-1a prime
    }
  }
  return h;
}

bool kl_base_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<KlBaseReader> KlBaseReader::open(const std::string& path, const KlBaseHeader& want) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument(str_cat(path, ": not a regular file"));
  KlBaseReader r;
  r.path_ = path;
  r.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.file_) return not_found(str_cat(path, ": cannot open: ", std::strerror(errno)));
  uint8_t header[kHeaderBytes];
  if (std::fread(header, 1, kHeaderBytes, r.file_.get()) != kHeaderBytes)
    return invalid_argument(str_cat(path, ": ", st.st_size, " bytes, shorter than the ",
                                    kHeaderBytes, "-byte header"));
  if (Status s = check_header(header, want); !s.ok())
    return invalid_argument(str_cat(path, ": ", s.message()));
  // Sizes come from this run (vocab, rows), not the file: the checks above made them equal.
  if (want.vocab > kMaxVocab || want.rows > std::numeric_limits<uint64_t>::max() / 4 / kMaxVocab)
    return invalid_argument(str_cat(path, ": ", want.rows, " rows of ", want.vocab,
                                    " floats is too large"));
  const uint64_t size = kHeaderBytes + want.rows * want.vocab * sizeof(float);
  if (static_cast<uint64_t>(st.st_size) != size)
    return invalid_argument(str_cat(path, ": ", st.st_size, " bytes, expected ", size,
                                    " for its header (truncated or corrupt)"));
  return r;
}

Status KlBaseReader::next(std::span<float> row) {
  if (std::fread(row.data(), sizeof(float), row.size(), file_.get()) != row.size())
    return data_loss(str_cat(path_, ": the file ended early"));
  return ok_status();
}

KlBaseWriter::~KlBaseWriter() {
  if (!file_) return;  // finished or moved from
  file_.reset();
  std::remove((path_ + ".part").c_str());
}

Result<KlBaseWriter> KlBaseWriter::create(const std::string& path, const KlBaseHeader& header) {
  KlBaseWriter w;
  w.path_ = path;
  w.want_rows_ = header.rows;
  w.file_.reset(std::fopen((path + ".part").c_str(), "wb"));
  if (!w.file_) return io_error(path + ".part", "cannot create");
  const std::vector<uint8_t> bytes = encode(header);
  if (std::fwrite(bytes.data(), 1, bytes.size(), w.file_.get()) != bytes.size())
    return io_error(path + ".part", "write failed");
  return w;
}

Status KlBaseWriter::append(std::span<const float> row) {
  if (std::fwrite(row.data(), sizeof(float), row.size(), file_.get()) != row.size())
    return io_error(path_ + ".part", "write failed");
  ++rows_;
  return ok_status();
}

Status KlBaseWriter::finish() {
  if (rows_ != want_rows_)
    return internal_error(str_cat(path_, ": ", rows_, " rows written, expected ", want_rows_));
  if (std::fclose(file_.release()) != 0) return io_error(path_ + ".part", "close failed");
  if (std::rename((path_ + ".part").c_str(), path_.c_str()) != 0)
    return io_error(path_, "cannot rename the .part file");
  return ok_status();
}

}  // namespace kvcache::tools
