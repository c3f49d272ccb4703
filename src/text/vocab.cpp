// Vocabulary from GGUF keys. See vocab.h.
#include "text/vocab.h"
#include "program/gguf_keys.h"

#include <algorithm>

#include "core/str_cat.h"

namespace kvcache::text {

namespace {

// Texts that end a turn in the common chat formats (ChatML, Llama 3, Gemma, Phi-3, ...).
constexpr std::string_view kTurnEnds[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>",
    "<|end_of_text|>", "</s>", "<|return|>", "<|END_OF_TURN_TOKEN|>",
};

std::string key_error(const Status& s) { return "tokenizer: " + s.message(); }

// An optional id key: -1 when absent; InvalidArgument when outside [0, n).
Result<int32_t> read_id(const gguf::GgufFile& f, std::string_view key, int32_t n) {
  Result<int64_t> v = f.get_int(key);
  if (!v.ok()) {
    if (v.status().code() == StatusCode::kNotFound) return -1;
    return Status(v.status().code(), key_error(v.status()));
  }
  if (*v < 0 || *v >= n)
    return invalid_argument(str_cat("tokenizer: ", key, " = ", *v, ", expected [0, ",
                                    n, ") (the token count)"));
  return static_cast<int32_t>(*v);
}

Result<bool> read_flag(const gguf::GgufFile& f, std::string_view key, bool dflt) {
  Result<bool> v = f.get_bool(key);
  if (v.ok()) return *v;
  if (v.status().code() == StatusCode::kNotFound) return dflt;
  return Status(v.status().code(), key_error(v.status()));
}

// gpt-oss's harmony framing (see read_vocab in vocab.h).
void harmony_framing(Vocab& v) {
  const int32_t call = v.find("<|call|>"), end = v.find("<|end|>");
  if (v.find("<|return|>") < 0 || call < 0 || v.find("<|channel|>") < 0) return;
  std::erase(v.eog, end);
  v.eog.push_back(call);
  for (std::string_view t : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"})
    if (const int32_t id = v.find(t); id >= 0 && v.type(id) == TokenType::kControl)
      v.shown.push_back(id);
  std::sort(v.shown.begin(), v.shown.end());
}

}  // namespace

void finish_vocab(Vocab& v) {
  if (v.types.size() != v.tokens.size()) v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.ids.clear();
  v.ids.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) v.ids.emplace(v.tokens[i], static_cast<int32_t>(i));
  v.eog.clear();
  for (int32_t id : {v.eos, v.eot, v.eom})
    if (id >= 0) v.eog.push_back(id);
  for (std::string_view t : kTurnEnds) {
    const int32_t id = v.find(t);
    if (id < 0) continue;
    const TokenType ty = v.type(id);
    if (ty == TokenType::kControl || ty == TokenType::kUserDefined) v.eog.push_back(id);
  }
  v.shown.clear();
  harmony_framing(v);
  std::sort(v.eog.begin(), v.eog.end());
  v.eog.erase(std::unique(v.eog.begin(), v.eog.end()), v.eog.end());
}

Result<Vocab> read_vocab(const gguf::GgufFile& f, bool default_add_bos) {
  Vocab v;
  Result<std::vector<std::string>> tokens = f.get_string_array(gguf::key_pattern(gguf::Key::kTokenizerTokens));
  if (!tokens.ok()) return Status(tokens.status().code(), key_error(tokens.status()));
  if (tokens->empty()) return invalid_argument("tokenizer: tokenizer.ggml.tokens is empty");
  if (tokens->size() > (size_t{1} << 30))
    return invalid_argument(str_cat("tokenizer: tokenizer.ggml.tokens has ",
                                    tokens->size(), " entries, expected < 2^30"));
  v.tokens = std::move(*tokens);
  const size_t n = v.tokens.size();
  Result<std::vector<double>> scores = f.get_float_array(gguf::key_pattern(gguf::Key::kTokenizerScores));
  if (scores.ok()) {
    if (scores->size() != n)
      return invalid_argument(str_cat("tokenizer: tokenizer.ggml.scores has ",
                                      scores->size(), " entries, expected ",
                                      n, " (one per token)"));
    v.scores.assign(scores->begin(), scores->end());
  } else if (scores.status().code() != StatusCode::kNotFound) {
    return Status(scores.status().code(), key_error(scores.status()));
  }
  Result<std::vector<int64_t>> types = f.get_int_array(gguf::key_pattern(gguf::Key::kTokenizerTokenType));
  if (types.ok()) {
    if (types->size() != n)
      return invalid_argument(str_cat("tokenizer: tokenizer.ggml.token_type has ",
                                      types->size(), " entries, expected ",
                                      n, " (one per token)"));
    v.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > 6)
        return invalid_argument(str_cat("tokenizer: tokenizer.ggml.token_type[", i,
                                        "] = ", t, ", expected 0..6"));
      v.types.push_back(static_cast<TokenType>(t));
    }
  } else if (types.status().code() != StatusCode::kNotFound) {
    return Status(types.status().code(), key_error(types.status()));
  }
  const auto ni = static_cast<int32_t>(n);
  struct IdKey { std::string_view key; int32_t* out; };
  for (IdKey k : {IdKey{gguf::key_pattern(gguf::Key::kTokenizerBosId), &v.bos},
                  IdKey{gguf::key_pattern(gguf::Key::kTokenizerEosId), &v.eos},
                  IdKey{gguf::key_pattern(gguf::Key::kTokenizerUnknownId), &v.unk},
                  IdKey{gguf::key_pattern(gguf::Key::kTokenizerEotId), &v.eot},
                  IdKey{gguf::key_pattern(gguf::Key::kTokenizerEomId), &v.eom}}) {
    Result<int32_t> id = read_id(f, k.key, ni);
    if (!id.ok()) return id.status();
    *k.out = *id;
  }
  struct FlagKey { std::string_view key; bool dflt; bool* out; };
  for (FlagKey k : {FlagKey{gguf::key_pattern(gguf::Key::kTokenizerAddBos), default_add_bos, &v.add_bos},
                    FlagKey{gguf::key_pattern(gguf::Key::kTokenizerAddEos), false, &v.add_eos},
                    FlagKey{gguf::key_pattern(gguf::Key::kTokenizerAddSpacePrefix), true, &v.add_space_prefix}}) {
    Result<bool> b = read_flag(f, k.key, k.dflt);
    if (!b.ok()) return b.status();
    *k.out = *b;
  }
  // A default (key absent) never asks for a token the file does not name.
  if (f.find(gguf::key_pattern(gguf::Key::kTokenizerAddBos)) == nullptr && v.bos < 0) v.add_bos = false;
  if (v.add_bos && v.bos < 0)
    return invalid_argument("tokenizer: tokenizer.ggml.add_bos_token is true but "
                            "tokenizer.ggml.bos_token_id is absent");
  if (v.add_eos && v.eos < 0)
    return invalid_argument("tokenizer: tokenizer.ggml.add_eos_token is true but "
                            "tokenizer.ggml.eos_token_id is absent");
  finish_vocab(v);
  return v;
}

}  // namespace kvcache::text
