// Session files for `kvcache run`. See session_file.h.
#include "session_file.h"

#include <unistd.h>

#include <cstdio>

#include "engine/snapshot.h"

namespace kvcache::tools {
namespace {

constexpr int64_t kProgressFrom = int64_t{16} << 20;  // files smaller than 16 MiB stay quiet

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// "\r<verb> F: 42% of 123.4 MiB" on a terminal for large files; a final newline at the end.
engine::SnapshotProgress progress_line(const std::string& verb, const std::string& path) {
  if (isatty(fileno(stderr)) == 0) return nullptr;
  return [verb, path](int64_t done, int64_t total) {
    if (total < kProgressFrom) return;
    std::fprintf(stderr, "\r%s %s: %3d%% of %.1f MiB", verb.c_str(), path.c_str(),
                 static_cast<int>(100 * done / total), mib(total));
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace

Status save_session_file(const std::string& path, const engine::Model& model,
                         const CacheControl& cache, const engine::Session& session) {
  const std::vector<int32_t> tokens = session.conversation();
  Result<engine::Snapshot> snap =
      engine::capture_snapshot(cache, session.seq(), model.fingerprint(), tokens);
  if (!snap.ok()) return snap.status();
  KVCACHE_RETURN_IF_ERROR(engine::save_snapshot(path, *snap, progress_line("saving", path)));
  std::fprintf(stderr, "saved session: %lld positions, %zu token ids, %.2f MiB to %s\n",
               static_cast<long long>(snap->positions), snap->tokens.size(),
               mib(engine::encoded_snapshot_bytes(*snap)), path.c_str());
  return ok_status();
}

Status load_session_file(const std::string& path, const engine::Model& model, CacheControl& cache,
                         engine::Session& session) {
  Result<engine::Snapshot> snap = engine::load_snapshot(path, progress_line("loading", path));
  if (!snap.ok()) return snap.status();
  Status s = engine::restore_snapshot(cache, session.seq(), *snap, model.fingerprint(),
                                      model.hparams().vocab);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  KVCACHE_RETURN_IF_ERROR(session.resume(snap->tokens));
  std::fprintf(stderr, "loaded session: %lld positions, %zu token ids from %s\n",
               static_cast<long long>(snap->positions), snap->tokens.size(), path.c_str());
  return ok_status();
}

}  // namespace kvcache::tools
