// Prompt encoding that keeps special tokens whole: the GGUF's control and user-defined tokens
// (tokenizer.ggml.token_type 3 or 4, e.g. <|im_start|>) found in a formatted chat prompt
// become their own ids; the text between them goes through the model's tokenizer. Layer:
// server. It does not decide which text is trusted: the server applies it to rendered chat
// templates only; raw completion prompts are encoded as plain text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "text/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::server {

// Copyable value; thread-safety: immutable after construction.
class SpecialTokens {
 public:
  // Empty (encode = tokenizer.encode) when file is null or has no token types.
  static SpecialTokens from_gguf(const gguf::GgufFile* file);
  explicit SpecialTokens(std::vector<std::pair<std::string, int32_t>> tokens = {});

  // Leftmost, then longest special spelling wins; the rest is tokenizer.encode'd. No special
  // token is matched overlapping a range of `plain` ([begin, end) byte ranges, ascending):
  // message content stays text.
  Result<std::vector<int32_t>> encode(
      const engine::Tokenizer& tokenizer, std::string_view text,
      std::span<const std::pair<size_t, size_t>> plain = {}) const;
  size_t size() const { return tokens_.size(); }

 private:
  std::vector<std::pair<std::string, int32_t>> tokens_;  // longest spelling first
};

}  // namespace kvcache::server
