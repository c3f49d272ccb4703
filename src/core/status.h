// Status and Result: the one error type at the library boundary (every layer above core too).
// Layer: core. A Status is a code plus a message that names the operation, the value and the
// expectation. Result<T> holds either a value or a non-ok Status. No exceptions are thrown.
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

}  // namespace kvcache

// Propagate a non-ok Status from an expression returning Status.
#define KVCACHE_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::kvcache::Status kvcache_status_ = (expr); \
    if (!kvcache_status_.ok()) return kvcache_status_; \
  } while (0)
