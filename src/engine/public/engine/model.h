// A Llama-family decoder's hyperparameters and weights, loaded from a GGUF file per
// docs/model_format.md (dense, or a mixture of experts: qwen3moe, llama with experts, gpt-oss).
// Layer: engine. Matrices stay in the file's type (F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) as views of the memory-mapped file, which the
// Model keeps mapped; vectors (norms, biases) are converted to float32 once at load.
// The model knows nothing of
// the cache beyond its published geometry (ModelGeometry). Errors name the missing tensor/key or the wrong shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/kernels.h"
#include "program/gguf.h"
#include "program/model_geometry.h"

namespace kvcache::engine {

// The MLP's gate activation: silu (llama, qwen), the tanh form of GELU (gemma) or gpt-oss's
// clamped SwiGLU (kernels.h swiglu_oai).
enum class FfnActivation { kSilu, kGeluTanh, kSwigluOai };

struct HParams {
  // general.architecture: llama, qwen2, qwen3, qwen3moe, gemma2, gemma3 (text), gpt-oss;
  // others are refused.
  std::string arch;
  int32_t n_layers = 0;        // block_count
  int32_t d_model = 0;         // embedding_length
  int32_t d_ff = 0;            // feed_forward_length
  int32_t vocab = 0;           // rows of token_embd
  int32_t q_heads = 0;         // attention.head_count
  int32_t head_dim = 0;        // attention.key_length (Dk)
  int32_t value_dim = 0;       // attention.value_length (Dv)
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_linear = 1.0f;    // positions are divided by this (rope.scaling.factor, linear)
  // YaRN (rope.scaling.type = yarn; yarn_rope.h): factor s > 0 (0 = off), the original context
  // length and the ramp's rotation counts; its pair divisors are folded into
  // Model::rope_freqs(), and q and k's rotated dims are scaled by rope_attn_factor.
  float rope_yarn_factor = 0.0f;
  int64_t rope_yarn_orig_ctx = 0;
  float rope_yarn_beta_fast = 32.0f, rope_yarn_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;  // YaRN: 0.1 ln(s) + 1 when s > 1; else 1
  int32_t rope_dim = 0;        // rotated dims per head (even, <= head_dim)
  bool rope_interleaved = true;  // llama: (2i, 2i+1); qwen2/qwen3: (i, i + rope_dim/2)
  int64_t context_length = 0;  // 0 = unknown
  // RoPE of the layers whose file geometry slides (gemma3: base 10000, no scaling); the
  // other architectures use rope_base / rope_linear on every layer.
  float rope_base_swa = 10000.0f;
  float rope_linear_swa = 1.0f;
  // Gemma family (defaults = llama behaviour).
  float embed_scale = 1.0f;    // token embeddings times this (gemma: sqrt(d_model))
  FfnActivation ffn_act = FfnActivation::kSilu;
  float attn_scale = 0.0f;     // attention logit scale: 1/sqrt(query_pre_attn_scalar)
  float attn_softcap = 0.0f;   // 0 = none; gemma2: {arch}.attn_logit_softcapping
  float final_softcap = 0.0f;  // 0 = none; gemma2: {arch}.final_logit_softcapping
  bool post_norms = false;     // post_attention_norm / post_ffw_norm required (gemma)
  bool qk_norm_required = false;  // attn_q_norm / attn_k_norm required (gemma3)
  // Mixture of experts (qwen3moe; llama with expert_count > 0): every block's MLP is
  // n_expert SwiGLU experts of width d_ff_expert behind a router. 0 = dense blocks.
  int32_t n_expert = 0;            // expert_count
  int32_t n_expert_used = 0;       // expert_used_count: experts per token (top-k), <= n_expert
  int32_t d_ff_expert = 0;         // expert_feed_forward_length, else feed_forward_length
  // The chosen experts' softmax probabilities are renormalised to sum 1 (expert_weights_norm;
  // Mixtral's softmax over the chosen logits is the same thing).
  bool expert_weights_norm = true;
  // gpt-oss: attn_output.bias, the router's and the experts' biases and per-layer
  // attn_sinks.weight are required; the MLP input norm is named post_attention_norm.
  bool gpt_oss = false;
};

// One decoder block. Matrices are [out, in]. Empty = absent (optional / KV-shared).
struct LayerWeights {
  int32_t cache = 0;        // cache layer this block reads (ModelGeometry::layer_cache)
  bool kv_shared = false;   // an earlier block owns the cache: no K/V projections here
  int32_t kv_heads = 0;     // of the cache layer
  bool sliding = false;     // the file's geometry slides this layer (selects its RoPE)
  kernels::Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  std::vector<float> attn_norm, bq, bk, bv, q_norm, k_norm, ffn_norm;  // vectors, f32
  std::vector<float> post_attn_norm, post_ffn_norm;  // [d]; empty unless gemma
  // Mixture-of-experts blocks (HParams::n_expert > 0; w_gate/w_up/w_down are then empty):
  // the router [n_expert, d] in the file's type, and per expert a view of its slice of the
  // 3-D tensors ffn_{gate,up}_exps [d_ff_expert, d] and ffn_down_exps [d, d_ff_expert].
  kernels::Weight router;
  std::vector<kernels::Weight> gate_exps, up_exps, down_exps;
  // [q_heads] learned attention-sink logits (blk.N.attn_sinks.weight), handed to the cache
  // with every attend call; empty when the file has none (the geometry's flag says the same).
  std::vector<float> attn_sinks;
  // gpt-oss: output bias [d], router bias [n_expert], expert biases flattened per expert:
  // gate/up [n_expert * d_ff_expert], down [n_expert * d]. Empty = absent.
  std::vector<float> bo, router_b, gate_exps_b, up_exps_b, down_exps_b;
};

struct LoadOptions {
  bool keep_f16 = true;        // false: convert F16 matrices to f32 too
  bool keep_quantized = true;  // false: decode block-quantized matrices to f32 at load
  // load_model from a path: read the file into huge pages (true) or map it in place (false;
  // slower decode, but the page cache is shared with other processes).
  bool huge_pages = true;
};

// Move-only: the weights are big. Thread-safety: immutable after load.
class Model {
 public:
  // InvalidArgument/NotFound naming the key or tensor; also runs validate_model_geometry.
  static Result<Model> load(const gguf::GgufFile& file, const LoadOptions& options = {});

