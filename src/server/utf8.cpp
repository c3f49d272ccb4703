#include "server/utf8.h"

#include <cstdint>

namespace kvcache::server {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

// Ranges from the Unicode well-formed UTF-8 table (no overlongs, no surrogates, <= U+10FFFF).
int utf8_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (in(b0, 0xC2, 0xDF)) {
    need = 2;
  } else if (in(b0, 0xE0, 0xEF)) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (in(b0, 0xF0, 0xF4)) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    const auto b = static_cast<uint8_t>(s[static_cast<size_t>(i)]);
    if (!(i == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF))) return 0;
  }
  return need;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_sequence_length(s.substr(i));
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

namespace {

// Appends the sanitized form of s; with hold_tail, an incomplete last sequence is left out
// and its length returned.
size_t sanitize_into(std::string_view s, std::string& out, bool hold_tail) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = utf8_sequence_length(s.substr(i));
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else if (n < 0) {  // a proper prefix reaching the end of s
      if (hold_tail) return s.size() - i;
      out.append(kReplacement);
      break;
    } else {
      // The maximal ill-formed subpart: the lead plus the continuation bytes that fit it.
      size_t j = i + 1;
      for (size_t k = 2; k <= 4 && i + k <= s.size(); ++k) {
        if (utf8_sequence_length(s.substr(i, k)) != -1) break;
        j = i + k;
      }
      out.append(kReplacement);
      i = j;
    }
  }
  return 0;
}

}  // namespace

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  sanitize_into(s, out, /*hold_tail=*/false);
  return out;
}

std::string Utf8Stream::push(std::string_view piece) {
  pending_.append(piece);
  std::string out;
  const size_t held = sanitize_into(pending_, out, /*hold_tail=*/true);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvcache::server
