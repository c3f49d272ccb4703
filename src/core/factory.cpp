#include "core/factory.h"

#include <algorithm>
#include <atomic>

#include "core/str_cat.h"

namespace kvcache {
namespace {
std::string key_of(std::string_view backend, std::string_view kind) {
  return std::string(backend) + "/" + std::string(kind);
}
}  // namespace

CacheFactory& CacheFactory::global() {
  static CacheFactory factory;
  return factory;
}

Status CacheFactory::add(std::string_view backend, std::string_view kind, CacheBuilder builder) {
  if (backend.empty() || kind.empty())
    return invalid_argument("factory.add: backend and kind must be non-empty, got '" +
                            std::string(backend) + "/" + std::string(kind) + "'");
  if (!builder)
    return invalid_argument("factory.add: empty builder for " + key_of(backend, kind));
  std::lock_guard lock(mu_);
  const std::string key = key_of(backend, kind);
  for (const auto& [k, b] : builders_)
    if (k == key)
      return failed_precondition("factory.add: a builder for " + key +
                                 " is already registered; the existing one is kept");
  builders_.emplace_back(key, std::move(builder));
  return ok_status();
}

std::string CacheFactory::describe() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> keys;
  for (const auto& [k, b] : builders_) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "(none)" : out;
}

Result<std::shared_ptr<Cache>> CacheFactory::build(std::string_view backend,
                                                   std::string_view kind,
                                                   const CacheGeometry& geometry,
                                                   const CacheConfig& config) const {
  CacheBuilder builder;
  {
    std::lock_guard lock(mu_);
    const std::string key = key_of(backend, kind);
    for (const auto& [k, b] : builders_)
      if (k == key) builder = b;
  }
  if (!builder)
    return not_found("factory.build: no builder for " + key_of(backend, kind) +
                     "; registered: " + describe());
  if (auto why = why_invalid(geometry, config))
    return invalid_argument("factory.build: " + why->message());
  Result<std::shared_ptr<Cache>> cache = builder(geometry, config);
  if (!cache.ok()) return cache.status();
  if (!*cache) return internal_error("factory.build: builder for " + key_of(backend, kind) +
                                    " returned no cache");
  return cache;
}

CacheRegistry& CacheRegistry::global() {
  static CacheRegistry registry;
  return registry;
}

std::string CacheRegistry::mint_key() {
  std::lock_guard lock(mu_);
  return str_cat("kvcache-", next_key_++);
}

Status CacheRegistry::install(const std::string& key, std::shared_ptr<Cache> cache) {
  if (key.empty() || !cache) return invalid_argument("registry.install: empty key or cache");
  std::lock_guard lock(mu_);
  for (const auto& [k, c] : entries_)
    if (k == key) return failed_precondition("registry.install: key '" + key + "' is taken");
  entries_.emplace_back(key, std::move(cache));
  return ok_status();
}

std::shared_ptr<Cache> CacheRegistry::find(const std::string& key) const {
  std::lock_guard lock(mu_);
  for (const auto& [k, c] : entries_)
    if (k == key) return c;
  return nullptr;
}

bool CacheRegistry::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const auto& e) { return e.first == key; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

size_t CacheRegistry::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

InstallGuard::InstallGuard(std::shared_ptr<Cache> cache, CacheRegistry& registry)
    : registry_(&registry), key_(registry.mint_key()) {
  // A freshly minted key cannot collide, so install only fails on a null cache.
  if (!registry_->install(key_, std::move(cache)).ok()) key_.clear();
}

InstallGuard::~InstallGuard() {
  if (!key_.empty()) registry_->erase(key_);
}

InstallGuard::InstallGuard(InstallGuard&& other) noexcept
    : registry_(other.registry_), key_(std::move(other.key_)) {
  other.key_.clear();
}

}  // namespace kvcache
