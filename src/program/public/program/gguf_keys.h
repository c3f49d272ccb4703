// The one table of GGUF metadata keys kvcache reads and writes, and typed getters over it.
// Layer: program. Per-architecture keys are patterns ("%s.block_count", "%s" = the value of
// general.architecture); kvcache.* and general.* keys are fixed names. Getters name the full
// key in every error. Ranges and defaults that depend on meaning stay with the caller (the
// loader, the geometry derivation): this file only spells names and reads typed values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "program/gguf.h"

namespace kvcache::gguf {

// Append-only: the position is the table index below.
enum class Key : uint8_t {
  kGeneralArchitecture, kGeneralName,
  kBlockCount, kContextLength, kEmbeddingLength, kFeedForwardLength, kVocabSize,
  kHeadCount, kHeadCountKv, kKeyLength, kValueLength, kRmsEpsilon,
  kSlidingWindow, kSlidingWindowPattern, kSharedKvLayers,
  kRopeDimensionCount, kRopeFreqBase, kRopeFreqBaseSwa, kRopeScalingType, kRopeScalingFactor,
  kAttnLogitSoftcapping, kFinalLogitSoftcapping,
  kCacheKvHeads, kCacheHeadDims, kCacheValueDims, kCacheWindows, kLayerCache, kMaxContext,
  kMaxStepTokens,
  kTokenizerModel, kTokenizerPre, kTokenizerTokens, kTokenizerScores, kTokenizerTokenType,
  kTokenizerMerges, kTokenizerBosId, kTokenizerEosId, kTokenizerUnknownId, kTokenizerEotId,
  kTokenizerEomId, kTokenizerAddBos, kTokenizerAddEos, kTokenizerAddSpacePrefix,
  kTokenizerChatTemplate,
  kExpertCount, kExpertUsedCount, kExpertFeedForwardLength, kExpertSharedCount,
  kExpertWeightsNorm, kExpertGatingFunc,
};

inline constexpr std::array<std::string_view, 50> kKeyPatterns = {
    "general.architecture", "general.name",
    "%s.block_count", "%s.context_length", "%s.embedding_length", "%s.feed_forward_length",
    "%s.vocab_size",
    "%s.attention.head_count", "%s.attention.head_count_kv", "%s.attention.key_length",
    "%s.attention.value_length", "%s.attention.layer_norm_rms_epsilon",
    "%s.attention.sliding_window", "%s.attention.sliding_window_pattern",
    "%s.attention.shared_kv_layers",
    "%s.rope.dimension_count", "%s.rope.freq_base", "%s.rope.freq_base_swa",
    "%s.rope.scaling.type", "%s.rope.scaling.factor",
    "%s.attn_logit_softcapping", "%s.final_logit_softcapping",
    "kvcache.cache.kv_heads", "kvcache.cache.head_dims", "kvcache.cache.value_dims",
    "kvcache.cache.windows", "kvcache.layer_cache", "kvcache.max_context",
    "kvcache.max_step_tokens",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template",
    "%s.expert_count", "%s.expert_used_count", "%s.expert_feed_forward_length",
    "%s.expert_shared_count", "%s.expert_weights_norm", "%s.expert_gating_func",
};
static_assert(kKeyPatterns.size() == static_cast<size_t>(Key::kExpertGatingFunc) + 1,
              "one pattern per Key");

// The pattern as the table holds it ("%s.block_count" or "kvcache.layer_cache").
constexpr std::string_view key_pattern(Key key) { return kKeyPatterns[static_cast<size_t>(key)]; }
// The full name: key_name(Key::kBlockCount, "llama") == "llama.block_count"; fixed names
// ignore `arch`.
std::string key_name(Key key, std::string_view arch);

// Typed reads of one file's keys under one architecture. Borrows the file: valid while it
// lives. Absent keys are NotFound ("gguf: key 'llama.block_count' not found"); a value of
// another type is InvalidArgument naming the key and both types. The *_or getters return
// the fallback only when the key is absent, never when it holds a wrong type.
// Thread-safety: const, like GgufFile.
class KeyReader {
 public:
  KeyReader(const GgufFile& file, std::string arch) : file_(&file), arch_(std::move(arch)) {}
  // Reads general.architecture; its error when absent or not a string.
  static Result<KeyReader> open(const GgufFile& file);

  const GgufFile& file() const { return *file_; }
  const std::string& arch() const { return arch_; }
  std::string name(Key key) const { return key_name(key, arch_); }
  const Value* find(Key key) const;  // nullptr when absent

  Result<int64_t> get_int(Key key) const;
  Result<int64_t> get_int_or(Key key, int64_t fallback) const;
  Result<double> get_float_or(Key key, double fallback) const;
  Result<bool> get_bool_or(Key key, bool fallback) const;
  Result<std::string> get_string(Key key) const;
  Result<std::vector<int64_t>> get_int_array(Key key) const;

 private:
  const GgufFile* file_;
  std::string arch_;
};

}  // namespace kvcache::gguf
