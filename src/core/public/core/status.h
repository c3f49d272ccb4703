// Status and Result: the one error type at the library boundary (every layer above core too).
// Layer: core. A Status is a code plus a message that names the operation, the value and the
// expectation. Result<T> holds either a value or a non-ok Status. No exceptions are thrown.
// The macros below propagate errors; a context prefix is built only when there is an error.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvcache {

// Serialized (op-test result.json uses to_string); append only.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,     // bad shape, bad value, malformed input
  kNotFound,            // unknown sequence, kind, key, file
  kResourceExhausted,   // cache or id pool full
  kFailedPrecondition,  // wrong protocol state (no declaration, verb between layers, ...)
  kOutOfRange,          // rewind past what the cache still holds
  kUnimplemented,       // a verb the layout does not have
  kInternal,            // a builder returned nothing; a broken invariant
  kDataLoss,            // a file is truncated or corrupt
};

// "ok", "invalid_argument", "not_found", ... (snake_case, stable).
std::string_view to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }

// A value or the reason there is none. Construct from T (ok) or from a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// `s` with "prefix: " before its message, same code; an ok `s` stays ok (and unprefixed).
inline Status with_context(Status s, std::string_view prefix) {
  if (s.ok()) return s;
  std::string m;
  m.reserve(prefix.size() + 2 + s.message().size());
  m.append(prefix).append(": ").append(s.message());
  return Status(s.code(), std::move(m));
}

}  // namespace kvcache

#define KVCACHE_CONCAT_INNER_(a, b) a##b
#define KVCACHE_CONCAT_(a, b) KVCACHE_CONCAT_INNER_(a, b)

// Propagate a non-ok Status from an expression returning Status.
#define KVCACHE_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::kvcache::Status kvcache_status_ = (expr); \
    if (!kvcache_status_.ok()) return kvcache_status_; \
  } while (0)

// As KVCACHE_RETURN_IF_ERROR, prefixing the message with `context` (any expression convertible
// to std::string_view), which is evaluated only on failure.
#define KVCACHE_RETURN_IF_ERROR_CTX(expr, context)                          \
  do {                                                                      \
    ::kvcache::Status kvcache_status_ = (expr);                             \
    if (!kvcache_status_.ok())                                              \
      return ::kvcache::with_context(std::move(kvcache_status_), (context)); \
  } while (0)

// `lhs = value of rexpr` (a Result<T>), or return its Status. lhs may declare a variable:
// KVCACHE_ASSIGN_OR_RETURN(auto file, GgufFile::open(path)); not usable as a single-statement
// if/else body (it expands to several statements).
#define KVCACHE_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVCACHE_ASSIGN_OR_RETURN_IMPL_(KVCACHE_CONCAT_(kvcache_result_, __LINE__), lhs, rexpr)
#define KVCACHE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                   \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
