// HTTP/1.1 messages as the server sees them: a parsed request, the response a handler fills (a
// whole body or a chunked provider), and an incremental request parser with hard limits (bytes
// and count of header lines, decoded body bytes in any framing). Layer: server.
// No sockets here (http_listener.h moves the bytes) and no routes (http_server.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvcache::server::http {

struct Request {
  std::string method, target, path, version;  // path: the target before any '?'
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;                           // decoded (chunked framing removed)
  std::string remote_addr;                    // the peer's address, set by the listener
  bool keep_alive = true;                     // the client lets the connection stay open

  // The first header called `name` (ASCII case-insensitive); "" when there is none.
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// Where a streaming provider writes. Thread-safety: used by the one thread writing a response.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t n) = 0;  // false: the client is gone
  virtual void done() = 0;                             // the last write was the last one
};

struct Response {
  // Called again and again (each call may wait a little) until it calls sink.done() or returns
  // false (the response is cut). `offset` = bytes written so far.
  using Provider = std::function<bool(size_t offset, DataSink& sink)>;
  using Releaser = std::function<void(bool completed)>;  // once, after the last provider call

  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the framing headers
  std::string content_type;
  std::string body;
  Provider provider;  // set: the body goes out chunked and `body` is unused
  Releaser releaser;

  void set_header(std::string name, std::string value);
  void set_content(std::string content, std::string type);
  void set_chunked_content_provider(std::string type, Provider p, Releaser r = nullptr);
};

struct Limits {
  size_t max_header_bytes = 16 * 1024;  // request line + header lines (and a chunked trailer)
  size_t max_headers = 100;             // header lines
  size_t max_body_bytes = size_t{1} << 20;  // decoded body, Content-Length or chunked
};

// Feed it bytes as they arrive; it says when a request is complete or refused. Memory: at most
// the limits plus the bytes of one feed(). A refusal is final for the connection (its framing
// is lost). Thread-safety: one thread.
class RequestParser {
 public:
  explicit RequestParser(Limits limits) : limits_(limits) {}

  void feed(const char* data, size_t n);
  bool complete() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  // Some byte of a request beyond blank lines arrived (a deadline runs from then).
  bool started() const;
  // Expect: 100-continue was asked and the body has not arrived yet.
  bool wants_continue() const { return expect_continue_ && state_ != State::kHeaders; }
  // Set when failed(): 400 malformed, 413 body over the limit, 431 headers over the limits,
  // 501 a Transfer-Encoding other than chunked, 505 an HTTP version other than 1.0 / 1.1.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_; }

  // The request so far (method and path once its first line is in): for counting a refusal.
  const Request& partial() const { return req_; }
  // The complete request; the parser goes on with any bytes after it (a pipelined request).
  Request take();

 private:
  enum class State { kHeaders, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailer, kDone, kFailed };
  void parse();
  bool step();  // one parse step; false when it needs more bytes (or is done)
  bool next_line(std::string_view& line);  // false: no complete line yet
  void head_line(std::string_view line);
  void end_of_head();
  void chunk_size_line(std::string_view line);
  void fail(int status, std::string message);

  Limits limits_;
  State state_ = State::kHeaders;
  std::string buf_;     // received, not yet parsed bytes start at pos_
  size_t pos_ = 0;
  size_t head_bytes_ = 0;  // request line + headers (or trailer) so far
  size_t remaining_ = 0;   // body or chunk bytes still to come
  bool have_request_line_ = false, expect_continue_ = false;
  Request req_;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace kvcache::server::http
