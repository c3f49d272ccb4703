// SentencePiece encoding over a GGUF vocabulary (tokenizer.ggml.model = "llama"). Layer: engine.
// Spaces become U+2581, adjacent pieces merge best score first while the merged text is a
// token, and what stays unknown falls back to <0xNN> byte tokens (else the unknown token).
// No special-token parsing and no BOS/EOS here: tokenizer.cpp does those.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/vocab.h"

namespace kvcache::text {

// Read-only tables built once per vocabulary. Thread-safety: immutable after construction.
class SpmEncoder {
 public:
  explicit SpmEncoder(const Vocab& vocab);
  // Appends the ids of `text` (one raw run between special tokens; `space_prefix` adds the
  // leading space). InvalidArgument when a byte has neither a piece, a <0xNN> token nor an
  // unknown token. O(n log n) in the text's characters.
  Status encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;

 private:
  const Vocab* vocab_;
  std::array<int32_t, 256> byte_ids_;  // <0xNN> token per byte; -1 = absent
};

// The text one token stands for when decoding: U+2581 -> ' ', <0xNN> byte tokens -> the byte,
// CONTROL/UNUSED -> nothing, UNKNOWN -> U+FFFD.
std::string spm_piece_text(const Vocab& vocab, int32_t id);

}  // namespace kvcache::text
