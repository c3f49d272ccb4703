// The byte-level BPE pre-tokenizers named by tokenizer.ggml.pre: each splits text into the
// pieces BPE then merges inside. Layer: engine. Each is a sequence of patterns (the published
// regexes, matched by hand-written code over code points, leftmost alternative first);
// every pattern splits each current piece into its matches and the text between them.
// Unknown names are refused, never guessed. Knows nothing of vocabularies or merges.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvcache::text {

// One published regex, as an id; the matchers live in pretokenizer.cpp.
enum class PrePattern {
  kGpt2,            // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,          // (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
                    //   \s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,           // as kLlama3 with \p{N} (one digit per piece)
  // tekken, with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
  //   [^\r\n\p{L}\p{N}]?U*W+|[^\r\n\p{L}\p{N}]?U+W*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|
  //   \s*[\r\n]+|\s+(?!\S)|\s+
  kTekken,
  kNewline,         // [\r\n]
  kDsLlmLetters,    // \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+ (the cased-letter ranges of deepseek-llm)
  kDsLlmPunct,      // \s?[!-/:-~！-／：-～‘-‟　-。]+
  kTrailingSpace,   // \s+$
  kCjk,             // [一-龥ࠀ-一가-퟿]+
  kNumbers,         // \p{N}+
  kDigit,           // \p{N}
  kLetters,         // \s?\p{L}+
  kPunct,           // \s?\p{P}+
  kFalconPunct,     // [\p{P}\$\+<=>\^~\|`]+
  kThreeDigits,     // [0-9][0-9][0-9]
};

// Copyable value; thread-safety: immutable after construction.
class PreTokenizer {
 public:
  // "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
  // "refact", "smollm", "mpt", "gpt-neox", "tekken" (and "default" = gpt-2). InvalidArgument
  // naming the value otherwise.
  static Result<PreTokenizer> from_name(std::string_view name);
  static std::vector<std::string> names();  // the accepted names, sorted

  const std::string& name() const { return name_; }
  // Splits `text` (< 4 GiB; Tokenizer::encode caps it at 1 GiB) into pieces whose concatenation
  // is `text` (views into it). O(n) per pattern (the tables cost O(log ranges) per code point).
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::string name_;
  std::vector<PrePattern> patterns_;
};

}  // namespace kvcache::text
