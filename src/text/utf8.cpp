#include "text/utf8.h"

#include <cstdint>

namespace kvcache::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Bytes the character starting with `lead` takes; 0 when `lead` cannot start one.
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // continuation byte, overlong lead C0/C1, or F5..FF
}

// Whether `b` may follow `lead` as the second byte (RFC 3629's narrowed ranges).
bool second_ok(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;  // no overlongs
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;  // no surrogates
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;  // no overlongs
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;  // <= U+10FFFF
  return b >= 0x80 && b <= 0xBF;
}

// How many bytes from `i` form a valid prefix of one character: n == need means complete.
// Returns {need, valid}: `valid` bytes (>= 1 when need > 0) agree with a character of `need`.
struct Prefix {
  int need;
  int valid;
};

Prefix scan(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  const int need = sequence_length(lead);
  if (need <= 1) return {need, need};
  int valid = 1;
  for (int k = 1; k < need && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 ? !second_ok(lead, b) : (b < 0x80 || b > 0xBF)) break;
    ++valid;
  }
  return {need, valid};
}

}  // namespace

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Prefix p = scan(s, i);
    if (p.need > 0 && p.valid == p.need) {
      out.append(s.substr(i, static_cast<size_t>(p.need)));
      i += static_cast<size_t>(p.need);
    } else {  // a maximal invalid subsequence: one U+FFFD
      out.append(kReplacement);
      i += static_cast<size_t>(p.need > 0 ? p.valid : 1);
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Only the last three bytes can start an unfinished character.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    const Prefix p = scan(s, i);
    if (p.need > 1 && i + static_cast<size_t>(p.valid) == s.size() && p.valid < p.need) return i;
  }
  return s.size();
}

std::string Utf8Stream::push(std::string_view piece) {
  pending_.append(piece);
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvcache::text
