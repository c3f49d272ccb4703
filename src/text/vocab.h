// A tokenizer vocabulary as a GGUF file stores it (tokenizer.ggml.*): token texts, SentencePiece
// scores, token types, the special ids (BOS/EOS/UNK/EOT/EOM), the add-BOS/EOS and space-prefix
// flags, and the derived end-of-generation set. Layer: engine. Validates lengths and ids
// against the token list; it does not encode or decode (tokenizer.h does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "program/gguf.h"

namespace kvcache::text {

// tokenizer.ggml.token_type values (the GGUF convention; append-only).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

// Hash that lets an unordered_map<std::string, ...> be searched with a string_view.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextIds = std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>>;

struct Vocab {
  std::vector<std::string> tokens;  // id -> text as stored
  std::vector<float> scores;        // id -> SentencePiece score (higher merges first); may be empty
  std::vector<TokenType> types;     // id -> type; kNormal when the file has none
  TextIds ids;                      // text -> lowest id with that text
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;  // -1 = none
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece: a raw text run at the start gets a space
  std::vector<int32_t> eog;      // end-of-generation ids, sorted, unique
  std::vector<int32_t> shown;    // CONTROL ids that decode prints (harmony's framing), sorted

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  TokenType type(int32_t id) const { return types[static_cast<size_t>(id)]; }
  int32_t find(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
};

// Reads tokens (required, non-empty), scores and token_type (optional, same length), the
// special ids (each < the token count), the flags (absent: add_bos = `default_add_bos`,
// add_eos = false, add_space_prefix = true) and derives `eog`: eos/eot/eom plus CONTROL or
// USER_DEFINED tokens spelled like a turn end (<|im_end|>, <|eot_id|>, <end_of_turn>, ...).
// A harmony vocabulary (gpt-oss: it has <|return|>, <|call|> and <|channel|>) ends generation
// at <|return|> and <|call|> but not at <|end|> (the model goes on after its analysis message),
// and its framing tokens <|start|> <|channel|> <|message|> <|constrain|> <|end|> go into
// `shown`, so a reply decodes with its channels visible to the parser (tool_calls.h).
// InvalidArgument/NotFound naming the key.
Result<Vocab> read_vocab(const gguf::GgufFile& file, bool default_add_bos);

// Builds the lookup and end-of-generation set after tokens/types/ids are filled in.
void finish_vocab(Vocab& v);

}  // namespace kvcache::text