  const HParams& hparams() const { return hp_; }
  const ModelGeometry& geometry() const { return geometry_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const kernels::Weight& token_embd() const { return token_embd_; }  // [vocab, d]
  const std::vector<float>& output_norm() const { return output_norm_; }
  // [vocab, d]; the embedding itself when tied.
  const kernels::Weight& output() const { return tied_ ? token_embd_ : output_; }
  bool tied() const { return tied_; }
  // rope_dim/2 divisors of the pair frequencies: rope_freqs.weight's, times YaRN's when the
  // file scales RoPE by yarn; empty when neither applies.
  const std::vector<float>& rope_freqs() const { return rope_freqs_; }
  int64_t n_params() const;
  // A copy whose matrices (every block's and the output's, not the embedding rows) are
  // re-encoded in memory as `type` (Q8_0, Q4_0, Q4_K, Q5_K or Q6_K): a cheaper drafter from
  // the same weights. A matrix whose width is not a whole number of the type's blocks (256 for
  // the K types) is encoded Q8_0 instead; one already of that type, or not of whole blocks of
  // 32 either, is shared as it is. InvalidArgument naming the type otherwise. Cost: decodes
  // and encodes every matrix once. The copy shares nothing mutable with this model (both are
  // immutable).
  Result<Model> requantized(gguf::TensorType type) const;
  // program/fingerprint.h of the file the model was loaded from (keys cached K/V by model).
  uint64_t fingerprint() const { return fingerprint_; }

  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 private:
  Model() = default;
  HParams hp_;
  ModelGeometry geometry_;
  std::vector<LayerWeights> layers_;
  kernels::Weight token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<float> rope_freqs_;
  bool tied_ = false;
  uint64_t fingerprint_ = 0;
};

// Reads the hyperparameters alone (no weights); vocab comes from token_embd's shape.
Result<HParams> read_hparams(const gguf::GgufFile& file);

}  // namespace kvcache::engine
