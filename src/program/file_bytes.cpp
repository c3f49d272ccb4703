#include "program/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/str_cat.h"
#include "cpu/huge_pages.h"

namespace kvcache {
namespace {

// An open descriptor of a checked regular file; closes itself.
struct OpenFile {
  int fd = -1;
  uint64_t size = 0;
  OpenFile() = default;
  OpenFile(OpenFile&& o) noexcept : fd(std::exchange(o.fd, -1)), size(o.size) {}
  OpenFile& operator=(OpenFile&&) = delete;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

Result<std::string> real_path(const std::string& path, const std::string& op) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    const int err = errno;
    std::string m = op + ": cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? not_found(m) : invalid_argument(m);
  }
  return std::string(buf);
}

Result<OpenFile> open_checked(const std::string& path, const FileRule& rule) {
  const std::string op(rule.what);
  std::string target = path;
  if (!rule.within.empty()) {
    Result<std::string> dir = real_path(rule.within, op);
    if (!dir.ok()) return dir.status();
    Result<std::string> real = real_path(path, op);
    if (!real.ok()) return real.status();
    const std::string prefix = *dir == "/" ? *dir : *dir + "/";
    if (real->compare(0, prefix.size(), prefix) != 0)
      return invalid_argument(op + ": '" + path + "' resolves to '" + *real +
                              "', outside the directory '" + rule.within + "'");
    target = *real;
  }
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  OpenFile f;
  f.fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (f.fd < 0) {
    const int err = errno;
    std::string m = op + ": cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? not_found(m) : invalid_argument(m);
  }
  struct stat st {};
  if (fstat(f.fd, &st) != 0)
    return invalid_argument(op + ": cannot stat '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return invalid_argument(op + ": '" + path + "' is " + kind_of(st.st_mode) +
                            ", expected a regular file");
  f.size = static_cast<uint64_t>(st.st_size);
  if (f.size > rule.max_bytes)
    return invalid_argument(str_cat(op, ": '", path, "' is ", f.size,
                                    " bytes, expected <= ", rule.max_bytes));
  return f;
}

}  // namespace

Result<std::string> read_file(const std::string& path, const FileRule& rule) {
  Result<OpenFile> f = open_checked(path, rule);
  if (!f.ok()) return f.status();
  std::string out(static_cast<size_t>(f->size), '\0');
  size_t got = 0;
  while (got < out.size()) {  // never more than the size checked above
    const ssize_t n = ::read(f->fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return data_loss(std::string(rule.what) + ": reading '" + path + "' failed: " +
                       std::strerror(errno));
    if (n == 0) break;  // the file shrank since fstat
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

Result<FileBytes> FileBytes::map(const std::string& path, const FileRule& rule) {
  Result<OpenFile> f = open_checked(path, rule);
  if (!f.ok()) return f.status();
  FileBytes out;
  if (f->size > 0) {
    const auto size = static_cast<size_t>(f->size);
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (m == MAP_FAILED)
      return invalid_argument(std::string(rule.what) + ": cannot map '" + path + "': " +
                              std::strerror(errno));
    out.map_ = m;
    out.map_size_ = size;
    out.bytes_ = {static_cast<const uint8_t*>(m), size};
  }
  return out;
}

std::optional<uint64_t> FileBytes::available_memory() {
  // procfs reports a size of 0, so this reads lines (at most 64 of them) instead of read_file.
  std::ifstream in("/proc/meminfo");
  std::string line;
  for (int n = 0; n < 64 && std::getline(in, line); ++n) {
    constexpr std::string_view kKey = "MemAvailable:";
    if (line.compare(0, kKey.size(), kKey) != 0) continue;
    const char* p = line.c_str() + kKey.size();
    while (*p == ' ') ++p;
    uint64_t kib = 0;
    const auto [end, ec] = std::from_chars(p, line.c_str() + line.size(), kib);
    if (ec != std::errc() || end == p || kib > (~uint64_t{0} >> 10)) return std::nullopt;
    return kib << 10;
  }
  return std::nullopt;
}

bool FileBytes::copy_fits(uint64_t file_bytes, std::optional<uint64_t> available) {
  return available.has_value() && file_bytes <= *available / 2;
}

Result<FileBytes> FileBytes::read_huge(const std::string& path, const FileRule& rule) {
  if (!cpu::huge_pages_available()) return map(path, rule);
  Result<OpenFile> f = open_checked(path, rule);
  if (!f.ok()) return f.status();
  if (!copy_fits(f->size, available_memory())) return map(path, rule);
  FileBytes out;
  if (f->size == 0) return out;
  constexpr auto kHuge = static_cast<size_t>(cpu::kHugePageBytes);
  const auto size = static_cast<size_t>(f->size);
  const size_t reserved = size + kHuge;  // room to start on a huge-page boundary
  void* m = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return resource_exhausted(str_cat(rule.what, ": reserving ", size, " bytes to read '", path,
                                      "' into failed: ", std::strerror(errno)));
  out.map_ = m;  // released with the whole reservation, whatever happens below
  out.map_size_ = reserved;
  const uintptr_t base = (reinterpret_cast<uintptr_t>(m) + kHuge - 1) & ~uintptr_t{kHuge - 1};
  auto* dst = reinterpret_cast<uint8_t*>(base);
  cpu::advise_huge_pages(dst, static_cast<int64_t>(size));
  size_t got = 0;
  while (got < size) {  // never more than the size checked above
    const ssize_t n = ::pread(f->fd, dst + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return data_loss(str_cat(rule.what, ": reading '", path, "' failed: ", std::strerror(errno)));
    if (n == 0)
      return data_loss(str_cat(rule.what, ": '", path, "' shrank to ", got,
                               " bytes while being read (", size, " when opened)"));
    got += static_cast<size_t>(n);
  }
  out.bytes_ = {dst, size};
  return out;
}

FileBytes FileBytes::copy(std::span<const uint8_t> bytes) {
  FileBytes f;
  f.owned_.assign(bytes.begin(), bytes.end());
  f.bytes_ = f.owned_;
  return f;
}

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this == &other) return *this;
  release();
  owned_ = std::move(other.owned_);
  map_ = std::exchange(other.map_, nullptr);
  map_size_ = std::exchange(other.map_size_, 0);
  // A moved vector keeps its buffer, so a copy's span stays valid; a mapping never moves.
  bytes_ = map_ != nullptr ? other.bytes_ : std::span<const uint8_t>(owned_);
  other.bytes_ = {};
  return *this;
}

FileBytes::~FileBytes() { release(); }

void FileBytes::release() {
  if (map_ != nullptr) munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  bytes_ = {};
}

}  // namespace kvcache
