// Model loading: hyperparameters, geometry and weights (views of the mapped file) from GGUF.
#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "core/str_cat.h"
#include "program/fingerprint.h"
#include "program/gguf_keys.h"
#include "program/gguf_quant.h"
#include "engine/yarn_rope.h"

namespace kvcache::engine {

using kernels::Weight;

namespace {

using gguf::GgufFile;

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += str_cat((i ? ", " : ""), dims[i]);
  return s + "]";
}

// A required integer key in [1, 2^24].
Result<int32_t> positive_int(const gguf::KeyReader& keys, gguf::Key key) {
  Result<int64_t> r = keys.get_int(key);
  if (!r.ok()) return Status(r.status().code(), "load model: " + r.status().message());
  if (*r <= 0 || *r > (int64_t{1} << 24))
    return invalid_argument(str_cat("load model: ", keys.name(key), " = ", *r,
                                    ", expected in [1, 16777216]"));
  return static_cast<int32_t>(*r);
}

// A tensor as float32 with its torch shape checked: [rows, cols] (GGUF dims [cols, rows]),
// or [rows] when cols == 0. `optional`: absent yields an empty vector.
Result<std::vector<float>> load_tensor(const GgufFile& f, const std::string& name, int64_t rows,
                                       int64_t cols, bool optional = false) {
  const gguf::TensorInfo* info = f.tensor(name);
  if (info == nullptr) {
    if (optional) return std::vector<float>{};
    return not_found("load model: tensor " + name + " is missing");
  }
  std::vector<int64_t> want = cols == 0 ? std::vector<int64_t>{rows}
                                        : std::vector<int64_t>{cols, rows};
  if (info->dims != want)
    return invalid_argument("load model: tensor " + name + " has GGUF dims " +
                            dims_text(info->dims) + ", expected " + dims_text(want));
  Result<std::vector<float>> data = f.tensor_f32(name);
  if (!data.ok()) return Status(data.status().code(), "load model: " + data.status().message());
  return data;
}

// The one place a GGUF tensor becomes a Weight [rows, cols]. Computable types stay in the
// file's format as a view of the mapped bytes (no copy; the Weight shares the mapping), unless
// the options ask for f32; F32/F16/BF16 data the file misaligns is copied. Other types are
// refused naming the tensor and its type. experts > 0: a 3-D stack, GGUF dims
// [cols, rows, experts], returned as one Weight [experts * rows, cols] (split_experts).
Result<Weight> load_weight(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols,
                           const LoadOptions& o, bool optional = false, int64_t experts = 0) {
  using gguf::TensorType;
  const gguf::TensorInfo* info = f.tensor(name);
  if (info == nullptr) {
    if (optional) return Weight{};
    return not_found("load model: tensor " + name + " is missing");
  }
  std::vector<int64_t> want{cols, rows};
  if (experts > 0) {
    want.push_back(experts);
    rows *= experts;
  }
  if (info->dims != want)
    return invalid_argument("load model: tensor " + name + " has GGUF dims " +
                            dims_text(info->dims) + ", expected " + dims_text(want));
  if (!gguf::is_computable(info->type))
    return invalid_argument("load model: tensor " + name + " has type " +
                            gguf::to_string(info->type) +
                            ", expected F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, "
                            "Q6_K or MXFP4");
  const std::optional<int64_t> rb = gguf::row_bytes(info->type, cols);
  if (!rb || static_cast<int64_t>(info->bytes.size()) != rows * *rb)
    return invalid_argument(str_cat("load model: tensor ", name, " holds ",
                                    info->bytes.size(), " bytes, expected ",
                                    (rb ? str_cat(rows * *rb) : std::string("whole blocks")),
                                    " for ", rows, " rows of ", cols,
                                    " ", gguf::to_string(info->type), " values"));
  const bool quantized = info->type != TensorType::kF32 && info->type != TensorType::kF16 &&
                         info->type != TensorType::kBF16;
  if ((info->type == TensorType::kF16 && !o.keep_f16) || (quantized && !o.keep_quantized)) {
    Result<std::vector<float>> data = f.tensor_f32(name);
    if (!data.ok()) return Status(data.status().code(), "load model: " + data.status().message());
    return Weight::from_f32(rows, cols, std::move(*data));
  }
  const uintptr_t align = info->type == TensorType::kF32 ? 4 : quantized ? 1 : 2;
  if (reinterpret_cast<uintptr_t>(info->bytes.data()) % align != 0)
    return Weight::from_bytes(info->type, rows, cols,
                              std::vector<uint8_t>(info->bytes.begin(), info->bytes.end()));
  Weight w;
  w.type = info->type;
  w.rows = rows;
  w.cols = cols;
  w.bytes = info->bytes;
  w.owner = f.storage();
  return w;
}

// Expert e of a stack loaded as [experts * rows, cols]: a view of rows [e * rows, (e + 1) *
// rows), sharing the stack's bytes (expert slices are contiguous in every weight type).
std::vector<Weight> split_experts(const Weight& all, int64_t experts) {
  std::vector<Weight> out(static_cast<size_t>(experts), all);
  const int64_t rows = all.rows / experts;
  const auto bytes = static_cast<size_t>(rows * all.row_bytes());
  for (int64_t e = 0; e < experts; ++e) {
    out[e].rows = rows;
    out[e].bytes = all.bytes.subspan(static_cast<size_t>(e) * bytes, bytes);
  }
  return out;
}

// Older Mixtral files hold each expert as a 2-D tensor: blk.N.ffn_gate.E.weight for the
// stack blk.N.ffn_gate_exps.weight.
std::string split_expert_name(const std::string& stack, int64_t e) {
  const size_t at = stack.rfind("_exps.weight");
  return str_cat(stack.substr(0, at), ".", e, ".weight");
}

// The experts of such a file, each loaded (and checked) as a 2-D weight [rows, cols].
Result<std::vector<Weight>> load_split_experts(const GgufFile& f, const std::string& stack,
                                               int64_t rows, int64_t cols, const LoadOptions& o,
                                               int64_t experts) {
  std::vector<Weight> out;
  for (int64_t e = 0; e < experts; ++e) {
    Result<Weight> w = load_weight(f, split_expert_name(stack, e), rows, cols, o);
    if (!w.ok()) return w.status();
    out.push_back(std::move(*w));
  }
  return out;
}

// A mixture-of-experts MLP (prefix p = "blk.N."): the router ffn_gate_inp and the 3-D
// ffn_{gate,up,down}_exps stacks (or one 2-D tensor per expert), each checked against
// expert_count and the widths.
Status load_experts(const GgufFile& f, const HParams& hp, const std::string& p,
                    const LoadOptions& o, LayerWeights& w) {
  const int64_t d = hp.d_model, ff = hp.d_ff_expert, n = hp.n_expert;
  Result<Weight> r = load_weight(f, p + "ffn_gate_inp.weight", n, d, o);
  if (!r.ok()) return r.status();
  w.router = std::move(*r);
  if (hp.gpt_oss) {  // biases: GGUF dims [n] and [width, n] (one row per expert)
    const struct {
      std::vector<float>* dst;
      const char* name;
      int64_t width;
    } biases[] = {{&w.router_b, "ffn_gate_inp.bias", 0},
                  {&w.gate_exps_b, "ffn_gate_exps.bias", ff},
                  {&w.up_exps_b, "ffn_up_exps.bias", ff},
                  {&w.down_exps_b, "ffn_down_exps.bias", d}};
    for (const auto& b : biases) {
      Result<std::vector<float>> t = load_tensor(f, p + b.name, n, b.width);
      if (!t.ok()) return t.status();
      *b.dst = std::move(*t);
    }
  }
  const struct {
    std::vector<Weight>* dst;
    const char* name;
    int64_t rows, cols;
  } stacks[] = {{&w.gate_exps, "ffn_gate_exps.weight", ff, d},
                {&w.up_exps, "ffn_up_exps.weight", ff, d},
                {&w.down_exps, "ffn_down_exps.weight", d, ff}};
  for (const auto& s : stacks) {
    const std::string name = p + s.name;
    if (f.tensor(name) == nullptr && f.tensor(split_expert_name(name, 0)) != nullptr) {
      Result<std::vector<Weight>> each = load_split_experts(f, name, s.rows, s.cols, o, n);
      if (!each.ok()) return each.status();
      *s.dst = std::move(*each);
      continue;
    }
    Result<Weight> all = load_weight(f, name, s.rows, s.cols, o, false, n);
    if (!all.ok()) return all.status();
    *s.dst = split_experts(*all, n);
  }
  return ok_status();
}

Status load_layer(const GgufFile& f, const HParams& hp, int32_t i, const LoadOptions& o,
                  LayerWeights& w) {
  const std::string p = str_cat("blk.", i, ".");
  const int64_t d = hp.d_model, qd = int64_t{hp.q_heads} * hp.head_dim;
  const int64_t kd = int64_t{w.kv_heads} * hp.head_dim, vd = int64_t{w.kv_heads} * hp.value_dim;
  auto get = [&](std::vector<float>& dst, const std::string& n, int64_t r, int64_t c,
                 bool opt) -> Status {
    Result<std::vector<float>> t = load_tensor(f, p + n, r, c, opt);
    if (!t.ok()) return t.status();
    dst = std::move(*t);
    return ok_status();
  };
  auto mat = [&](Weight& dst, const std::string& n, int64_t r, int64_t c) -> Status {
    Result<Weight> t = load_weight(f, p + n, r, c, o);
    if (!t.ok()) return t.status();
    dst = std::move(*t);
    return ok_status();
  };
  KVCACHE_RETURN_IF_ERROR(get(w.attn_norm, "attn_norm.weight", d, 0, false));
  KVCACHE_RETURN_IF_ERROR(mat(w.wq, "attn_q.weight", qd, d));
  KVCACHE_RETURN_IF_ERROR(get(w.bq, "attn_q.bias", qd, 0, true));
  if (!w.kv_shared) {
    KVCACHE_RETURN_IF_ERROR(mat(w.wk, "attn_k.weight", kd, d));
    KVCACHE_RETURN_IF_ERROR(mat(w.wv, "attn_v.weight", vd, d));
    KVCACHE_RETURN_IF_ERROR(get(w.bk, "attn_k.bias", kd, 0, true));
    KVCACHE_RETURN_IF_ERROR(get(w.bv, "attn_v.bias", vd, 0, true));
    KVCACHE_RETURN_IF_ERROR(
        get(w.k_norm, "attn_k_norm.weight", hp.head_dim, 0, !hp.qk_norm_required));
  }
  KVCACHE_RETURN_IF_ERROR(
      get(w.q_norm, "attn_q_norm.weight", hp.head_dim, 0, !hp.qk_norm_required));
  KVCACHE_RETURN_IF_ERROR(get(w.attn_sinks, "attn_sinks.weight", hp.q_heads, 0, true));
  if (hp.post_norms) {
    KVCACHE_RETURN_IF_ERROR(get(w.post_attn_norm, "post_attention_norm.weight", d, 0, false));
    KVCACHE_RETURN_IF_ERROR(get(w.post_ffn_norm, "post_ffw_norm.weight", d, 0, false));
  }
  KVCACHE_RETURN_IF_ERROR(mat(w.wo, "attn_output.weight", d, int64_t{hp.q_heads} * hp.value_dim));
  if (hp.gpt_oss) {
    KVCACHE_RETURN_IF_ERROR(get(w.bo, "attn_output.bias", d, 0, false));
    if (w.attn_sinks.empty())  // optional for the others, gpt-oss's blocks all have them
      return not_found("load model: tensor " + p + "attn_sinks.weight is missing");
  }
  // gpt-oss names its MLP input norm post_attention_norm (llama.cpp's ATTN_POST_NORM).
  KVCACHE_RETURN_IF_ERROR(get(w.ffn_norm, hp.gpt_oss ? "post_attention_norm.weight"
                                                     : "ffn_norm.weight", d, 0, false));
  if (hp.n_expert > 0) return load_experts(f, hp, p, o, w);
  KVCACHE_RETURN_IF_ERROR(mat(w.w_gate, "ffn_gate.weight", hp.d_ff, d));
  KVCACHE_RETURN_IF_ERROR(mat(w.w_up, "ffn_up.weight", hp.d_ff, d));
  KVCACHE_RETURN_IF_ERROR(mat(w.w_down, "ffn_down.weight", d, hp.d_ff));
  return ok_status();
}


constexpr const char* kArchitectures[] = {"llama",  "qwen2",  "qwen3", "qwen3moe",
                                          "gemma2", "gemma3", "gpt-oss"};

// A float key that must be finite and >= 0 (a soft-cap or a RoPE base); `fallback` if absent.
Result<float> nonnegative_float(const gguf::KeyReader& keys, gguf::Key key, double fallback) {
  Result<double> r = keys.get_float_or(key, fallback);
  if (!r.ok()) return Status(r.status().code(), "load model: " + r.status().message());
  if (!std::isfinite(*r) || *r < 0.0)
    return invalid_argument(str_cat("load model: ", keys.name(key), " = ", *r,
                                    ", expected finite and >= 0"));
  return static_cast<float>(*r);
}

// The per-architecture traits of docs/model_format.md: RoPE pairing, the attention scale
// and the Gemma extras. hp.arch is one of kArchitectures.
Status apply_architecture(const gguf::KeyReader& keys, HParams& hp) {
  using gguf::Key;
  hp.rope_base_swa = hp.rope_base;
  hp.rope_linear_swa = hp.rope_linear;
  hp.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.head_dim)));
  hp.rope_interleaved = hp.arch == "llama";
  if (hp.arch == "gpt-oss") {  // rotate-half RoPE, scale 1/sqrt(key_length), biases, sinks
    hp.gpt_oss = true;
    hp.ffn_act = FfnActivation::kSwigluOai;
    return ok_status();
  }
  if (hp.arch != "gemma2" && hp.arch != "gemma3") return ok_status();
  hp.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(hp.d_model)));
  hp.ffn_act = FfnActivation::kGeluTanh;
  hp.post_norms = true;
  // GGUF files carry no query_pre_attn_scalar. As llama.cpp derives it: key_length, except
  // the 27B sizes (gemma2 with 46 layers, gemma3 with 62), which use d_model / head_count.
  const bool size_27b = (hp.arch == "gemma2" && hp.n_layers == 46) ||
                        (hp.arch == "gemma3" && hp.n_layers == 62);
  const int32_t scalar = size_27b ? hp.d_model / hp.q_heads : hp.head_dim;
  if (scalar <= 0)
    return invalid_argument(str_cat("load model: ", keys.name(Key::kEmbeddingLength),
                                    " / head_count = ", scalar,
                                    ", expected > 0 (the attention scale)"));
  hp.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(scalar)));
  if (hp.arch == "gemma2") {
    // Absent keys: the Gemma 2 values, as llama.cpp defaults them.
    Result<float> attn = nonnegative_float(keys, Key::kAttnLogitSoftcapping, 50.0);
    if (!attn.ok()) return attn.status();
    Result<float> final_cap = nonnegative_float(keys, Key::kFinalLogitSoftcapping, 30.0);
    if (!final_cap.ok()) return final_cap.status();
    hp.attn_softcap = *attn;
    hp.final_softcap = *final_cap;
    return ok_status();
  }
  // gemma3: q/k norms, no soft-caps; sliding layers rotate with their own base, unscaled.
  hp.qk_norm_required = true;
  Result<float> base_swa = nonnegative_float(keys, Key::kRopeFreqBaseSwa, 10000.0);
  if (!base_swa.ok()) return base_swa.status();
  if (*base_swa == 0.0f)
    return invalid_argument("load model: " + keys.name(Key::kRopeFreqBaseSwa) +
                            " = 0, expected > 0");
  hp.rope_base_swa = *base_swa;
  hp.rope_linear_swa = 1.0f;
  return ok_status();
}

