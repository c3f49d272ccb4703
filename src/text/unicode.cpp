// UTF-8 and Unicode categories. See unicode.h.
#include "text/unicode.h"

#include <algorithm>
#include <iterator>

#include "text/unicode_tables.h"

namespace kvcache::text {

UnicodeCat unicode_cat(uint32_t cp) {
  const auto& t = unicode_data::kCatRanges;
  auto before = [](uint32_t c, const unicode_data::CatRange& r) { return c < r.first; };
  auto it = std::upper_bound(std::begin(t), std::end(t), cp, before);
  if (it == std::begin(t)) return UnicodeCat::kUnassigned;
  --it;
  return cp <= it->last ? static_cast<UnicodeCat>(it->cat) : UnicodeCat::kUnassigned;
}

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string hex_byte(uint8_t b) {
  constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

CodePoints utf8_decode(std::string_view text) {
  CodePoints out;
  out.cps.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t len = utf8_len(lead);
    uint32_t cp = 0xFFFD;
    size_t used = 1;
    if (len == 1 && lead < 0x80) {
      cp = lead;
    } else if (len > 1 && i + len <= text.size()) {
      uint32_t v = lead & (0xFF >> (len + 1));
      bool ok = true;
      for (size_t k = 1; k < len; ++k) {
        const auto c = static_cast<unsigned char>(text[i + k]);
        if ((c & 0xC0) != 0x80) ok = false;
        v = (v << 6) | (c & 0x3F);
      }
      if (ok) {
        cp = v;
        used = len;
      }
    }
    out.cps.push_back(cp);
    out.offsets.push_back(static_cast<uint32_t>(i));
    i += used;
  }
  out.offsets.push_back(static_cast<uint32_t>(text.size()));
  return out;
}

}  // namespace kvcache::text
