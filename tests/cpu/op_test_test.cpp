// op-test as a library: malformed cases are refused with the right code and a message naming
// the problem, and write nothing; a good case writes result.json and its outputs; .npy files
// round-trip and hostile headers are refused.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "op_test/npy.h"
#include "op_test/op_test.h"

namespace kvcache::tools {
namespace {

namespace fs = std::filesystem;

class OpTestCases : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvcache_op_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "case");
    std::vector<float> q(2 * 2 * 4, 0.5f), kv(2 * 1 * 4, 0.25f);
    const int64_t qs[] = {2, 2, 4}, ks[] = {2, 1, 4};
    ASSERT_TRUE(write_npy(dir_ / "case" / "q.npy", qs, q).ok());
    ASSERT_TRUE(write_npy(dir_ / "case" / "k.npy", ks, kv).ok());
    ASSERT_TRUE(write_npy(dir_ / "case" / "v.npy", ks, kv).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A valid sequence case whose text a test may break with a replacement.
  std::string good_case() const {
    return R"({"kind": "sequence",
      "geometry": [{"kv_heads": 1, "head_dim": 4, "value_dim": 4, "window": 0}],
      "config": {"capacity": 8, "kv_dtype": "f16"},
      "q_heads": [2],
      "steps": [{"verbs": [{"op": "clear"}],
                 "layers": [{"layer": 0, "q": "q.npy", "k": "k.npy", "v": "v.npy"}]}]})";
  }
  Status run(const std::string& text) {
    std::ofstream(dir_ / "case" / "case.json") << text;
    return run_op_test(dir_ / "case", dir_ / "out");
  }
  static std::string replaced(std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  }
  fs::path dir_;
};

TEST_F(OpTestCases, GoodCaseWritesResultAndOutput) {
  ASSERT_TRUE(run(good_case()).ok());
  Result<NpyArray> out = read_npy(dir_ / "out" / "s0_l0.npy");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->shape, (std::vector<int64_t>{2, 2, 4}));
  EXPECT_FLOAT_EQ(out->data[0], 0.25f);  // every value row is 0.25
  std::ifstream r(dir_ / "out" / "result.json");
  std::string text((std::istreambuf_iterator<char>(r)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"ok\": true"), std::string::npos) << text;
  EXPECT_NE(text.find("\"verbs\": [\n        true\n      ]"), std::string::npos) << text;
}

TEST_F(OpTestCases, MalformedCasesAreRefusedWithCodeAndWriteNothing) {
  struct Bad {
    std::string from, to, code_name, needle;
  };
  const std::vector<Bad> bad = {
      {"\"sequence\"", "\"paged\"", "invalid_argument", "unknown kind 'paged'"},
      {"\"f16\"", "\"q4\"", "invalid_argument", "unknown kv_dtype 'q4'"},
      {"\"clear\"", "\"fork\"", "invalid_argument", "unknown op 'fork'"},
      {"\"q.npy\"", "\"missing.npy\"", "not_found", "missing.npy"},
      {"\"k.npy\", \"v\"", "\"q.npy\", \"v\"", "invalid_argument", "k has shape [2,2,4]"},
      {"\"q_heads\": [2]", "\"q_heads\": [2, 2]", "invalid_argument", "one integer per cache"},
      {"\"capacity\": 8", "\"capacity\": 0", "invalid_argument", "capacity = 0"},
      {"\"steps\": [", "\"steps\": [[", "invalid_argument", "case.json"},
      {"\"q.npy\"", "\"../q.npy\"", "invalid_argument", "plain name"},
  };
  for (const Bad& b : bad) {
    fs::remove_all(dir_ / "out");
    Status st = run(replaced(good_case(), b.from, b.to));
    EXPECT_EQ(std::string(to_string(st.code())), b.code_name) << b.to << ": " << st.to_string();
    EXPECT_NE(st.message().find(b.needle), std::string::npos) << st.to_string();
    EXPECT_FALSE(fs::exists(dir_ / "out" / "result.json")) << b.to;
  }
  EXPECT_EQ(run("{not json").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op_test(dir_ / "nowhere", dir_ / "out").code(), StatusCode::kNotFound);
}