// The expert keys: required by qwen3moe, optional for llama (absent or 0 = dense). Only the
// softmax router without shared experts is implemented; other gating is refused by value.
Status read_experts(const gguf::KeyReader& keys, HParams& hp) {
  using gguf::Key;
  const bool moe_arch = hp.arch == "qwen3moe" || hp.arch == "gpt-oss";
  if (!moe_arch && keys.find(Key::kExpertCount) == nullptr) return ok_status();
  auto fail = [&](Key key, auto value, const std::string& expected) {
    return invalid_argument(str_cat("load model: ", keys.name(key), " = ", value, ", expected ",
                                    expected));
  };
  Result<int64_t> n = keys.get_int(Key::kExpertCount);
  if (!n.ok()) return Status(n.status().code(), "load model: " + n.status().message());
  if (*n == 0 && !moe_arch) return ok_status();
  if (*n < 1 || *n > 4096) return fail(Key::kExpertCount, *n, "in [1, 4096]");
  Result<int64_t> used = keys.get_int(Key::kExpertUsedCount);
  if (!used.ok()) return Status(used.status().code(), "load model: " + used.status().message());
  if (*used < 1 || *used > *n)
    return fail(Key::kExpertUsedCount, *used, str_cat("in [1, expert_count = ", *n, "]"));
  Result<int64_t> ff = keys.get_int_or(Key::kExpertFeedForwardLength, hp.d_ff);
  Result<int64_t> shared = keys.get_int_or(Key::kExpertSharedCount, 0);
  Result<int64_t> gating = keys.get_int_or(Key::kExpertGatingFunc, 1);
  Result<bool> norm = keys.get_bool_or(Key::kExpertWeightsNorm, true);
  for (const Status& s : {ff.status(), shared.status(), gating.status(), norm.status()})
    if (!s.ok()) return Status(s.code(), "load model: " + s.message());
  if (*ff < 1 || *ff > (int64_t{1} << 24))
    return fail(Key::kExpertFeedForwardLength, *ff, "in [1, 16777216]");
  if (*shared != 0) return fail(Key::kExpertSharedCount, *shared, "0 (no shared experts)");
  if (*gating != 1) return fail(Key::kExpertGatingFunc, *gating, "1 (softmax)");
  hp.n_expert = static_cast<int32_t>(*n);
  hp.n_expert_used = static_cast<int32_t>(*used);
  hp.d_ff_expert = static_cast<int32_t>(*ff);
  hp.expert_weights_norm = *norm || hp.gpt_oss;  // gpt-oss: softmax over the chosen logits
  return ok_status();
}

