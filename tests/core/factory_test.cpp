// Factory, registry and install guard (SPEC §5), driven with a fake Cache defined here.
#include "core/factory.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace kvcache {
namespace {

// A cache that only remembers what it was built with.
class FakeCache : public Cache {
 public:
  FakeCache(std::string_view kind, CacheGeometry g, CacheConfig c)
      : kind_(kind), geometry_(std::move(g)), config_(c) {}
  std::string_view kind() const override { return kind_; }
  const CacheGeometry& geometry() const override { return geometry_; }
  const CacheConfig& config() const override { return config_; }
  Result<int32_t> seq_new() override { return unimplemented("fake"); }
  Result<int32_t> seq_clone(int32_t, std::optional<int64_t>) override {
    return unimplemented("fake");
  }
  Status seq_rm(int32_t) override { return unimplemented("fake"); }
  Result<int32_t> open_seq() override { return unimplemented("fake"); }
  Result<UndoPoint> save_point(int32_t) override { return unimplemented("fake"); }
  Status rewind(int32_t, int64_t) override { return unimplemented("fake"); }
  int64_t pos(int32_t) const override { return 0; }
  int64_t seq_len(int32_t) const override { return 0; }
  int32_t max_seqs() const override { return 1; }
  int64_t capacity() const override { return config_.capacity; }
  int64_t free_cells() const override { return config_.capacity; }
  int64_t used_end() const override { return 0; }
  void clear() override {}
  Status declare_step(std::span<const int32_t>) override { return unimplemented("fake"); }
  Status update_and_attend(const AttendArgs&) override { return unimplemented("fake"); }
  Status attend(const AttendArgs&) override { return unimplemented("fake"); }
  int64_t allocated_bytes() const override { return 0; }

 private:
  std::string_view kind_;
  CacheGeometry geometry_;
  CacheConfig config_;
};

CacheBuilder fake_builder(std::string_view kind) {
  return [kind](const CacheGeometry& g, const CacheConfig& c) -> Result<std::shared_ptr<Cache>> {
    return std::shared_ptr<Cache>(std::make_shared<FakeCache>(kind, g, c));
  };
}

CacheGeometry geometry() { return CacheGeometry{{{2, 8, 8, 0}, {2, 8, 8, 4}}}; }

CacheConfig config(int64_t capacity) {
  CacheConfig c;
  c.capacity = capacity;
  return c;
}

TEST(Factory, EmptyFactoryDescribesNone) {
  CacheFactory f;
  EXPECT_EQ(f.describe(), "(none)");
}

TEST(Factory, BuildsARegisteredKind) {
  CacheFactory f;
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind, fake_builder(kCellKind)).ok());
  ASSERT_TRUE(f.add(kCpuBackend, kSequenceKind, fake_builder(kSequenceKind)).ok());
  auto r = f.build(kCpuBackend, kCellKind, geometry(), config(32));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->kind(), kCellKind);
  EXPECT_EQ((*r)->capacity(), 32);
  EXPECT_EQ((*r)->geometry(), geometry());
  EXPECT_EQ(f.describe(), "cpu/cell, cpu/sequence");
}

TEST(Factory, UnknownKindIsNotFoundNamingTheKindsThatExist) {
  CacheFactory f;
  ASSERT_TRUE(f.add(kCpuBackend, kSequenceKind, fake_builder(kSequenceKind)).ok());
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind, fake_builder(kCellKind)).ok());
  auto r = f.build(kCpuBackend, "paged", geometry(), config(32));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("cpu/paged"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("registered: cpu/cell, cpu/sequence"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(f.build("gpu", kCellKind, geometry(), config(32)).status().code(),
            StatusCode::kNotFound);
}

TEST(Factory, InvalidGeometryOrConfigIsInvalidArgumentWithTheReason) {
  CacheFactory f;
  int calls = 0;
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind,
                    [&calls](const CacheGeometry& g,
                             const CacheConfig& c) -> Result<std::shared_ptr<Cache>> {
                      ++calls;
                      return std::shared_ptr<Cache>(std::make_shared<FakeCache>(kCellKind, g, c));
                    })
                  .ok());
  CacheGeometry bad = geometry();
  bad.layers[1].head_dim = -3;
  auto r = f.build(kCpuBackend, kCellKind, bad, config(32));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers[1].head_dim = -3, expected > 0"),
            std::string::npos) << r.status().message();
  auto c = f.build(kCpuBackend, kCellKind, geometry(), config(0));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("capacity = 0, expected > 0"), std::string::npos);
  EXPECT_EQ(calls, 0);  // the builder never sees an invalid request
}

