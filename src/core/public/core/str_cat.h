// str_cat: the one string-building helper for messages (instead of std::to_string chains).
// Layer: core (standard library only). Integers print in decimal, floating values in their
// shortest round-trip form, bools as true/false; strings and chars as they are. It does not
// format widths or precisions: messages that need those keep their printf.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvcache {
namespace str_cat_detail {

inline void append(std::string& out, std::string_view s) { out.append(s); }
inline void append(std::string& out, const char* s) { out.append(s); }
inline void append(std::string& out, const std::string& s) { out.append(s); }
inline void append(std::string& out, char c) { out.push_back(c); }
inline void append(std::string& out, bool b) { out.append(b ? "true" : "false"); }

template <class T>
  requires(std::is_arithmetic_v<T> && !std::same_as<T, bool> && !std::same_as<T, char>)
void append(std::string& out, T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace str_cat_detail

// str_cat("capacity = ", 0, ", expected > 0") == "capacity = 0, expected > 0".
template <class... Args>
std::string str_cat(const Args&... args) {
  std::string out;
  (str_cat_detail::append(out, args), ...);
  return out;
}

}  // namespace kvcache
