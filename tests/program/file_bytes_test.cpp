// The checked file reader (program/file_bytes.h): regular files only, refused by kind by name,
// size-capped before reading, and confined to a directory when asked (symlinks resolved); a
// file read into huge pages holds exactly the mapped bytes, under the same checks.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/huge_pages.h"
#include "program/file_bytes.h"
#include "test_util.h"

namespace kvcache {
namespace {

namespace fs = std::filesystem;

class FileBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::temp_dir("file_bytes");
    dir_ = root_ / "case";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_, dir_;
};

TEST_F(FileBytesTest, ReadsARegularFileWhole) {
  testing::write_text(dir_ / "a.json", "{\"x\": 1}");
  auto r = read_file((dir_ / "a.json").string(), {"test", 100, dir_.string()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "{\"x\": 1}");
}

TEST_F(FileBytesTest, MissingIsNotFound) {
  auto r = read_file((dir_ / "none.json").string(), {"test", 100, ""});
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("none.json"), std::string::npos);
}

TEST_F(FileBytesTest, DirectoryFifoAndDeviceAreRefusedByName) {
  auto d = read_file(dir_.string(), {"test", 100, ""});
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("is a directory, expected a regular file"),
            std::string::npos) << d.status().message();
  const fs::path fifo = dir_ / "pipe.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = read_file(fifo.string(), {"npy", 100, dir_.string()});  // must not block
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("is a FIFO"), std::string::npos) << f.status().message();
  auto m = FileBytes::map(fifo.string(), "gguf");
  EXPECT_NE(m.status().message().find("gguf: '" + fifo.string() + "' is a FIFO"),
            std::string::npos) << m.status().message();
  auto dev = read_file("/dev/zero", {"config.json", 100, ""});
  EXPECT_NE(dev.status().message().find("is a character device"), std::string::npos)
      << dev.status().message();
}

TEST_F(FileBytesTest, AFileOverItsCapIsRefusedBeforeReading) {
  testing::write_text(dir_ / "big.json", std::string(11, 'x'));
  auto r = read_file((dir_ / "big.json").string(), {"config.json", 10, ""});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is 11 bytes, expected <= 10"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(read_file((dir_ / "big.json").string(), {"config.json", 11, ""}).ok());
}

TEST_F(FileBytesTest, SymlinksMayPointInsideTheirDirectoryButNotOutside) {
  testing::write_text(root_ / "secret.txt", "outside");
  testing::write_text(dir_ / "inside.npy", "inside");
  fs::create_symlink(root_ / "secret.txt", dir_ / "escape.npy");
  fs::create_symlink("inside.npy", dir_ / "alias.npy");
  auto out = read_file((dir_ / "escape.npy").string(), {"npy", 100, dir_.string()});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("outside the directory"), std::string::npos)
      << out.status().message();
  auto dotdot = read_file((dir_ / ".." / "secret.txt").string(), {"npy", 100, dir_.string()});
  EXPECT_EQ(dotdot.status().code(), StatusCode::kInvalidArgument);
  auto in = read_file((dir_ / "alias.npy").string(), {"npy", 100, dir_.string()});
  ASSERT_TRUE(in.ok()) << in.status().message();
  EXPECT_EQ(*in, "inside");
  auto mapped = FileBytes::map((dir_ / "escape.npy").string(), {"safetensors", 100, dir_.string()});
  EXPECT_EQ(mapped.status().code(), StatusCode::kInvalidArgument);
  // Without a directory rule the same link is fine (a model path the user names).
  EXPECT_TRUE(read_file((dir_ / "escape.npy").string(), {"npy", 100, ""}).ok());
}

TEST_F(FileBytesTest, ReadIntoHugePagesHoldsTheMappedBytesUnderTheSameChecks) {
  // 2 MiB + 3 bytes of a pattern: one whole huge page and a tail.
  std::string text((size_t{2} << 20) + 3, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>((i * 131 + 7) % 251);
  testing::write_text(dir_ / "w.gguf", text);
  const FileRule rule{"gguf", file_limits::kModel, ""};
  auto huge = FileBytes::read_huge((dir_ / "w.gguf").string(), rule);
  auto mapped = FileBytes::map((dir_ / "w.gguf").string(), rule);
  ASSERT_TRUE(huge.ok()) << huge.status().message();
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  ASSERT_EQ(huge->bytes().size(), text.size());
  EXPECT_TRUE(std::equal(huge->bytes().begin(), huge->bytes().end(), mapped->bytes().begin()));
  if (cpu::huge_pages_available()) {  // starts on a huge page, as placed
    EXPECT_EQ(reinterpret_cast<uintptr_t>(huge->bytes().data()) % (uintptr_t{2} << 20), 0u);
  }
  FileBytes moved = std::move(huge).value();  // the bytes stay where they are
  EXPECT_EQ(moved.bytes().size(), text.size());
  EXPECT_EQ(moved.bytes()[text.size() - 1], static_cast<uint8_t>(text.back()));

  testing::write_text(dir_ / "empty.gguf", "");
  auto empty = FileBytes::read_huge((dir_ / "empty.gguf").string(), rule);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_TRUE(empty->bytes().empty());
  auto missing = FileBytes::read_huge((dir_ / "none.gguf").string(), rule);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = FileBytes::read_huge(dir_.string(), rule);
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("gguf: '" + dir_.string() + "' is a directory"),
            std::string::npos) << dir.status().message();
  auto capped = FileBytes::read_huge((dir_ / "w.gguf").string(), {"gguf", 100, ""});
  EXPECT_NE(capped.status().message().find("bytes, expected <= 100"), std::string::npos)
      << capped.status().message();
}

// A file is copied into huge pages only when it takes at most half of the available memory;
// an unknown figure keeps the mapping.
TEST(FileBytesHuge, TheCopyNeedsHalfTheAvailableMemory) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_TRUE(FileBytes::copy_fits(4 * kGiB, 8 * kGiB));
  EXPECT_FALSE(FileBytes::copy_fits(4 * kGiB + 1, 8 * kGiB));
  EXPECT_FALSE(FileBytes::copy_fits(40 * kGiB, 60 * kGiB));
  EXPECT_FALSE(FileBytes::copy_fits(1, std::nullopt));
  EXPECT_TRUE(FileBytes::copy_fits(0, 0));
#if defined(__linux__)
  const std::optional<uint64_t> avail = FileBytes::available_memory();
  ASSERT_TRUE(avail.has_value());  // Linux reports MemAvailable
  EXPECT_GT(*avail, uint64_t{1} << 20);
#endif
}

}  // namespace
}  // namespace kvcache
