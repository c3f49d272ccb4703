// HTTP/1.1 requests, responses and the incremental request parser. See http_message.h.
#include "server/http_message.h"

#include <algorithm>
#include <charconv>

#include "core/str_cat.h"

namespace kvcache::server::http {
namespace {

constexpr size_t kMaxChunkLine = 1024;  // "hex-size[;extensions]"

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated list `value` holds `token` (case-insensitive), as Connection does.
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

std::string Request::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

bool Request::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return iequals(h.first, name); });
}

void Response::set_header(std::string name, std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
}

void Response::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
}

void Response::set_chunked_content_provider(std::string type, Provider p, Releaser r) {
  content_type = std::move(type);
  provider = std::move(p);
  releaser = std::move(r);
}

bool RequestParser::started() const {
  if (state_ != State::kHeaders || have_request_line_) return true;
  return std::any_of(buf_.begin() + static_cast<std::ptrdiff_t>(pos_), buf_.end(),
                     [](char c) { return c != '\r' && c != '\n'; });
}

void RequestParser::fail(int status, std::string message) {
  state_ = State::kFailed;
  error_status_ = status;
  error_ = std::move(message);
  buf_.clear();
  pos_ = 0;
}

void RequestParser::feed(const char* data, size_t n) {
  if (state_ == State::kFailed) return;
  buf_.append(data, n);
  parse();
}

bool RequestParser::next_line(std::string_view& line) {
  const size_t nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) return false;
  line = std::string_view(buf_).substr(pos_, nl - pos_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  pos_ = nl + 1;
  return true;
}

void RequestParser::parse() {
  while (state_ != State::kDone && state_ != State::kFailed && step()) {
  }
  // What was parsed is dropped, so the buffer holds only what is pending.
  if (state_ != State::kFailed) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

bool RequestParser::step() {
  std::string_view line;
  switch (state_) {
    case State::kHeaders:
    case State::kTrailer: {
      const size_t before = pos_;
      const bool got = next_line(line);
      head_bytes_ += got ? pos_ - before : buf_.size() - pos_;
      if (head_bytes_ > limits_.max_header_bytes) {
        fail(431, str_cat("the request line and headers are larger than ",
                          limits_.max_header_bytes, " bytes"));
        return false;
      }
      if (!got) {
        head_bytes_ -= buf_.size() - pos_;  // counted again once the line is complete
        return false;
      }
      if (state_ == State::kHeaders) head_line(line);
      else if (line.empty()) state_ = State::kDone;
      return true;
    }
    case State::kBody:
    case State::kChunkData: {
      const size_t n = std::min(remaining_, buf_.size() - pos_);
      req_.body.append(buf_, pos_, n);
      pos_ += n;
      remaining_ -= n;
      if (remaining_ > 0) return false;
      state_ = state_ == State::kBody ? State::kDone : State::kChunkEnd;
      return true;
    }
    case State::kChunkSize:
      if (!next_line(line)) {
        if (buf_.size() - pos_ > kMaxChunkLine)
          fail(400, str_cat("a chunk-size line is longer than ", kMaxChunkLine, " bytes"));
        return false;
      }
      chunk_size_line(line);
      return true;
    case State::kChunkEnd:
      if (!next_line(line)) {
        if (buf_.size() - pos_ >= 2) fail(400, "a chunk does not end with CRLF");
        return false;
      }
      if (!line.empty()) fail(400, "a chunk does not end with CRLF");
      else state_ = State::kChunkSize;
      return true;
    case State::kDone:
    case State::kFailed:
      break;
  }
  return false;
}

void RequestParser::head_line(std::string_view line) {
  if (!have_request_line_) {
    if (line.empty()) return;  // blank lines before a request are ignored (RFC 9112 2.2)
    const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string_view::npos || sp1 == sp2 || sp1 == 0)
      return fail(400, "malformed request line (expected METHOD TARGET HTTP/1.1)");
    req_.method = std::string(line.substr(0, sp1));
    req_.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    req_.version = std::string(line.substr(sp2 + 1));
    if (!std::all_of(req_.method.begin(), req_.method.end(), token_char) || req_.target.empty() ||
        req_.target.find(' ') != std::string::npos)
      return fail(400, "malformed request line (expected METHOD TARGET HTTP/1.1)");
    if (req_.version != "HTTP/1.1" && req_.version != "HTTP/1.0")
      return fail(req_.version.rfind("HTTP/", 0) == 0 ? 505 : 400,
                  "unsupported HTTP version '" + req_.version + "' (HTTP/1.1 or HTTP/1.0)");
    req_.path = req_.target.substr(0, req_.target.find('?'));
    have_request_line_ = true;
    return;
  }
  if (line.empty()) return end_of_head();
  if (line.front() == ' ' || line.front() == '\t')
    return fail(400, "folded header lines are not accepted");
  const size_t colon = line.find(':');
  const std::string_view name = line.substr(0, colon);
  if (colon == std::string_view::npos || name.empty() || !std::all_of(name.begin(), name.end(), token_char))
    return fail(400, "malformed header line (expected NAME: VALUE)");
  if (req_.headers.size() >= limits_.max_headers)
    return fail(431, str_cat("more than ", limits_.max_headers, " header lines"));
  req_.headers.emplace_back(std::string(name), std::string(trim(line.substr(colon + 1))));
}

