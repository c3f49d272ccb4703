// The event thread, the worker pools and the socket writes of the HTTP front. See
// http_listener.h. A connection is owned by exactly one party at a time: the event loop while
// a request is read (or the connection idles), a worker while the request is answered.
#include "server/http_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/str_cat.h"

namespace kvcache::server::http {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};          // the event loop looks at deadlines this often
constexpr milliseconds kDrainAfterRefusal{500};  // reading on after a refusal, so the client
                                                 // sees the answer instead of a reset
constexpr int kListenBacklog = 1024;
constexpr size_t kReadBytes = 64 * 1024;

const char* reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

const char* refusal_code(int status) {
  switch (status) {
    case 408: return "request_timeout";
    case 413: return "body_too_large";
    case 431: return "headers_too_large";
    case 501: return "not_implemented";
    case 503: return "too_many_connections";  // the listener's only 503
    case 505: return "http_version_not_supported";
    default: return "invalid_request";
  }
}

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// A blocking socket with SO_SNDTIMEO: false when the peer is gone or stalled past the timeout.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The status line and headers; `length` < 0 = chunked (or, for HTTP/1.0, raw until close).
std::string head(const Response& res, bool keep_alive, int64_t length, bool http10) {
  std::string h = str_cat("HTTP/1.1 ", res.status, " ", reason(res.status), "\r\n");
  if (!res.content_type.empty()) h += "Content-Type: " + res.content_type + "\r\n";
  for (const auto& [k, v] : res.headers) h += k + ": " + v + "\r\n";
  if (length >= 0) h += str_cat("Content-Length: ", length, "\r\n");
  else if (!http10) h += "Transfer-Encoding: chunked\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

// Writes a provider's pieces as chunks (raw for an HTTP/1.0 client, which ends at close).
class SocketSink : public DataSink {
 public:
  SocketSink(int fd, bool raw) : fd_(fd), raw_(raw) {}
  bool write(const char* data, size_t n) override {
    if (broken_ || finished_) return false;
    if (n == 0) return true;
    const std::string_view piece(data, n);
    const bool ok = raw_ ? send_all(fd_, piece)
                         : send_all(fd_, str_cat(hex(n), "\r\n", piece, "\r\n"));
    if (!ok) broken_ = true;
    written_ += n;
    return ok;
  }
  void done() override {
    if (finished_ || broken_) return;
    if (!raw_ && !send_all(fd_, "0\r\n\r\n")) broken_ = true;
    finished_ = true;
  }
  bool finished() const { return finished_ && !broken_; }
  bool broken() const { return broken_; }
  size_t written() const { return written_; }

 private:
  static std::string hex(size_t n) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, n, 16);
    return std::string(buf, r.ptr);
  }
  int fd_;
  bool raw_, broken_ = false, finished_ = false;
  size_t written_ = 0;
};

// Threads that run queued jobs in order. Thread-safety: any thread.
class WorkerPool {
 public:
  void start(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  void push(std::function<void()> job) {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }
  void join() {  // after the jobs queued so far
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

std::string peer_address(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

}  // namespace

struct Connection {
  int fd = -1;
  std::string peer;
  RequestParser parser;
  Clock::time_point since;     // start of the idle wait, or of the request (its first byte)
  bool in_request = false;     // a byte of the current request arrived
  bool continue_sent = false;  // "100 Continue" went out for the current request
  bool draining = false;       // refused: reading and dropping until drain_until, then closed
  Clock::time_point drain_until;

  Connection(int f, std::string p, Limits l) : fd(f), peer(std::move(p)), parser(l), since(Clock::now()) {}
};
using ConnPtr = std::unique_ptr<Connection>;

struct Listener::Impl {
  ListenerOptions opt;
  ListenerHooks hooks;
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // stop() and returning workers write a byte
  std::atomic<bool> stopping{false};
  WorkerPool heavy, light;

  std::mutex mu;  // guards what follows
  std::vector<ConnPtr> returned;           // answered keep-alive connections for the loop
  std::unordered_set<int> busy;            // sockets a worker holds (stop() may shut them)
  std::unordered_map<std::string, int> per_peer;
  int open = 0;

  Impl(ListenerOptions o, ListenerHooks h) : opt(std::move(o)), hooks(std::move(h)) {}
  ~Impl() {
    for (int fd : {listen_fd, wake[0], wake[1]})
      if (fd >= 0) ::close(fd);
  }

  void poke() {
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake[1], &b, 1);
  }
  void close_conn(ConnPtr c);
  void refuse(Connection& c, int status, const std::string& message, milliseconds drain);
  void accept_all(std::vector<ConnPtr>& conns);
  bool on_readable(ConnPtr& c);
  void advance(ConnPtr& c);
  void dispatch(ConnPtr c);
  void answer(ConnPtr c, Request req);
  bool write_response(int fd, const Request& req, Response& res, bool keep_alive);
  void expire(std::vector<ConnPtr>& conns);
  void shut_down(std::vector<ConnPtr>& conns);
};

void Listener::Impl::close_conn(ConnPtr c) {
  if (!c) return;
  ::close(c->fd);
  std::lock_guard<std::mutex> lk(mu);
  --open;
  if (--per_peer[c->peer] <= 0) per_peer.erase(c->peer);
}

// Answers with a refusal made by the listener itself and stops reading requests from `c`: what
// the client still sends is read and dropped for `drain`, then the connection is closed.
void Listener::Impl::refuse(Connection& c, int status, const std::string& message,
                            milliseconds drain) {
  Response res;
  res.status = status;
  hooks.error(status, message, refusal_code(status), res);
  if (status == 503) res.set_header("Retry-After", "1");
  const std::string out = head(res, false, static_cast<int64_t>(res.body.size()), false) + res.body;
  // One best-effort write: a small answer fits an idle socket's send buffer.
  [[maybe_unused]] ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
  if (hooks.on_response) hooks.on_response(c.parser.partial(), status);
  ::shutdown(c.fd, SHUT_WR);
  c.draining = true;
  c.drain_until = Clock::now() + drain;
}

void Listener::Impl::accept_all(std::vector<ConnPtr>& conns) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(milliseconds(10));
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Connection>(fd, peer_address(addr), opt.limits);
    std::string over;
    {
      std::lock_guard<std::mutex> lk(mu);
      ++open;
      const int from_peer = ++per_peer[c->peer];
      if (open > opt.max_connections)
        over = str_cat("too many open connections (max_connections = ", opt.max_connections, ")");
      else if (opt.max_connections_per_peer > 0 && from_peer > opt.max_connections_per_peer)
        over = str_cat("too many open connections from ", c->peer,
                       " (max_connections_per_peer = ", opt.max_connections_per_peer, ")");
    }
    if (!over.empty()) refuse(*c, 503, over, kTick);
    conns.push_back(std::move(c));
  }
}

