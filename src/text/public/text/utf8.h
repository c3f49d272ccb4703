// UTF-8 for text leaving the engine: generated tokens are bytes, and a token may end inside a
// character or hold bytes that are no UTF-8 at all. Layer: engine (the CLI and, next, the HTTP
// server use it). Validation follows RFC 3629 (no overlongs, no surrogates, <= U+10FFFF).
// It does not decode to code points or normalize; invalid bytes become U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvcache::text {

// `bytes` with every maximal invalid subsequence replaced by U+FFFD (EF BF BD); valid input is
// returned unchanged. An incomplete sequence at the end counts as invalid.
std::string utf8_sanitize(std::string_view bytes);

// Length of the longest prefix of `bytes` that does not end inside a character which the
// following bytes could still complete (0..3 bytes held back).
size_t utf8_complete_prefix(std::string_view bytes);

// Streams token pieces as valid UTF-8: push() returns the text that is safe to show now and
// keeps an incomplete trailing character until the next piece; finish() returns what is left
// (an unfinished character becomes U+FFFD).
class Utf8Stream {
 public:
  std::string push(std::string_view piece);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace kvcache::text