// YaRN's keys (llama.cpp's names): rope.scaling.factor s > 0, rope.scaling.original_context_length
// L > 0 (required), rope.scaling.yarn_beta_fast / yarn_beta_slow (default 32 / 1, fast > slow >
// 0). See yarn_rope.h.
Status read_yarn(const gguf::KeyReader& keys, HParams& hp) {
  using gguf::Key;
  const GgufFile& f = keys.file();
  const std::string p = keys.arch() + ".rope.scaling.";
  auto number = [&](const std::string& key, std::optional<double> fallback) -> Result<double> {
    if (fallback && f.find(key) == nullptr) return *fallback;
    Result<double> v = f.get_float(key);
    if (!v.ok()) return Status(v.status().code(), "load model: " + v.status().message());
    if (!std::isfinite(*v) || !(*v > 0.0))
      return invalid_argument(str_cat("load model: ", key, " = ", *v, ", expected > 0"));
    return *v;
  };
  Result<double> factor = number(keys.name(Key::kRopeScalingFactor), std::nullopt);
  Result<double> length = number(p + "original_context_length", std::nullopt);
  Result<double> fast = number(p + "yarn_beta_fast", 32.0);
  Result<double> slow = number(p + "yarn_beta_slow", 1.0);
  for (const Result<double>* r : {&factor, &length, &fast, &slow})
    if (!r->ok()) return r->status();
  if (!(*fast > *slow))
    return invalid_argument(str_cat("load model: ", p, "yarn_beta_fast = ", *fast,
                                    " and yarn_beta_slow = ", *slow,
                                    ", expected beta_fast > beta_slow"));
  if (hp.rope_dim < 2 || hp.rope_base <= 1.0f)
    return invalid_argument(str_cat("load model: yarn needs rope.dimension_count >= 2 and "
                                    "rope.freq_base > 1 (got ", hp.rope_dim, ", ", hp.rope_base,
                                    ")"));
  hp.rope_yarn_factor = static_cast<float>(*factor);
  hp.rope_yarn_orig_ctx = static_cast<int64_t>(*length);
  hp.rope_yarn_beta_fast = static_cast<float>(*fast);
  hp.rope_yarn_beta_slow = static_cast<float>(*slow);
  hp.rope_attn_factor = yarn_attn_factor(hp.rope_yarn_factor);
  return ok_status();
}

