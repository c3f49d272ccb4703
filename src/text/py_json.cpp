// Jinja's tojson. See py_json.h.
#include "text/py_json.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>


namespace kvcache::text {
namespace {

using nlohmann::ordered_json;

void hex4(std::string& out, uint32_t u) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", u & 0xFFFFu);
  out += buf;
}

// A Python str literal with ensure_ascii, then Jinja's HTML-safe replacements.
void py_string(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Valid UTF-8 (the JSON parser checked it): the lead byte gives the length.
      const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      uint32_t cp = c & (0x7Fu >> n);
      for (size_t k = 1; k < n && i + k < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
      i += n;
      if (cp >= 0x10000) {  // a surrogate pair, as Python writes it
        cp -= 0x10000;
        hex4(out, 0xD800 + (cp >> 10));
        hex4(out, 0xDC00 + (cp & 0x3FF));
      } else {
        hex4(out, cp);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '<': case '>': case '&': case '\'': hex4(out, c); break;
      default:
        if (c < 0x20 || c == 0x7F) hex4(out, c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

void dump(std::string& out, const ordered_json& v, int indent, int level) {
  std::string nl, close;  // line breaks before an item and before the closing bracket
  if (indent >= 0) {
    close.append(1, '\n').append(static_cast<size_t>(indent * level), ' ');
    nl = close;
    nl.append(static_cast<size_t>(indent), ' ');
  }
  const char* sep = indent < 0 ? ", " : ",";
  if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const ordered_json*>> items;
    for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(it.key(), &it.value());
    std::sort(items.begin(), items.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      out += i == 0 ? "" : sep;
      out += nl;
      py_string(out, items[i].first);
      out += ": ";
      dump(out, *items[i].second, indent, level + 1);
    }
    out += close + '}';
  } else if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      out += i == 0 ? "" : sep;
      out += nl;
      dump(out, v[i], indent, level + 1);
    }
    out += close + ']';
  } else if (v.is_string()) {
    py_string(out, v.get_ref<const std::string&>());
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "true" : "false";
  } else if (v.is_null()) {
    out += "null";
  } else {
    out += v.dump();  // numbers: integers as written, floats shortest round-trip ("1.0")
  }
}

}  // namespace

std::string py_tojson(const ordered_json& v, int indent) {
  std::string out;
  dump(out, v, indent, 0);
  return out;
}

}  // namespace kvcache::text
