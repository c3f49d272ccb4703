// Tokenizers named by tokenizer.ggml.model: raw bytes (key absent: token id = byte value),
// SentencePiece ("llama") and byte-level BPE ("gpt2", pre-tokenizer from tokenizer.ggml.pre).
// Layer: engine. This file owns what the kinds share: special-token parsing, BOS/EOS, decoding
// and the end-of-generation set; tokenizer_spm/bpe.h hold the merging, pretokenizer.h the
// splitting, vocab.h the keys. Any other model name or unknown pre-tokenizer is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "program/gguf.h"

namespace kvcache::text {

struct Vocab;
class SpmEncoder;
class BpeEncoder;

struct EncodeOptions {
  bool add_special = true;    // BOS/EOS as the file says (add_bos_token / add_eos_token)
  bool parse_special = true;  // CONTROL tokens written in the text become those tokens
                              // (USER_DEFINED tokens always do: they are vocabulary words)
  // Byte ranges [begin, end), ascending and disjoint, that stay text whatever parse_special
  // says (a chat message's content: a user cannot forge a turn marker). No CONTROL token is
  // matched inside one or overlapping one. Borrowed for the call only.
  std::span<const std::pair<size_t, size_t>> plain;
};

// Copyable value (shares its immutable tables); thread-safety: immutable after construction.
class Tokenizer {
 public:
  enum class Kind { kBytes, kBpe, kSpm };

  // From the file's tokenizer.ggml.* keys. `vocab` is the model's vocabulary (token_embd rows;
  // the token list may be shorter, never longer); vocab <= 0 = the token list's length (a
  // vocabulary-only file). InvalidArgument naming the key or value.
  static Result<Tokenizer> from_gguf(const gguf::GgufFile& file, int32_t vocab);
  // As above with vocab from token_embd.weight when the file has it, else the token list.
  static Result<Tokenizer> from_gguf(const gguf::GgufFile& file);
  static Tokenizer bytes();  // token id = byte value
  // GPT-2 BPE from a token list (spelled in the byte-to-unicode alphabet) and "left right"
  // merges by rank; all tokens NORMAL, no special ids.
  static Result<Tokenizer> bpe(std::vector<std::string> tokens,
                               const std::vector<std::string>& merges,
                               std::string_view pre = "gpt-2");

  Kind kind() const { return kind_; }
  std::string_view kind_name() const;  // "bytes", "bpe (PRE)", "spm"
  // InvalidArgument when a piece has no token and no fallback (no byte tokens, no unknown).
  Result<std::vector<int32_t>> encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;
  // Concatenated text of the ids; CONTROL tokens (but harmony's framing, see read_vocab) and
  // ids outside the vocabulary print nothing.
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode_one(int32_t id) const { return decode(std::span<const int32_t>(&id, 1)); }
  // The vocabulary's spelling of a token ("▁Hello", "Ġworld", "<0x0A>"); raw bytes: the byte.
  // Empty for ids outside the vocabulary.
  std::string piece(int32_t id) const;
  int32_t n_tokens() const;

  int32_t bos() const;  // -1 = none
  int32_t eos() const;  // -1 = none
  // End-of-generation ids (eos, eot, eom and turn-end tokens), sorted; empty for raw bytes.
  const std::vector<int32_t>& eog_ids() const;
  bool is_eog(int32_t id) const;

 private:
  struct Impl;
  Kind kind_ = Kind::kBytes;
  std::shared_ptr<const Impl> impl_;  // null for raw bytes
};

}  // namespace kvcache::text