// rope_freqs.weight (Llama 3.1/3.2): one positive finite divisor per rotated pair, or absent.
Result<std::vector<float>> load_rope_freqs(const GgufFile& f, const HParams& hp) {
  Result<std::vector<float>> r = load_tensor(f, "rope_freqs.weight", hp.rope_dim / 2, 0, true);
  if (!r.ok()) return r.status();
  for (size_t j = 0; j < r->size(); ++j)
    if (!std::isfinite((*r)[j]) || !((*r)[j] > 0.0f))
      return invalid_argument(str_cat("load model: rope_freqs.weight[", j, "] = ",
                                      (*r)[j], ", expected finite and > 0"));
  return r;
}

}  // namespace

Result<HParams> read_hparams(const GgufFile& f) {
  using gguf::Key;
  HParams hp;
  Result<gguf::KeyReader> opened = gguf::KeyReader::open(f);
  if (!opened.ok())
    return Status(opened.status().code(), "load model: " + opened.status().message());
  const gguf::KeyReader& keys = *opened;
  hp.arch = keys.arch();
  if (std::find(std::begin(kArchitectures), std::end(kArchitectures), hp.arch) ==
      std::end(kArchitectures))
    return invalid_argument("load model: general.architecture = \"" + hp.arch +
                            "\" is not supported, expected one of llama, qwen2, qwen3, "
                            "qwen3moe, gemma2, gemma3, gpt-oss");
  Result<int32_t> v = positive_int(keys, Key::kBlockCount);
  if (!v.ok()) return v.status();
  hp.n_layers = *v;
  if (!(v = positive_int(keys, Key::kEmbeddingLength)).ok()) return v.status();
  hp.d_model = *v;
  if (!(v = positive_int(keys, Key::kFeedForwardLength)).ok()) return v.status();
  hp.d_ff = *v;
  if (!(v = positive_int(keys, Key::kHeadCount)).ok()) return v.status();
  hp.q_heads = *v;
  Result<int64_t> kl = keys.get_int_or(Key::kKeyLength, hp.d_model / hp.q_heads);
  Result<int64_t> vl = keys.get_int_or(Key::kValueLength, hp.d_model / hp.q_heads);
  if (!kl.ok()) return kl.status();
  if (!vl.ok()) return vl.status();
  if (*kl <= 0 || *kl > 65536 || *vl <= 0 || *vl > 65536)
    return invalid_argument(str_cat("load model: ", keys.name(Key::kKeyLength), "/value_length = ",
                                    *kl, "/", *vl,
                                    ", expected in [1, 65536]"));
  hp.head_dim = static_cast<int32_t>(*kl);
  hp.value_dim = static_cast<int32_t>(*vl);
  Result<double> eps = keys.get_float_or(Key::kRmsEpsilon, 1e-5);
  Result<double> base = keys.get_float_or(Key::kRopeFreqBase, 10000.0);
  Result<int64_t> rdim = keys.get_int_or(Key::kRopeDimensionCount, hp.head_dim);
  Result<int64_t> ctx = keys.get_int_or(Key::kContextLength, 0);
  if (!eps.ok()) return eps.status();
  if (!base.ok()) return base.status();
  if (!rdim.ok()) return rdim.status();
  if (!ctx.ok()) return ctx.status();
  if (!(*eps > 0.0) || !(*base > 0.0))
    return invalid_argument(str_cat("load model: rms epsilon and rope.freq_base must be > 0 (got ",
                                    *eps, ", ", *base, ")"));
  if (*rdim < 0 || *rdim > hp.head_dim || *rdim % 2 != 0)
    return invalid_argument(str_cat("load model: ", keys.name(Key::kRopeDimensionCount), " = ",
                                    *rdim, ", expected even and <= key_length ",
                                    hp.head_dim));
  hp.rms_eps = static_cast<float>(*eps);
  hp.rope_base = static_cast<float>(*base);
  hp.rope_dim = static_cast<int32_t>(*rdim);
  hp.context_length = *ctx;
  Result<std::string> scaling = keys.get_string(Key::kRopeScalingType);
  if (scaling.ok() && *scaling == "linear") {
    Result<double> factor = keys.get_float_or(Key::kRopeScalingFactor, 1.0);
    if (!factor.ok()) return factor.status();
    if (!(*factor > 0.0))
      return invalid_argument(str_cat("load model: ", keys.name(Key::kRopeScalingFactor), " = ",
                                      *factor, ", expected > 0"));
    hp.rope_linear = static_cast<float>(*factor);
  } else if (scaling.ok() && *scaling == "yarn" && hp.arch != "gemma3") {
    KVCACHE_RETURN_IF_ERROR(read_yarn(keys, hp));
  } else if (scaling.ok() && *scaling != "none") {
    return invalid_argument("load model: " + keys.name(Key::kRopeScalingType) + " = \"" +
                            *scaling + "\" is not supported" +
                            (*scaling == "yarn" ? " for gemma3 (its sliding layers' RoPE)"
                                                : ", expected \"linear\", \"yarn\" or \"none\""));
  }
  KVCACHE_RETURN_IF_ERROR(apply_architecture(keys, hp));
  KVCACHE_RETURN_IF_ERROR(read_experts(keys, hp));
  const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
  if (embd == nullptr) return not_found("load model: tensor token_embd.weight is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != hp.d_model || embd->dims[1] <= 0 ||
      embd->dims[1] > (int64_t{1} << 24))
    return invalid_argument(str_cat("load model: tensor token_embd.weight has GGUF dims ",
                                    dims_text(embd->dims), ", expected [",
                                    hp.d_model, ", vocab]"));
  hp.vocab = static_cast<int32_t>(embd->dims[1]);
  return hp;
}

