// Saved prefixes. See saved_prefixes.h.
#include "server/saved_prefixes.h"

#include <chrono>

#include "engine/snapshot.h"

namespace kvcache::server {
namespace {

constexpr auto kPrefillTimeout = std::chrono::minutes(10);

PrefixReply fail(int status, std::string message, std::string code,
                 std::string type = "invalid_request_error") {
  PrefixReply r;
  r.status = status;
  r.error = ApiError{status, std::move(message), std::move(type), "", std::move(code)};
  return r;
}

std::string path_of(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".kvs";
}

// Waits for a zero-token request to finish; the status it ended with.
Status prefill(EngineLoop& loop, const std::vector<int32_t>& prompt) {
  serve::GenerateParams p;
  p.max_new_tokens = 0;
  Result<std::shared_ptr<RequestChannel>> ch = loop.submit(prompt, p, /*stream=*/false);
  if (!ch.ok()) return ch.status();
  const auto deadline = std::chrono::steady_clock::now() + kPrefillTimeout;
  for (;;) {
    RequestChannel::News n = (*ch)->wait(std::chrono::milliseconds(100));
    if (n.refused) return *n.refused;
    if (n.result) return ok_status();
    if (std::chrono::steady_clock::now() > deadline) {
      loop.cancel(*ch);
      return resource_exhausted("the prefill did not finish in time");
    }
  }
}

}  // namespace

bool valid_prefix_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

PrefixReply save_prefix(EngineLoop& loop, const std::string& dir, const std::string& name,
                        std::vector<int32_t> prompt) {
  if (Status s = prefill(loop, prompt); !s.ok()) {
    if (s.code() == StatusCode::kInvalidArgument) return fail(400, s.message(), "invalid_value");
    return fail(503, "save: " + s.message(), "unavailable", "server_error");
  }
  engine::Snapshot snap;
  Status st = loop.call([&](serve::Executor& ex) {
    Result<engine::Snapshot> s = ex.export_prefix(prompt);
    if (!s.ok()) return s.status();
    snap = std::move(*s);
    return ok_status();
  });
  if (!st.ok())
    return fail(503, "save: the prompt's prefix is no longer held (" + st.message() + "); retry",
                "unavailable", "server_error");
  st = engine::save_snapshot(path_of(dir, name), snap);
  if (!st.ok()) return fail(500, "save: " + st.message(), "write_failed", "server_error");
  PrefixReply r;
  r.body = {{"object", "cache.prefix"}, {"name", name}, {"tokens", snap.positions},
            {"bytes", engine::encoded_snapshot_bytes(snap)}};
  return r;
}

PrefixReply restore_prefix(EngineLoop& loop, const std::string& dir, const std::string& name) {
  Result<engine::Snapshot> snap = engine::load_snapshot(path_of(dir, name));
  if (!snap.ok()) {
    if (snap.status().code() == StatusCode::kNotFound)
      return fail(404, "restore: no saved prefix named '" + name + "'", "not_found");
    return fail(400, "restore: " + snap.status().message(), "invalid_snapshot");
  }
  Result<int64_t> held = int64_t{0};
  Status st = loop.call([&](serve::Executor& ex) {
    held = ex.import_prefix(*snap);
    return held.status();
  });
  if (!st.ok()) {
    if (st.code() == StatusCode::kResourceExhausted)
      return fail(503, "restore: " + st.message(), "cache_full", "server_error");
    if (st.code() == StatusCode::kFailedPrecondition && loop.stopping())
      return fail(503, "restore: " + st.message(), "unavailable", "server_error");
    return fail(400, "restore: " + st.message(), "invalid_snapshot");
  }
  PrefixReply r;
  r.body = {{"object", "cache.prefix"}, {"name", name}, {"tokens", *held}};
  return r;
}

}  // namespace kvcache::server