// The body's framing from the headers: Transfer-Encoding chunked, Content-Length or none (an
// empty body: a request without either has none, RFC 9112 6.3).
void RequestParser::end_of_head() {
  const std::string connection = req_.get_header_value("Connection");
  req_.keep_alive = req_.version == "HTTP/1.1" ? !has_token(connection, "close")
                                               : has_token(connection, "keep-alive");
  expect_continue_ = iequals(req_.get_header_value("Expect"), "100-continue");
  head_bytes_ = 0;
  if (req_.has_header("Transfer-Encoding")) {
    if (req_.has_header("Content-Length"))
      return fail(400, "both Transfer-Encoding and Content-Length are set");
    const std::string te = req_.get_header_value("Transfer-Encoding");
    if (!iequals(trim(te), "chunked"))
      return fail(501, "Transfer-Encoding '" + te + "' is not supported (only chunked)");
    state_ = State::kChunkSize;
    return;
  }
  std::string length;
  for (const auto& [k, v] : req_.headers) {
    if (!iequals(k, "Content-Length")) continue;
    if (!length.empty() && v != length) return fail(400, "Content-Length is given twice, differently");
    length = v;
  }
  if (length.empty()) {
    state_ = State::kDone;
    return;
  }
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && end == length.data() + length.size() && n > limits_.max_body_bytes))
    return fail(413, str_cat("the request body (Content-Length ", length,
                             ") is larger than the server's limit of ", limits_.max_body_bytes,
                             " bytes"));
  if (ec != std::errc() || end != length.data() + length.size())
    return fail(400, "Content-Length '" + length + "' is not a number of bytes");
  remaining_ = static_cast<size_t>(n);
  state_ = remaining_ == 0 ? State::kDone : State::kBody;
}

void RequestParser::chunk_size_line(std::string_view line) {
  const std::string_view hex = trim(line.substr(0, line.find(';')));
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), n, 16);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && n > limits_.max_body_bytes - req_.body.size()))
    return fail(413, str_cat("the chunked request body is larger than the server's limit of ",
                             limits_.max_body_bytes, " bytes"));
  if (hex.empty() || ec != std::errc() || end != hex.data() + hex.size())
    return fail(400, "malformed chunk-size line");
  remaining_ = static_cast<size_t>(n);
  state_ = n == 0 ? State::kTrailer : State::kChunkData;
}

Request RequestParser::take() {
  Request r = std::move(req_);
  req_ = Request{};
  state_ = State::kHeaders;
  have_request_line_ = expect_continue_ = false;
  head_bytes_ = remaining_ = 0;
  parse();  // a pipelined request may be in the buffer already
  return r;
}

}  // namespace kvcache::server::http