TEST_F(OpTestCases, RefusedStepIsAResultNotAnError) {
  // 3 q heads over 1 kv head is fine; over 2 kv heads the step is refused.
  std::string text = replaced(good_case(), "\"kv_heads\": 1", "\"kv_heads\": 2");
  text = replaced(text, "\"q_heads\": [2]", "\"q_heads\": [3]");
  std::vector<float> q(2 * 3 * 4), kv(2 * 2 * 4);
  const int64_t qs[] = {2, 3, 4}, ks[] = {2, 2, 4};
  ASSERT_TRUE(write_npy(dir_ / "case" / "q.npy", qs, q).ok());
  ASSERT_TRUE(write_npy(dir_ / "case" / "k.npy", ks, kv).ok());
  ASSERT_TRUE(write_npy(dir_ / "case" / "v.npy", ks, kv).ok());
  ASSERT_TRUE(run(text).ok());
  std::ifstream r(dir_ / "out" / "result.json");
  std::string json((std::istreambuf_iterator<char>(r)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"code\": \"invalid_argument\""), std::string::npos) << json;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "s0_l0.npy"));
}

TEST_F(OpTestCases, MaxSeqsBoundsTheCellLayoutsIdsAndIsRefusedElsewhere) {
  std::string cell = replaced(good_case(), "\"sequence\"", "\"cell\"");
  cell = replaced(cell, "[{\"op\": \"clear\"}]", "[{\"op\": \"seq_new\"}, {\"op\": \"seq_new\"}]");
  cell = replaced(cell, "\"layers\": [{", "\"seq_ids\": [0, 0], \"layers\": [{");
  // max_seqs = 1: the second seq_new is refused (null) and the step on sequence 0 runs.
  ASSERT_TRUE(run(replaced(cell, "\"f16\"", "\"f16\", \"max_seqs\": 1")).ok());
  std::ifstream r(dir_ / "out" / "result.json");
  std::string text((std::istreambuf_iterator<char>(r)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"verbs\": [\n        0,\n        null\n      ]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ok\": true"), std::string::npos) << text;
  // Unset, the default bound (kDefaultCellSeqs) gives the second id.
  ASSERT_TRUE(run(cell).ok());
  std::ifstream r2(dir_ / "out" / "result.json");
  text.assign((std::istreambuf_iterator<char>(r2)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"verbs\": [\n        0,\n        1\n      ]"), std::string::npos) << text;

  fs::remove_all(dir_ / "out");
  Status zero = run(replaced(cell, "\"f16\"", "\"f16\", \"max_seqs\": 0"));
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("max_seqs = 0, expected >= 1 when set"), std::string::npos)
      << zero.to_string();
  Status wide = run(replaced(cell, "\"f16\"", "\"f16\", \"max_seqs\": 4294967296"));
  EXPECT_NE(wide.message().find("must be an integer in ["), std::string::npos) << wide.to_string();
  Status seq = run(replaced(good_case(), "\"f16\"", "\"f16\", \"max_seqs\": 2"));
  EXPECT_EQ(seq.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(seq.message().find("\"max_seqs\" applies to the cell kind only"), std::string::npos)
      << seq.to_string();
  EXPECT_FALSE(fs::exists(dir_ / "out" / "result.json"));
}

TEST_F(OpTestCases, CaseFilesMustBeRegularFilesInsideTheCaseDirectory) {
  struct Setup {
    std::string what, needle;
    void (*make)(const fs::path& dir);
  };
  const std::vector<Setup> setups = {
      {"an array symlinked outside", "outside the directory",
       [](const fs::path& d) {
         fs::rename(d / "case" / "q.npy", d / "q_outside.npy");
         fs::create_symlink(d / "q_outside.npy", d / "case" / "q.npy");
       }},
      {"an array that is a FIFO", "is a FIFO",
       [](const fs::path& d) {
         fs::remove(d / "case" / "k.npy");
         ASSERT_EQ(::mkfifo((d / "case" / "k.npy").c_str(), 0600), 0);
       }},
      {"an array that is a directory", "is a directory",
       [](const fs::path& d) {
         fs::remove(d / "case" / "v.npy");
         fs::create_directory(d / "case" / "v.npy");
       }},
  };
  for (const Setup& s : setups) {
    TearDown();
    SetUp();
    s.make(dir_);
    Status st = run(good_case());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << s.what << ": " << st.to_string();
    EXPECT_NE(st.message().find(s.needle), std::string::npos) << s.what << ": " << st.to_string();
    EXPECT_FALSE(fs::exists(dir_ / "out")) << s.what;
  }
  // case.json itself: a directory, or a link out of the case directory.
  TearDown();
  SetUp();
  fs::create_directory(dir_ / "case" / "case.json");
  EXPECT_NE(run_op_test(dir_ / "case", dir_ / "out").message().find("is a directory"),
            std::string::npos);
  fs::remove(dir_ / "case" / "case.json");
  std::ofstream(dir_ / "elsewhere.json") << good_case();
  fs::create_symlink(dir_ / "elsewhere.json", dir_ / "case" / "case.json");
  EXPECT_NE(run_op_test(dir_ / "case", dir_ / "out").message().find("outside the directory"),
            std::string::npos);
}