// Reads what arrived; false when the connection is finished (closed by the peer or broken).
bool Listener::Impl::on_readable(ConnPtr& c) {
  char buf[kReadBytes];
  for (int turn = 0; turn < 4; ++turn) {  // a fast sender does not starve the others
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    if (c->draining) continue;
    c->parser.feed(buf, static_cast<size_t>(n));
    if (!c->in_request && c->parser.started()) {
      c->in_request = true;
      c->since = Clock::now();
    }
    if (c->parser.failed() || c->parser.complete() || static_cast<size_t>(n) < sizeof buf) break;
  }
  return true;
}

// Acts on the parser's state: refuse, hand over a complete request, or send 100 Continue.
void Listener::Impl::advance(ConnPtr& c) {
  if (c->draining) return;
  if (c->parser.failed())
    return refuse(*c, c->parser.error_status(), c->parser.error_message(), kDrainAfterRefusal);
  if (c->parser.complete()) return dispatch(std::move(c));
  if (c->parser.wants_continue() && !c->continue_sent) {
    c->continue_sent = true;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    [[maybe_unused]] ssize_t n = ::send(c->fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
  }
}

void Listener::Impl::dispatch(ConnPtr c) {
  Request req = c->parser.take();
  req.remote_addr = c->peer;
  {
    std::lock_guard<std::mutex> lk(mu);
    busy.insert(c->fd);
  }
  WorkerPool& pool = hooks.is_light && hooks.is_light(req) ? light : heavy;
  auto job = std::make_shared<std::pair<ConnPtr, Request>>(std::move(c), std::move(req));
  pool.push([this, job] { answer(std::move(job->first), std::move(job->second)); });
}

// On a worker: run the handler, write the answer, give a keep-alive connection back.
void Listener::Impl::answer(ConnPtr c, Request req) {
  set_blocking(c->fd, true);
  timeval tv{static_cast<time_t>(opt.write_timeout.count() / 1000),
             static_cast<suseconds_t>(opt.write_timeout.count() % 1000 * 1000)};
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  Response res;
  try {
    hooks.handle(req, res);
  } catch (...) {
    res = Response{};
    res.status = 500;
    hooks.error(500, "internal error", "internal_error", res);
  }
  const bool http10 = req.version == "HTTP/1.0";
  const bool keep = req.keep_alive && !stopping && !(http10 && res.provider);
  const bool ok = write_response(c->fd, req, res, keep);
  if (hooks.on_response) hooks.on_response(req, res.status);
  {
    std::lock_guard<std::mutex> lk(mu);
    busy.erase(c->fd);
    if (ok && keep && !stopping) {
      set_blocking(c->fd, false);
      c->since = Clock::now();
      c->in_request = c->continue_sent = false;
      returned.push_back(std::move(c));
    }
  }
  if (!c) return poke();
  close_conn(std::move(c));
}

// False when the connection cannot carry another request (a write failed, a provider cut its
// answer, or an HTTP/1.0 stream that ends at close).
bool Listener::Impl::write_response(int fd, const Request& req, Response& res, bool keep_alive) {
  const bool http10 = req.version == "HTTP/1.0";
  if (req.method == "HEAD") {  // the headers a GET would have, no body
    if (res.releaser) res.releaser(false);
    return send_all(fd, head(res, keep_alive, static_cast<int64_t>(res.body.size()), http10));
  }
  if (!res.provider)
    return send_all(fd, head(res, keep_alive, static_cast<int64_t>(res.body.size()), http10) + res.body);
  SocketSink sink(fd, http10);
  if (send_all(fd, head(res, keep_alive, -1, http10)))
    while (!sink.finished() && !sink.broken() && res.provider(sink.written(), sink)) {
    }
  if (res.releaser) res.releaser(sink.finished());
  return sink.finished() && !http10;
}

// Closes idle connections past idle_timeout, refuses (408) requests past request_timeout,
// closes drained refusals.
void Listener::Impl::expire(std::vector<ConnPtr>& conns) {
  const auto now = Clock::now();
  for (ConnPtr& c : conns) {
    if (!c) continue;
    if (c->draining) {
      if (now >= c->drain_until) close_conn(std::move(c));
    } else if (c->in_request && now - c->since > opt.request_timeout) {
      refuse(*c, 408,
             str_cat("the request's headers and body did not arrive within ",
                     opt.request_timeout.count(), " ms (request_timeout)"),
             milliseconds(0));
    } else if (!c->in_request && now - c->since > opt.idle_timeout) {
      close_conn(std::move(c));
    }
  }
}

void Listener::Impl::shut_down(std::vector<ConnPtr>& conns) {
  ::close(listen_fd);
  listen_fd = -1;
  for (ConnPtr& c : conns) close_conn(std::move(c));
  const auto deadline = Clock::now() + opt.stop_grace;
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (busy.empty()) break;
      if (Clock::now() >= deadline) {  // handlers still writing: their next write fails
        for (int fd : busy) ::shutdown(fd, SHUT_RDWR);
        break;
      }
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  heavy.join();
  light.join();
  std::vector<ConnPtr> back;
  {
    std::lock_guard<std::mutex> lk(mu);
    back.swap(returned);
  }
  for (ConnPtr& c : back) close_conn(std::move(c));
}

Listener::Listener(ListenerOptions options, ListenerHooks hooks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(hooks))) {}

