// libFuzzer target for op-test case directories: the input is case.json's text followed by
// files, each introduced by a line "\n@@@ NAME\n" (NAME a plain file name); they are written
// to a fresh temporary directory and run through run_op_test (parse, load every array, run
// the steps, write the outputs). Caches above 64 MiB at capacity are refused up front.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "op_test/op_test.h"

namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A per-process scratch directory, emptied before every input.
const fs::path& scratch() {
  static const fs::path dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "kvcache_op_test_fuzz_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return fs::path(tmpl);
  }();
  return dir;
}

}  // namespace

int kvcache::fuzz::op_test_one(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const fs::path dir = scratch() / "case";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) std::abort();
  constexpr std::string_view kMark = "\n@@@ ";
  size_t at = in.find(kMark);
  write(dir / "case.json", in.substr(0, at));
  while (at != std::string_view::npos) {
    const size_t name_at = at + kMark.size();
    const size_t eol = in.find('\n', name_at);
    if (eol == std::string_view::npos) break;
    const std::string name(in.substr(name_at, eol - name_at));
    at = in.find(kMark, eol);
    const std::string_view body = in.substr(eol + 1, at == std::string_view::npos ? at : at - eol - 1);
    if (name.empty() || name.size() > 64 || name.find('/') != std::string::npos || name == "." ||
        name == ".." || name.find('\0') != std::string::npos)
      continue;
    write(dir / name, body);
  }
  tools::OpTestOptions options;
  options.threads = 1;
  options.max_cache_bytes = int64_t{64} << 20;
  (void)tools::run_op_test(dir, dir / "out", options);
  return 0;
}

KVCACHE_FUZZ_ENTRY(kvcache::fuzz::op_test_one)