TEST_F(OpTestCases, IntegersOutsideTheirTypeAreRefusedNotTruncated) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"\"kv_heads\": 1", "\"kv_heads\": 4294967297"},  // would truncate to 1
      {"\"capacity\": 8", "\"capacity\": 18446744073709551615"},
      {"\"layer\": 0", "\"layer\": -4294967296"},
      {"\"kv_heads\": 1", "\"kv_heads\": 1.5"},
  };
  for (const auto& [from, to] : bad) {
    Status st = run(replaced(good_case(), from, to));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << to << ": " << st.to_string();
    EXPECT_NE(st.message().find("must be an integer in ["), std::string::npos) << st.to_string();
  }
  Status q = run(replaced(good_case(), "\"q_heads\": [2]", "\"q_heads\": [0]"));
  EXPECT_NE(q.message().find("q_heads entries must be in [1, 65536]"), std::string::npos);
  Status cap = run(replaced(good_case(), "\"q_heads\": [2]", "\"q_heads\": [2], \"softcap\": -1"));
  EXPECT_NE(cap.message().find("\"softcap\" must be a finite number >= 0"), std::string::npos);
}

TEST_F(OpTestCases, AnOutputSizedByTheGeometryIsBoundedBeforeAllocating) {
  // T = 2 tokens x 2 q heads x value_dim 2^28 floats: 4 GiB from a few hundred bytes of files.
  Status st = run(replaced(good_case(), "\"value_dim\": 4", "\"value_dim\": 268435456"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("the output [2, 2, 268435456] would exceed 1073741824 bytes"),
            std::string::npos) << st.to_string();
}

TEST_F(OpTestCases, ACacheOverTheByteBoundIsRefusedBeforeAllocating) {
  std::ofstream(dir_ / "case" / "case.json")
      << replaced(good_case(), "\"capacity\": 8", "\"capacity\": 2147483647");
  OpTestOptions o;
  o.max_cache_bytes = int64_t{64} << 20;
  Status st = run_op_test(dir_ / "case", dir_ / "out", o);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("capacity 2147483647 would need more than 67108864 bytes"),
            std::string::npos) << st.to_string();
}

TEST_F(OpTestCases, NpyRefusesOtherDtypesAndTruncation) {
  // A float64 header.
  std::string f64 = std::string("\x93NUMPY\x01\x00", 8);
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
  header.append(128 - 10 - header.size() - 1, ' ');  // total a multiple of 64
  header += '\n';
  f64 += static_cast<char>(header.size());
  f64 += '\0';
  f64 += header + std::string(8, '\0');
  std::ofstream(dir_ / "f64.npy", std::ios::binary) << f64;
  Result<NpyArray> r = read_npy(dir_ / "f64.npy");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'<f8'"), std::string::npos) << r.status().message();
  // Truncated data: the shape says 4 floats, the file holds 3.
  const int64_t shape[] = {4};
  std::vector<float> four = {1, 2, 3, 4};
  ASSERT_TRUE(write_npy(dir_ / "t.npy", shape, four).ok());
  fs::resize_file(dir_ / "t.npy", fs::file_size(dir_ / "t.npy") - 4);
  EXPECT_EQ(read_npy(dir_ / "t.npy").status().code(), StatusCode::kDataLoss);
  std::ofstream(dir_ / "junk.npy") << "hello";
  EXPECT_EQ(read_npy(dir_ / "junk.npy").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(OpTestCases, NpyRoundTripsShapeAndData) {
  const int64_t shape[] = {2, 3, 1};
  std::vector<float> data = {1, -2, 3.5f, 4, 5, 6};
  ASSERT_TRUE(write_npy(dir_ / "a.npy", shape, data).ok());
  Result<NpyArray> r = read_npy(dir_ / "a.npy");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(r->data, data);
}

}  // namespace
}  // namespace kvcache::tools