Result<Model> Model::load(const GgufFile& f, const LoadOptions& options) {
  Result<HParams> hp = read_hparams(f);
  if (!hp.ok()) return hp.status();
  Result<ModelGeometry> geo = read_model_geometry(f);
  if (!geo.ok()) return Status(geo.status().code(), "load model: " + geo.status().message());
  Model m;
  m.hp_ = std::move(*hp);
  m.geometry_ = std::move(*geo);
  m.fingerprint_ = model_fingerprint(f);
  const HParams& h = m.hp_;
  if (static_cast<int32_t>(m.geometry_.layer_cache.size()) != h.n_layers)
    return invalid_argument(str_cat("load model: ",
                                    gguf::key_pattern(gguf::Key::kLayerCache), " has ",
                                    m.geometry_.layer_cache.size(),
                                    " entries, expected block_count = ", h.n_layers));
  std::vector<bool> owned(m.geometry_.cache.layers.size(), false);
  m.layers_.resize(h.n_layers);
  for (int32_t i = 0; i < h.n_layers; ++i) {
    LayerWeights& w = m.layers_[i];
    w.cache = m.geometry_.layer_cache[i];
    if (w.cache < 0 || w.cache >= static_cast<int32_t>(owned.size()))
      return invalid_argument(str_cat("load model: ",
                                      gguf::key_pattern(gguf::Key::kLayerCache), "[",
                                      i, "] = ",
                                      w.cache, ", out of range"));
    const LayerGeometry& lg = m.geometry_.cache.layers[w.cache];
    if (lg.head_dim != h.head_dim || lg.value_dim != h.value_dim)
      return invalid_argument(str_cat("load model: cache layer ", w.cache,
                                      " has head_dim/value_dim ", lg.head_dim, "/",
                                      lg.value_dim, ", expected key/value_length ",
                                      h.head_dim, "/", h.value_dim));
    if (h.q_heads % lg.kv_heads != 0)
      return invalid_argument(str_cat("load model: head_count ", h.q_heads,
                                      " is not a multiple of cache layer ", w.cache,
                                      " kv_heads ", lg.kv_heads));
    w.kv_heads = lg.kv_heads;
    w.sliding = lg.sliding();
    w.kv_shared = owned[w.cache];
    owned[w.cache] = true;
    KVCACHE_RETURN_IF_ERROR(load_layer(f, h, i, options, w));
  }
  Result<Weight> e = load_weight(f, "token_embd.weight", h.vocab, h.d_model, options);
  if (!e.ok()) return e.status();
  m.token_embd_ = std::move(*e);
  Result<std::vector<float>> t = load_tensor(f, "output_norm.weight", h.d_model, 0);
  if (!t.ok()) return t.status();
  m.output_norm_ = std::move(*t);
  e = load_weight(f, "output.weight", h.vocab, h.d_model, options, /*optional=*/true);
  if (!e.ok()) return e.status();
  m.output_ = std::move(*e);
  m.tied_ = m.output_.empty();
  Result<std::vector<float>> freqs = load_rope_freqs(f, h);
  if (!freqs.ok()) return freqs.status();
  m.rope_freqs_ = std::move(*freqs);
  if (h.rope_yarn_factor > 0.0f) {  // YaRN's divisors, on top of the file's when both
    std::vector<float> yarn = yarn_divisors(h);
    if (!m.rope_freqs_.empty())
      for (size_t j = 0; j < yarn.size(); ++j) yarn[j] *= m.rope_freqs_[j];
    m.rope_freqs_ = std::move(yarn);
  }
  return m;
}

