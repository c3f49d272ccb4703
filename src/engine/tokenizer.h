// Tokenizers named by tokenizer.ggml.model: raw bytes (key absent: token id = byte value) and
// GPT-2-style byte-level BPE ("gpt2": tokens + merges over the byte-to-unicode alphabet).
// Layer: engine. SentencePiece ("llama") is not implemented and is refused by name.
// Pre-tokenizer: a hand-written approximation of GPT-2's regex (see tokenizer.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "program/gguf.h"

namespace kvcache::engine {

// Copyable value; thread-safety: immutable after construction.
class Tokenizer {
 public:
  enum class Kind { kBytes, kBpe };

  // From the file's tokenizer.ggml.* keys; `vocab` is the model's vocabulary (token_embd rows).
  static Result<Tokenizer> from_gguf(const gguf::GgufFile& file, int32_t vocab);
  static Tokenizer bytes();  // token id = byte value
  // tokens: spelled in the byte-to-unicode alphabet; merges: "left right" pairs by rank.
  static Result<Tokenizer> bpe(std::vector<std::string> tokens,
                               const std::vector<std::string>& merges);

  Kind kind() const { return kind_; }
  // InvalidArgument when a piece has no token (a vocab without all 256 byte tokens).
  Result<std::vector<int32_t>> encode(std::string_view text) const;
  // Token ids outside the vocabulary decode to nothing.
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode_one(int32_t id) const { return decode(std::span<const int32_t>(&id, 1)); }

 private:
  void bpe_word(std::string_view word, std::vector<int32_t>& out, bool& ok) const;

  Kind kind_ = Kind::kBytes;
  std::vector<std::string> tokens_;                        // BPE: id -> spelling
  std::unordered_map<std::string, int32_t> ids_;           // spelling -> id
  std::unordered_map<std::string, int32_t> merge_rank_;    // "left right" -> rank
};

// The GPT-2 byte-to-unicode alphabet: byte b -> UTF-8 of its code point.
std::string byte_to_unicode(uint8_t b);

// Splits text into GPT-2-like pre-tokens (contractions, optional-space + letters/digits/
// punctuation runs, whitespace runs). Concatenating the pieces gives the text back.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace kvcache::engine
