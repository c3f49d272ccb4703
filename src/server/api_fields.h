// Reading one field of a request body with the server's 400s: a number in a range (integral
// when the target is), a boolean. Layer: server (internal to the wire formats api.cpp and
// anthropic_api.cpp). Absent or null leaves the target as it was.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/str_cat.h"
#include "server/api.h"

namespace kvcache::server {

inline std::string type_name(const nlohmann::json& v) { return v.type_name(); }

// A number field in [lo, hi]; integral when T is. Absent leaves `out` as it was.
template <class T>
inline std::optional<ApiError> number_field(const nlohmann::json& obj, const char* key, double lo, double hi,
                                     T& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const bool integral = std::is_integral_v<T>;
  if (!it->is_number() || (integral && it->is_number_float() &&
                           it->get<double>() != std::floor(it->get<double>())))
    return bad_field(key, std::string("'") + key + "' is " + type_name(*it) + ", expected " +
                              (integral ? "an integer" : "a number"));
  const double d = it->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    auto num = [](double v) {
      return v == std::floor(v) && std::fabs(v) < 1e15 ? str_cat(static_cast<int64_t>(v))
                                                       : nlohmann::json(v).dump();
    };
    const std::string range = "[" + num(lo) + ", " + num(hi) + "]";
    return bad_field(key, std::string("'") + key + "' = " + it->dump() + ", expected a value in " +
                              range);
  }
  out = static_cast<T>(d);
  return std::nullopt;
}

inline std::optional<ApiError> bool_field(const nlohmann::json& obj, const char* key, bool& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return bad_field(key, std::string("'") + key + "' is " + type_name(*it) + ", expected a boolean");
  out = it->get<bool>();
  return std::nullopt;
}

inline constexpr size_t kMaxStops = 16;
// The most messages one request may carry, in either wire format.
inline constexpr size_t kMaxMessages = 4096;

// Stop strings: a list of at most kMaxStops non-empty strings (or, `single`, one string).
inline std::optional<ApiError> stop_strings(const nlohmann::json& obj, const char* key,
                                            bool single, std::vector<std::string>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  std::vector<nlohmann::json> items;
  if (single && it->is_string()) {
    items.push_back(*it);
  } else if (it->is_array() && it->size() <= kMaxStops) {
    items.assign(it->begin(), it->end());
  } else {
    return bad_field(key, str_cat("'", key, "' must be ", single ? "a string or " : "",
                                  "a list of at most ", kMaxStops, " strings"));
  }
  for (const nlohmann::json& s : items) {
    if (!s.is_string() || s.get<std::string>().empty())
      return bad_field(key, str_cat("'", key, "' holds ", s.dump(), ", expected non-empty strings"));
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

}  // namespace kvcache::server