namespace {

// A matrix whose rows are not whole blocks of `type` (a K-quant's 256 values) is encoded Q8_0
// instead when they are whole blocks of 32, else kept as it is.
Weight requantize(const Weight& w, gguf::TensorType type) {
  if (!gguf::row_bytes(type, w.cols)) type = gguf::TensorType::kQ8_0;
  const std::optional<int64_t> rb = gguf::row_bytes(type, w.cols);
  if (w.empty() || w.type == type || !rb) return w;
  std::vector<uint8_t> data(static_cast<size_t>(w.rows * *rb));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    w.row(r, row);
    (void)gguf::quantize(type, row, std::span<uint8_t>(data).subspan(r * *rb, *rb));
  }
  return Weight::from_bytes(type, w.rows, w.cols, std::move(data));
}

}  // namespace

Result<Model> Model::requantized(gguf::TensorType type) const {
  using gguf::TensorType;
  if (type != TensorType::kQ8_0 && type != TensorType::kQ4_0 && type != TensorType::kQ4_K &&
      type != TensorType::kQ5_K && type != TensorType::kQ6_K)
    return invalid_argument(str_cat("requantize model: type ", gguf::to_string(type),
                                    ", expected q8_0, q4_0, q4_k, q5_k or q6_k"));
  Model m;
  m.hp_ = hp_;
  m.geometry_ = geometry_;
  m.layers_ = layers_;
  for (LayerWeights& w : m.layers_) {
    for (Weight* x : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down})
      *x = requantize(*x, type);
    for (std::vector<Weight>* stack : {&w.gate_exps, &w.up_exps, &w.down_exps})
      for (Weight& x : *stack) x = requantize(x, type);  // the router keeps its type
  }
  m.token_embd_ = token_embd_;
  m.output_ = requantize(output(), type);  // a tied output gets its own encoded copy
  m.tied_ = false;
  m.output_norm_ = output_norm_;
  m.rope_freqs_ = rope_freqs_;
  m.fingerprint_ = fingerprint_;
  return m;
}

int64_t Model::n_params() const {
  int64_t n = token_embd_.n_elements() + output_.n_elements() +
              static_cast<int64_t>(output_norm_.size());
  for (const LayerWeights& w : layers_) {
    for (const Weight* m :
         {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.router})
      n += m->n_elements();
    for (const std::vector<Weight>* stack : {&w.gate_exps, &w.up_exps, &w.down_exps})
      for (const Weight& x : *stack) n += x.n_elements();
    for (const std::vector<float>* v : {&w.attn_norm, &w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm,
                                        &w.ffn_norm, &w.post_attn_norm, &w.post_ffn_norm,
                                        &w.attn_sinks})
      n += static_cast<int64_t>(v->size());
    for (const std::vector<float>* v :
         {&w.bo, &w.router_b, &w.gate_exps_b, &w.up_exps_b, &w.down_exps_b})  // gpt-oss
      n += static_cast<int64_t>(v->size());
  }
  return n;
}

}  // namespace kvcache::engine
