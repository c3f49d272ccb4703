// kvcache_server_bench: `kvcache serve`'s HTTP layer on the ~100M-parameter benchmark model
// against the executor driven directly, both in this process, one after the other.
//   BM_HttpVsExecutor/clients: `clients` requests at once (distinct 16-token prompts, 64 new
//     tokens each, greedy, ignore_eos), first straight through an Executor (tokens timed by
//     its on_token hook), then as streaming /v1/completions requests to an in-process server
//     on a loopback port (tokens timed as SSE chunks arrive).
// Counters: tokens_per_s and req_per_s of each path, http_over_executor (throughput ratio),
// ttft_p50/p99_ms and itl_p50/p99_ms (time to first token, inter-token latency) of each,
// steps (engine steps each path took) and cpu_ms_per_token (process CPU time per token; the
// HTTP path's without its in-process clients' threads, which are timed apart as
// http_client_cpu_ms_per_token) with http_cpu_over_executor, their ratio, which a shared
// machine's load disturbs far less than wall time. Five repetitions, the two paths' order
// alternating between them; compare the medians.
// The model's tokens get synthetic spellings ("x123") so every token is one streamed chunk.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "bench_main.h"
#include "bench_model.h"
#include "engine/model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"
#include "program/gguf.h"
#include "serve/executor.h"
#include "server/engine_loop.h"
#include "server/http_server.h"

