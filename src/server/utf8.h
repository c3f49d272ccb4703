// UTF-8 helpers for text that leaves the server: validity, replacement of invalid bytes by
// U+FFFD, and a stream that holds back an incomplete trailing sequence between tokens (a
// byte-level tokenizer may split one character over several tokens). Layer: server.
// It does not normalize or count characters; it only makes byte strings safe for JSON.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvcache::server {

// Length of the well-formed sequence starting at s[0] (1..4), 0 when s[0] starts no
// well-formed sequence, or -1 when s is a proper prefix of one (more bytes may complete it).
int utf8_sequence_length(std::string_view s);

bool utf8_valid(std::string_view s);

// Each maximal ill-formed subpart becomes U+FFFD (an incomplete sequence at the end too).
std::string utf8_sanitize(std::string_view s);

// Thread-safety: a value used by one thread. push() returns the valid text released so far
// (invalid bytes replaced); at most 3 bytes of an incomplete last sequence are held back.
class Utf8Stream {
 public:
  std::string push(std::string_view piece);
  std::string flush();  // the held bytes, sanitized (U+FFFD when incomplete)
  size_t held() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace kvcache::server