Listener::~Listener() = default;

Result<int> Listener::bind() {
  Impl& m = *impl_;
  const std::string where = str_cat(m.opt.host, ":", m.opt.port);
  if (pipe2(m.wake, O_NONBLOCK | O_CLOEXEC) != 0) return failed_precondition("serve: cannot create a pipe");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = str_cat(m.opt.port);
  if (getaddrinfo(m.opt.host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
    return failed_precondition("serve: cannot resolve the address " + where);
  std::string why = "no address";
  for (addrinfo* a = found; a && m.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      m.listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (m.listen_fd < 0) return failed_precondition("serve: cannot listen on " + where + ": " + why);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return static_cast<int>(ntohs(addr.ss_family == AF_INET6
                                    ? reinterpret_cast<sockaddr_in6&>(addr).sin6_port
                                    : reinterpret_cast<sockaddr_in&>(addr).sin_port));
}

bool Listener::serve() {
  Impl& m = *impl_;
  if (m.listen_fd < 0) return false;
  m.heavy.start(m.opt.workers);
  m.light.start(m.opt.light_workers);
  std::vector<ConnPtr> conns;  // reading, idle or draining; owned by this thread
  std::vector<pollfd> fds;
  bool ok = true;
  while (!m.stopping) {
    fds.assign({pollfd{m.wake[0], POLLIN, 0}, pollfd{m.listen_fd, POLLIN, 0}});
    for (const ConnPtr& c : conns) fds.push_back(pollfd{c->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), static_cast<int>(kTick.count())) < 0 && errno != EINTR) {
      ok = false;
      break;
    }
    char drain[64];
    while (::read(m.wake[0], drain, sizeof drain) > 0) {
    }
    const size_t polled = conns.size();
    for (size_t i = 0; i < polled; ++i) {
      if (!(fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (!m.on_readable(conns[i])) m.close_conn(std::move(conns[i]));
      else m.advance(conns[i]);
    }
    if (fds[1].revents & POLLIN) m.accept_all(conns);
    if (fds[1].revents & (POLLERR | POLLNVAL)) {
      ok = false;
      break;
    }
    std::vector<ConnPtr> back;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      back.swap(m.returned);
    }
    for (ConnPtr& c : back) {
      conns.push_back(std::move(c));
      if (conns.back()->parser.started()) {  // a pipelined request is in the buffer
        conns.back()->in_request = true;
        m.advance(conns.back());
      }
    }
    m.expire(conns);
    std::erase_if(conns, [](const ConnPtr& c) { return !c; });
  }
  m.shut_down(conns);
  return ok;
}

void Listener::stop() {
  impl_->stopping = true;
  if (impl_->wake[1] >= 0) impl_->poke();
}

}  // namespace kvcache::server::http
