// Tiny random-weight GGUF models for the engine tests, written with gguf::GgufWriter in
// memory. Layer: tests. Every knob the forward has (pairing, bias, q/k norm, per-layer kv
// heads, windows, KV-shared layers, tied output, rope_dim, linear scaling, rope_freqs, Gemma's
// post-norms and soft-caps, mixtures of experts, attention sinks) is a field.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"
#include "program/gguf.h"

namespace kvcache::engine::testing {

struct TinySpec {
  std::string arch = "llama";
  int32_t d_model = 32;
  int32_t d_ff = 48;
  int32_t vocab = 260;
  int32_t q_heads = 4;
  int32_t head_dim = 8;
  std::vector<int32_t> cache_kv_heads = {2, 1, 4};  // per cache layer
  std::vector<int32_t> cache_windows = {0, 4, 0};    // per cache layer
  std::vector<int32_t> layer_cache = {0, 1, 2, 1};   // per model layer; 1 repeated = shared
  int32_t rope_dim = 0;           // 0 = head_dim
  float rope_linear = 1.0f;       // 1 = no scaling key written
  bool bias = false;
  bool qk_norm = false;
  bool tied = false;
  float rope_base = 10000.0f;
  std::vector<float> rope_freqs;  // non-empty: written as rope_freqs.weight
  float attn_softcap = 0.0f;      // > 0: {arch}.attn_logit_softcapping written
  float final_softcap = 0.0f;     // > 0: {arch}.final_logit_softcapping written
  // > 0: every layer gets blk.N.attn_sinks.weight of this many logits (q_heads; another count
  // for refusal tests).
  int32_t sinks = 0;
  // gemma2/gemma3 archs also get post_attention_norm / post_ffw_norm tensors.
  int64_t max_context = 256;
  int64_t max_step_tokens = 8;
  uint64_t seed = 1;
  gguf::TensorType store_as = gguf::TensorType::kF32;
  std::vector<std::string> skip_tensors;  // for error tests
  // Mixture of experts (arch qwen3moe, or llama): n_expert > 0 writes expert_count,
  // expert_used_count, expert_feed_forward_length and per block the router ffn_gate_inp
  // (always F32) and the 3-D ffn_{gate,up,down}_exps stacks instead of the dense MLP.
  int32_t n_expert = 0;
  int32_t n_expert_used = 2;
  int32_t d_ff_expert = 16;
  gguf::TensorType experts_as = gguf::TensorType::kF32;  // the stacks' type
  int32_t stack_experts = 0;  // the experts dim written in the stacks (0 = n_expert; errors)
  // Older Mixtral files: each expert a 2-D tensor blk.N.ffn_{gate,up,down}.E.weight (the
  // same values and type as the stack's slice E) instead of the stacks.
  bool split_experts = false;
  // Called with each tensor's name and values (numpy order) before it is written: tests
  // change one expert's slice.
  std::function<void(const std::string&, std::vector<float>&)> edit;
  std::vector<std::pair<std::string, int64_t>> extra_ints;  // more uint32 keys (errors)
  // YaRN keys (rope.scaling.type yarn) when > 0: factor and original context.
  float yarn_factor = 0.0f;
  int64_t yarn_orig_ctx = 64;
  // arch "gpt-oss" also writes attn_output.bias, post_attention_norm (instead of ffn_norm),
  // ffn_gate_inp.bias and the 2-D expert biases; set sinks = q_heads and n_expert > 0.
};

// The GGUF file bytes for the spec.
std::vector<uint8_t> tiny_model_bytes(const TinySpec& spec);
// Parsed file + loaded model (asserts success inside gtest).
gguf::GgufFile tiny_file(const TinySpec& spec);
Model tiny_model(const TinySpec& spec);

}  // namespace kvcache::engine::testing