TEST(Factory, BuilderReturningNothingIsInternal) {
  CacheFactory f;
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind,
                    [](const CacheGeometry&, const CacheConfig&) -> Result<std::shared_ptr<Cache>> {
                      return std::shared_ptr<Cache>();
                    })
                  .ok());
  auto r = f.build(kCpuBackend, kCellKind, geometry(), config(8));
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("cpu/cell"), std::string::npos);
}

TEST(Factory, DuplicateOrEmptyRegistrationIsRefusedAndTheExistingBuilderKept) {
  CacheFactory f;
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind, fake_builder(kCellKind)).ok());
  Status dup = f.add(kCpuBackend, kCellKind, fake_builder(kSequenceKind));
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dup.message().find("already registered"), std::string::npos);
  EXPECT_EQ(f.add(kCpuBackend, kCellKind, CacheBuilder()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.add("", kCellKind, fake_builder(kCellKind)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.add(kCpuBackend, "", fake_builder(kCellKind)).code(),
            StatusCode::kInvalidArgument);
  auto r = f.build(kCpuBackend, kCellKind, geometry(), config(8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->kind(), kCellKind);  // the first builder, not the duplicate
  EXPECT_EQ(f.describe(), "cpu/cell");
}

std::shared_ptr<Cache> fake(int64_t capacity = 8) {
  return std::make_shared<FakeCache>(kCellKind, geometry(), config(capacity));
}

TEST(Registry, InstallGuardInstallsAndErases) {
  CacheRegistry reg;
  std::string key;
  {
    InstallGuard guard(fake(), reg);
    key = guard.key();
    EXPECT_FALSE(key.empty());
    EXPECT_EQ(reg.size(), 1u);
    ASSERT_NE(reg.find(key), nullptr);
    EXPECT_EQ(reg.find(key)->capacity(), 8);
  }
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.find(key), nullptr);
}

TEST(Registry, SharedOwnershipKeepsTheCacheAliveAfterErase) {
  CacheRegistry reg;
  std::weak_ptr<Cache> weak;
  std::shared_ptr<Cache> held;
  {
    auto cache = fake(24);
    weak = cache;
    InstallGuard guard(std::move(cache), reg);
    held = reg.find(guard.key());
  }
  EXPECT_EQ(reg.size(), 0u);
  ASSERT_FALSE(weak.expired());
  EXPECT_EQ(held->capacity(), 24);
  held.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(Registry, MovedGuardErasesOnce) {
  CacheRegistry reg;
  InstallGuard a(fake(), reg);
  const std::string key = a.key();
  {
    InstallGuard b(std::move(a));
    EXPECT_EQ(b.key(), key);
    EXPECT_TRUE(a.key().empty());  // NOLINT: checking the moved-from state
    EXPECT_EQ(reg.size(), 1u);
  }
  EXPECT_EQ(reg.find(key), nullptr);
}

TEST(Registry, InstallRefusesDuplicatesAndEmpties) {
  CacheRegistry reg;
  ASSERT_TRUE(reg.install("k", fake()).ok());
  EXPECT_EQ(reg.install("k", fake()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reg.install("", fake()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.install("x", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_TRUE(reg.erase("k"));
  EXPECT_FALSE(reg.erase("k"));
}

TEST(Registry, KeysAreUniqueUnderConcurrentMinting) {
  CacheRegistry reg;
  constexpr int kThreads = 6, kPerThread = 500;
  std::vector<std::vector<std::string>> keys(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&reg, &keys, t] {
      for (int i = 0; i < kPerThread; ++i) {
        InstallGuard g(fake(), reg);
        keys[t].push_back(g.key());
        keys[t].push_back(reg.mint_key());
      }
    });
  for (auto& th : threads) th.join();
  std::set<std::string> unique;
  for (const auto& ks : keys) unique.insert(ks.begin(), ks.end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread * 2));
  EXPECT_EQ(reg.size(), 0u);
}

}  // namespace
}  // namespace kvcache

namespace kvcache {
namespace {

TEST(Factory, ABuildersErrorReachesTheCaller) {
  CacheFactory f;
  ASSERT_TRUE(f.add(kCpuBackend, kCellKind,
                    [](const CacheGeometry&, const CacheConfig&) -> Result<std::shared_ptr<Cache>> {
                      return resource_exhausted("pool.reserve: allocating 4096 bytes failed");
                    })
                  .ok());
  auto r = f.build(kCpuBackend, kCellKind, geometry(), config(8));
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "pool.reserve: allocating 4096 bytes failed");
}

}  // namespace
}  // namespace kvcache