namespace kvcache::server {
namespace {

using bench::BenchModel;
using Clock = std::chrono::steady_clock;
constexpr int32_t kNewTokens = 64, kPromptTokens = 16, kMaxSessions = 32;
constexpr int64_t kSessionTokens = 256;

struct Loaded {
  const engine::Model* model = nullptr;
  std::optional<text::Tokenizer> tokenizer;
  std::string error;
};

Loaded& loaded() {
  static Loaded* l = [] {
    auto* s = new Loaded();
    const bench::LoadedBenchModel& b = bench::load_bench_model(kSessionTokens);
    s->error = b.error;
    s->model = b.model.get();
    if (s->model == nullptr) return s;
    std::vector<std::string> spellings;
    for (int i = 0; i < BenchModel::kVocab; ++i) {
      std::string sp = i < 256 ? text::byte_to_unicode(static_cast<uint8_t>(i)) : "x";
      if (i >= 256) sp += std::to_string(i);
      spellings.push_back(std::move(sp));
    }
    auto t = text::Tokenizer::bpe(std::move(spellings), {});
    if (!t.ok()) s->error = t.status().to_string();
    else s->tokenizer = std::move(*t);
    return s;
  }();
  return *l;
}

std::vector<int32_t> prompt(int client) {
  std::mt19937_64 rng(static_cast<uint64_t>(client) + 1);
  std::vector<int32_t> t(kPromptTokens);
  for (int32_t& x : t) x = static_cast<int32_t>(256 + rng() % (BenchModel::kVocab - 256));
  return t;
}

Result<std::unique_ptr<serve::Executor>> make_executor() {
  serve::ExecutorOptions o;
  o.max_sessions = kMaxSessions;
  o.max_session_tokens = kSessionTokens;
  o.kv_dtype = DType::kF16;
  return serve::Executor::create(*loaded().model, &*loaded().tokenizer, o);
}

double cpu_seconds(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec t{};
  clock_gettime(clock, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Token arrival times per request.
struct Figures {
  double seconds = 0;
  double cpu_seconds = 0;   // process CPU time of the run (HTTP: minus its clients' threads)
  double client_cpu_seconds = 0;  // HTTP: CPU time of the in-process client threads
  int64_t steps = 0;        // engine steps
  std::vector<Clock::time_point> start;
  std::vector<std::vector<Clock::time_point>> arrivals;
  int64_t tokens() const {
    int64_t n = 0;
    for (const auto& a : arrivals) n += static_cast<int64_t>(a.size());
    return n;
  }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void report(benchmark::State& st, const std::string& tag, const Figures& f, int clients) {
  std::vector<double> ttft, itl;
  for (size_t i = 0; i < f.arrivals.size(); ++i) {
    const auto& a = f.arrivals[i];
    if (a.empty()) continue;
    ttft.push_back(std::chrono::duration<double, std::milli>(a[0] - f.start[i]).count());
    for (size_t k = 1; k < a.size(); ++k)
      itl.push_back(std::chrono::duration<double, std::milli>(a[k] - a[k - 1]).count());
  }
  st.counters[tag + "tokens_per_s"] = static_cast<double>(f.tokens()) / f.seconds;
  st.counters[tag + "req_per_s"] = clients / f.seconds;
  st.counters[tag + "ttft_p50_ms"] = percentile(ttft, 0.5);
  st.counters[tag + "ttft_p99_ms"] = percentile(ttft, 0.99);
  st.counters[tag + "itl_p50_ms"] = percentile(itl, 0.5);
  st.counters[tag + "itl_p99_ms"] = percentile(itl, 0.99);
  st.counters[tag + "steps"] = static_cast<double>(f.steps);
  st.counters[tag + "cpu_ms_per_token"] = 1e3 * f.cpu_seconds / static_cast<double>(f.tokens());
}

serve::GenerateParams params() {
  serve::GenerateParams p;
  p.max_new_tokens = kNewTokens;
  p.ignore_eos = true;
  return p;
}

bool run_direct(int clients, Figures& f) {
  auto ex = make_executor();
  if (!ex.ok()) return false;
  f.start.assign(static_cast<size_t>(clients), Clock::now());
  f.arrivals.assign(static_cast<size_t>(clients), {});
  std::map<int64_t, size_t> index;
  (*ex)->set_on_token([&](const serve::TokenEvent& e) {
    f.arrivals[index.at(e.request)].push_back(Clock::now());
  });
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int c = 0; c < clients; ++c) {
    auto id = (*ex)->submit(prompt(c), params());
    if (!id.ok()) return false;
    index[*id] = static_cast<size_t>(c);
  }
  if (!(*ex)->run().ok()) return false;
  f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.cpu_seconds = cpu_seconds() - c0;
  f.steps = (*ex)->stats().steps;
  return true;
}

bool run_http(int clients, Figures& f) {
  auto ex = make_executor();
  if (!ex.ok()) return false;
  EngineLoop loop(**ex, 1024);
  ServerOptions o;
  o.port = 0;
  o.model_name = "bench";
  ServerModel m;
  m.tokenizer = &*loaded().tokenizer;
  m.limits = {BenchModel::kVocab, kMaxSessions, kSessionTokens};
  HttpServer http(loop, o, std::move(m));
  Result<int> port = http.bind();
  if (!port.ok()) return false;
  loop.start();
  std::thread server([&] { http.serve(); });
  f.start.assign(static_cast<size_t>(clients), Clock::now());
  f.arrivals.assign(static_cast<size_t>(clients), {});
  std::vector<std::thread> threads;
  std::vector<double> client_cpu(static_cast<size_t>(clients), 0.0);
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", *port);
      cli.set_read_timeout(600);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.set_header("Content-Type", "application/json");
      req.body = nlohmann::json{{"prompt", prompt(c)}, {"max_tokens", kNewTokens},
                                {"stream", true}, {"ignore_eos", true}}.dump();
      auto& mine = f.arrivals[static_cast<size_t>(c)];
      f.start[static_cast<size_t>(c)] = Clock::now();
      req.content_receiver = [&mine](const char* data, size_t n, uint64_t, uint64_t) {
        const std::string_view s(data, n);
        const auto now = Clock::now();
        for (size_t at = s.find("data: {"); at != std::string_view::npos;
             at = s.find("data: {", at + 1))
          mine.push_back(now);  // one chunk per token (a byte token may be held back)
        return true;
      };
      (void)cli.send(req);
      client_cpu[static_cast<size_t>(c)] = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    });
  for (auto& t : threads) t.join();
  f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.client_cpu_seconds = 0;
  for (double x : client_cpu) f.client_cpu_seconds += x;
  f.cpu_seconds = cpu_seconds() - c0 - f.client_cpu_seconds;
  loop.stop();
  f.steps = loop.snapshot().stats.steps;
  http.stop();
  server.join();
  return true;
}

void BM_HttpVsExecutor(benchmark::State& st) {
  if (!loaded().error.empty()) {
    st.SkipWithError(loaded().error.c_str());
    return;
  }
  const int clients = static_cast<int>(st.range(0));
  Figures direct, http;
  static int turn = 0;  // alternates which path runs first, so a drifting load favours neither
  for (auto _ : st) {
    const bool http_first = (turn++ % 2) == 1;
    const bool ok = http_first ? run_http(clients, http) && run_direct(clients, direct)
                               : run_direct(clients, direct) && run_http(clients, http);
    if (!ok) {
      st.SkipWithError("a run failed");
      return;
    }
  }
  report(st, "exec_", direct, clients);
  report(st, "http_", http, clients);
  st.counters["http_over_executor"] = (static_cast<double>(http.tokens()) / http.seconds) /
                                      (static_cast<double>(direct.tokens()) / direct.seconds);
  st.counters["http_cpu_over_executor"] =
      (http.cpu_seconds / static_cast<double>(http.tokens())) /
      (direct.cpu_seconds / static_cast<double>(direct.tokens()));
  st.counters["http_client_cpu_ms_per_token"] =
      1e3 * http.client_cpu_seconds / static_cast<double>(http.tokens());
  st.counters["http_tokens"] = static_cast<double>(http.tokens());
}
BENCHMARK(BM_HttpVsExecutor)->Arg(1)->Arg(8)->Arg(32)->Iterations(1)->Repetitions(5)
    ->UseRealTime()->Unit(benchmark::kSecond);

}  // namespace
}  // namespace kvcache::server

KVCACHE_BENCHMARK_MAIN();
