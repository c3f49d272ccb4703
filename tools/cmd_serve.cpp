// kvcache serve [MODEL]: the OpenAI-compatible HTTP server (src/server) over the batching
// executor. Wires flags to the executor, the engine thread and the HTTP front, prints
// "listening on http://HOST:PORT" and the cache summary on stderr, and stops on SIGINT or
// SIGTERM: no new requests, every request in flight cancelled, exit 0.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "cache_flags.h"
#include "commands.h"
#include "draft_flags.h"
#include "cpu/thread_pool.h"
#include "engine/runtime.h"
#include "flag_names.h"
#include "program/cache_summary.h"
#include "program/gguf_keys.h"
#include "serve/executor.h"
#include "server/engine_loop.h"
#include "server/http_server.h"

namespace kvcache::tools {
namespace {

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  CacheFlags cache;  // --max-sessions, --max-session-tokens, --kv-dtype, --threads
  std::string api_key;
  std::string chat_template;
  int64_t max_queue = 64;
  int http_threads = 64;
  int max_connections = 512;
  int max_connections_per_peer = 0;
  int64_t request_timeout_ms = 10000;
  int64_t keep_alive_timeout_ms = 5000;
  size_t max_body_bytes = server::kDefaultMaxBodyBytes;
  bool no_prefix_cache = false;
  std::string snapshot_dir;  // saved prefixes (POST /v1/cache/save|restore); empty = off
  int32_t block_tokens = serve::kDefaultBlockTokens;
  int32_t prefix_checkpoints = serve::ExecutorOptions{}.prefix_checkpoints;
  std::string kv_store;
  int32_t kv_store_wait_ms = 1000;
  DraftFlags draft;
};

void add_flags(CLI::App* cmd, ServeFlags& f) {
  cmd->add_option("model", f.model, "GGUF model file (default: the embedded tiny model)");
  cmd->add_option("--host", f.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f.port, "Port; 0 = any free port (printed)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  add_cache_flags(cmd, f.cache,
                  {CacheFlag::kMaxSessions, CacheFlag::kMaxSessionTokens, CacheFlag::kKvDtype,
                   CacheFlag::kThreads, CacheFlag::kMapWeights, CacheFlag::kKvMemory});
  refuse_beside_kv_memory(cmd);
  cmd->add_option("--api-key", f.api_key,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health and the page /");
  cmd->add_option("--chat-template", f.chat_template,
                  "plain, chatml, llama3, gemma, mistral or phi3 (default: detected from the "
                  "model's tokenizer.chat_template; plain without one)");
  cmd->add_option("--max-queue", f.max_queue,
                  "Requests waiting for a session beyond which new ones get 429")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--http-threads", f.http_threads,
                  "Requests answered at once (GET /health, /metrics, /v1/models and / have two "
                  "threads of their own)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--max-connections", f.max_connections,
                  "Open connections beyond which a new one gets 503 and is closed")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--max-connections-per-peer", f.max_connections_per_peer,
                  "Open connections from one address beyond which a new one gets 503; 0 = no cap")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_option("--request-timeout-ms", f.request_timeout_ms,
                  "Longest time from a request's first byte to its last (headers and body); a "
                  "slower request gets 408 and its connection is closed")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}))->capture_default_str();
  cmd->add_option("--keep-alive-timeout-ms", f.keep_alive_timeout_ms,
                  "How long an idle connection may wait for its next request")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}))->capture_default_str();
  cmd->add_option("--max-body-bytes", f.max_body_bytes, "Largest request body (else 413)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))->capture_default_str();
  cmd->add_flag("--no-prefix-cache", f.no_prefix_cache, "Prefill every prompt in full");
  cmd->add_option("--prefix-checkpoints", f.prefix_checkpoints,
                  "Sliding-window models: prompt checkpoints kept at block boundaries, so a "
                  "prompt sharing only a prefix reuses it (each W - 1 cells per sliding pool)")
      ->check(CLI::Range(0, 128))->capture_default_str();
  cmd->add_option("--snapshot-dir", f.snapshot_dir,
                  "Folder of saved prefixes (POST /v1/cache/save and /v1/cache/restore); "
                  "unset = those endpoints are off")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--kv-block-tokens", f.block_tokens, "Prefix-index and store block in tokens")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--kv-store", f.kv_store,
                  "Share prefix blocks with other replicas through redis://HOST:PORT[/DB]");
  cmd->add_option("--kv-store-wait-ms", f.kv_store_wait_ms,
                  "Longest wait of a request for the store's answer before it prefills")
      ->check(CLI::Range(0, 60000))->capture_default_str();
  add_draft_flags(cmd, f.draft);
}

// The template from --chat-template or the model's own; nullopt (with a startup warning and
// the message chat requests get) when neither names a known one.
void pick_template(const ServeFlags& f, const engine::LoadedModel& m, server::ServerOptions& o) {
  Result<std::string> text = m.file->get_string(gguf::key_pattern(gguf::Key::kTokenizerChatTemplate));
  text::TemplateChoice c = text::choose_chat_template(
      f.chat_template, text.ok() ? std::optional<std::string>(*text) : std::nullopt);
  o.chat_template = c.tmpl;
  if (!c.tmpl)
    o.chat_template_problem = flag_message(invalid_argument(c.problem), {kChatFieldFlags});
  if (!o.chat_template)
    std::fprintf(stderr, "kvcache serve: warning: %s; chat requests will be refused\n",
                 o.chat_template_problem.c_str());
  else
    std::fprintf(stderr, "kvcache serve: chat template %s\n",
                 std::string(text::to_string(*o.chat_template)).c_str());
}

