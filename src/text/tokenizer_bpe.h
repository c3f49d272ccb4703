// Byte-level BPE over a GGUF vocabulary (tokenizer.ggml.model = "gpt2"): bytes spelled in the
// GPT-2 byte-to-unicode alphabet, merges applied by rank inside each pre-token. Layer: engine.
// No special-token parsing and no BOS/EOS here: tokenizer.cpp does those.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "text/pretokenizer.h"
#include "text/vocab.h"

namespace kvcache::text {

// The GPT-2 byte-to-unicode alphabet: byte b -> UTF-8 of its code point.
std::string byte_to_unicode(uint8_t b);
// The reverse: the byte an alphabet code point stands for; -1 when it is not in the alphabet.
int byte_from_unicode(uint32_t cp);

// Thread-safety: immutable after build.
class BpeEncoder {
 public:
  // merges: "left right" by rank. InvalidArgument naming the entry when one has no space.
  // A merge whose parts or result are not tokens can never apply and is dropped.
  static Result<BpeEncoder> build(const Vocab& vocab, const std::vector<std::string>& merges,
                                  PreTokenizer pre, bool ignore_merges);
  // Appends the ids of one raw run. InvalidArgument when a byte has no token and the
  // vocabulary has no unknown token. O(n log n) in the run's bytes.
  Status encode(std::string_view text, std::vector<int32_t>& out) const;
  const PreTokenizer& pre() const { return pre_; }

 private:
  BpeEncoder(const Vocab& vocab, PreTokenizer pre) : vocab_(&vocab), pre_(std::move(pre)) {}
  Status encode_word(std::string_view word, std::vector<int32_t>& out) const;

  struct Merge {
    int32_t rank;
    int32_t result;
  };
  const Vocab* vocab_;
  PreTokenizer pre_;
  bool ignore_merges_ = false;  // a pre-token that is itself a token is taken whole
  std::array<int32_t, 256> byte_ids_{};  // token of each byte's alphabet character; -1 = none
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
};

// The bytes one token stands for when decoding: alphabet characters -> bytes (others kept as
// written); CONTROL/UNUSED -> nothing.
std::string bpe_piece_text(const Vocab& vocab, int32_t id);

}  // namespace kvcache::text
