#include "program/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvcache {

Result<FileBytes> FileBytes::map(const std::string& path, std::string_view what) {
  const std::string op(what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string m = op + ": cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? not_found(m) : invalid_argument(m);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(op + ": '" + path + "' is not a regular file");
  }
  FileBytes f;
  if (st.st_size > 0) {
    const auto size = static_cast<size_t>(st.st_size);
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return invalid_argument(op + ": cannot map '" + path + "': " + std::strerror(err));
    }
    f.map_ = m;
    f.map_size_ = size;
    f.bytes_ = {static_cast<const uint8_t*>(m), size};
  }
  ::close(fd);
  return f;
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