// SIGINT/SIGTERM write one byte to a pipe the watcher polls: a handler, not a blocked mask,
// because libraries (OpenBLAS) start threads before main that would take the default action.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  const char b = 1;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
}

bool install_stop_handlers() {
  if (pipe(g_signal_pipe) != 0) return false;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a dead server
  return sigaction(SIGINT, &sa, nullptr) == 0 && sigaction(SIGTERM, &sa, nullptr) == 0;
}

// Waits for a stop signal until `quit` is set.
void watch_signals(std::atomic<bool>& quit, server::EngineLoop& loop, server::HttpServer& http) {
  pollfd pfd{g_signal_pipe[0], POLLIN, 0};
  while (!quit) {
    if (poll(&pfd, 1, 200) > 0) {
      std::fprintf(stderr, "kvcache serve: stopping\n");
      loop.stop();  // cancels every request in flight; their streams end
      http.stop();  // stops accepting; serve() returns
      return;
    }
  }
}

int run_serve(const ServeFlags& f) {
  if (!install_stop_handlers()) return fail("serve", "cannot install the SIGINT/SIGTERM handlers");
  apply_threads(f.cache);
  Result<engine::LoadedModel> m =
      engine::load_model(engine::ModelSource::file(f.model), load_options(f.cache));
  if (!m.ok()) return fail("serve", m.status().message());
  serve::ExecutorOptions eo;
  eo.max_sessions = f.cache.max_sessions;
  eo.max_session_tokens = f.cache.max_session_tokens;
  eo.kv_memory = f.cache.kv_memory;
  eo.kv_dtype = f.cache.dtype();
  eo.k_dtype = f.cache.key_dtype();
  eo.v_dtype = f.cache.value_dtype();
  eo.kv_rotate = f.cache.rotate();
  eo.prefix_cache = !f.no_prefix_cache;
  eo.block_tokens = f.block_tokens;
  eo.prefix_checkpoints = f.prefix_checkpoints;
  eo.kv_store = f.kv_store;
  eo.store_wait_ms = f.kv_store_wait_ms;
  eo.eog_ids = m->eog_ids;
  ExecutorDraft draft;
  if (std::optional<DraftError> de = make_executor_drafter(
          f.draft, *m, cache_options(f.cache), load_options(f.cache), eo, draft)) {
    fail("serve", de->message);
    return de->usage ? 2 : 1;
  }
  Result<std::unique_ptr<serve::Executor>> ex = serve::Executor::create(*m->model, &*m->tokenizer, eo);
  if (!ex.ok()) {
    fail("serve", flag_message(ex.status(), {kExecutorFieldFlags}));
    return plan_exit_code(ex.status());
  }
  Result<std::string> drafting = executor_draft_summary(draft, eo, **ex);
  if (!drafting.ok()) return fail("serve", "--draft: " + drafting.status().message());
  ModelGeometry g = m->model->geometry();
  g.cache = (*ex)->setup().geometry;
  SummaryOptions so;
  so.config = (*ex)->setup().config;
  so.sessions = (*ex)->max_sessions();
  so.session_tokens = (*ex)->max_session_tokens();
  so.kv_memory = (*ex)->setup().kv_memory;
  std::fprintf(stderr, "%s%s", cache_summary_text(g, so).c_str(), drafting->c_str());

  server::ServerOptions o;
  o.host = f.host;
  o.port = f.port;
  o.api_key = f.api_key;
  o.max_body_bytes = f.max_body_bytes;
  o.http_threads = f.http_threads;
  o.max_connections = f.max_connections;
  o.max_connections_per_peer = f.max_connections_per_peer;
  o.request_timeout_ms = f.request_timeout_ms;
  o.keep_alive_timeout_ms = f.keep_alive_timeout_ms;
  o.model_name = m->name;
  o.snapshot_dir = f.snapshot_dir;
  pick_template(f, *m, o);
  server::ServerModel sm;
  sm.tokenizer = &*m->tokenizer;
  sm.limits = {m->model->hparams().vocab, (*ex)->max_sessions(), (*ex)->max_session_tokens()};

  server::EngineLoop loop(**ex, f.max_queue);
  server::HttpServer http(loop, o, std::move(sm));
  Result<int> port = http.bind();
  if (!port.ok()) return fail("serve", port.status().message());
  loop.start();
  std::fprintf(stderr, "listening on http://%s:%d\n", f.host.c_str(), *port);
  std::fflush(stderr);
  std::atomic<bool> quit{false};
  std::thread watcher([&] { watch_signals(quit, loop, http); });
  const bool served = http.serve();
  quit = true;
  watcher.join();
  loop.stop();
  if (!served) return fail("serve", "the listener failed");
  std::fprintf(stderr, "kvcache serve: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_flags(cmd, *flags);
  return [flags] { return run_serve(*flags); };
}

}  // namespace kvcache::tools
