// A throw-away Redis for the store tests: Debian's /usr/bin/redis-server started on a free
// loopback port with its own temporary directory and no persistence (--save ''), stopped (and
// its directory removed) by the destructor; stop()/start() simulate an outage on the same
// port, pause()/resume() a hung one. Raw get/set through hiredis let tests corrupt blocks.
// Layer: tests.
#pragma once

#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kvcache::serve::testing {

inline constexpr const char* kRedisServer = "/usr/bin/redis-server";

class RedisServer {
 public:
  RedisServer() {
    char tmpl[] = "/tmp/kvcache-redis-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts it (on the previous port after a stop()); false when it does not answer PING.
  bool start() {
    if (pid_ > 0) return true;
    if (dir_.empty() || access(kRedisServer, X_OK) != 0) return false;
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (port_ == 0 || attempt > 0) port_ = free_port();
      const std::string port = std::to_string(port_);  // before fork: the child only execs
      pid_ = fork();
      if (pid_ == 0) {
        execl(kRedisServer, kRedisServer, "--port", port.c_str(), "--bind", "127.0.0.1",
              "--save", "", "--appendonly", "no", "--dir", dir_.c_str(), "--daemonize", "no",
              "--loglevel", "warning", static_cast<char*>(nullptr));
        _exit(127);
      }
      if (pid_ < 0) return false;
      if (wait_ping()) return true;
      stop();
    }
    return false;
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);  // works on a paused process too  // an outage, not a clean shutdown
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // A hung store: the process stops answering (connections still open) until resume().
  void pause() {
    if (pid_ > 0) kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) kill(pid_, SIGCONT);
  }

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  std::optional<std::string> get(const std::string& key) {
    redisReply* r = command({"GET", key});
    std::optional<std::string> out;
    if (r != nullptr && r->type == REDIS_REPLY_STRING) out = std::string(r->str, r->len);
    if (r != nullptr) freeReplyObject(r);
    return out;
  }
  bool set(const std::string& key, const std::string& value) {
    redisReply* r = command({"SET", key, value});
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r != nullptr) freeReplyObject(r);
    return ok;
  }
  std::vector<std::string> keys() {
    redisReply* r = command({"KEYS", "kvcache:blk:*"});
    std::vector<std::string> out;
    if (r != nullptr && r->type == REDIS_REPLY_ARRAY)
      for (size_t i = 0; i < r->elements; ++i)
        out.emplace_back(r->element[i]->str, r->element[i]->len);
    if (r != nullptr) freeReplyObject(r);
    return out;
  }
  void flushall() {
    redisReply* r = command({"FLUSHALL"});
    if (r != nullptr) freeReplyObject(r);
  }

 private:
  // A free port below the ephemeral range (32768+): while Redis is stopped for an outage no
  // other process's port-0 bind can take it before the restart.
  static int free_port() {
    static std::mt19937 rng(static_cast<uint32_t>(getpid()) ^ static_cast<uint32_t>(time(nullptr)));
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = 20000 + static_cast<int>(rng() % 12000);
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port));
      const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      close(fd);
      if (ok) return port;
    }
    return 0;
  }

  redisReply* command(const std::vector<std::string>& args) {
    timeval tv{2, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c == nullptr || c->err != 0) {
      if (c != nullptr) redisFree(c);
      return nullptr;
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    redisFree(c);
    return r;
  }

  bool wait_ping() {
    for (int i = 0; i < 100; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {  // exited (port taken?)
        pid_ = -1;
        return false;
      }
      redisReply* r = command({"PING"});
      const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
      if (r != nullptr) freeReplyObject(r);
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvcache::serve::testing
