// Factory (builders per (backend, kind)) and the process-wide registry of live caches with
// its RAII install guard. Layer: core. See SPEC §5. Both are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cache.h"

namespace kvcache {

// A builder gets an already-validated geometry and config; its error (e.g. an allocation
// that failed, naming the bytes) reaches the caller of build(). An ok nullptr is Internal.
using CacheBuilder = std::function<Result<std::shared_ptr<Cache>>(const CacheGeometry&,
                                                                  const CacheConfig&)>;

// Thread-safe. Insertion-only: a builder, once added, stays.
class CacheFactory {
 public:
  // The process-wide factory.
  static CacheFactory& global();

  // InvalidArgument for an empty backend/kind or an empty builder; AlreadyExists-style
  // refusal (FailedPrecondition) for a duplicate. The existing builder is kept either way.
  Status add(std::string_view backend, std::string_view kind, CacheBuilder builder);

  // NotFound naming the registered (backend, kind) pairs; InvalidArgument with the validation
  // reason; Internal when the builder returns nothing.
  Result<std::shared_ptr<Cache>> build(std::string_view backend, std::string_view kind,
                                       const CacheGeometry& geometry,
                                       const CacheConfig& config) const;

  // "cpu/cell, cpu/sequence" (sorted), for messages and help.
  std::string describe() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, CacheBuilder>> builders_;  // key "backend/kind"
};

// Process-wide map: unique key -> shared cache, so code that receives only strings can find
// the cache. Thread-safe.
class CacheRegistry {
 public:
  static CacheRegistry& global();
  std::string mint_key();  // unique for the process lifetime ("kvcache-<n>")
  Status install(const std::string& key, std::shared_ptr<Cache> cache);  // refuses duplicates
  std::shared_ptr<Cache> find(const std::string& key) const;              // nullptr if absent
  bool erase(const std::string& key);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_key_ = 0;
  std::vector<std::pair<std::string, std::shared_ptr<Cache>>> entries_;
};

// Mints a key, installs the cache on construction and erases it on destruction. Move-only.
class InstallGuard {
 public:
  explicit InstallGuard(std::shared_ptr<Cache> cache,
                        CacheRegistry& registry = CacheRegistry::global());
  ~InstallGuard();
  InstallGuard(InstallGuard&& other) noexcept;
  InstallGuard& operator=(InstallGuard&&) = delete;
  InstallGuard(const InstallGuard&) = delete;
  InstallGuard& operator=(const InstallGuard&) = delete;

  const std::string& key() const { return key_; }

 private:
  CacheRegistry* registry_;
  std::string key_;  // empty once moved from
};

}  // namespace kvcache
