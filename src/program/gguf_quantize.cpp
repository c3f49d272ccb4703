// Quantization plans and re-encoding of float GGUF files. See gguf_quantize.h.
#include "program/gguf_quantize.h"

#include <algorithm>

#include "program/gguf_quant.h"

namespace kvcache::gguf {
namespace {

bool is_float_type(TensorType t) {
  return t == TensorType::kF32 || t == TensorType::kF16 || t == TensorType::kBF16;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// "blk.N.<rest>" -> N; -1 for tensors outside the blocks.
int64_t layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && n < (int64_t{1} << 32); ++i)
    n = n * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? n : -1;
}

// The layers whose attn_v / ffn_down get the _M mixes' extra bits: the first and last eighth
// of the stack and every third layer between them (about half of all layers).
bool more_bits_layer(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

TensorType base_type(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ8_0: return TensorType::kQ8_0;
    case QuantMix::kQ4_0: return TensorType::kQ4_0;
    case QuantMix::kQ4_K_M: return TensorType::kQ4_K;
    case QuantMix::kQ5_K_M: return TensorType::kQ5_K;
    case QuantMix::kQ6_K: return TensorType::kQ6_K;
    case QuantMix::kMxfp4: return TensorType::kMXFP4;
  }
  return TensorType::kQ8_0;
}

// What the mix's choice depends on beyond the tensor's name.
struct ModelFacts {
  bool tied = true;     // no output.weight: the embedding is the output too
  int64_t layers = 0;   // blk.N count
  int64_t experts = 0;  // rows of the first router (ffn_gate_inp); 0 = dense
};

// The mix's choice for a matrix, before the row-length check. Mixtures of experts: expert
// stacks (3-D, rows per expert) follow their dense names; with 8 experts attention's K and V,
// small beside the experts, get Q8_0.
TensorType choose(QuantMix mix, std::string_view name, const ModelFacts& m) {
  const bool is_output = name == "output.weight" || (m.tied && name == "token_embd.weight");
  if (is_output)  // the 32-value block types keep a 32-value block type there
    return mix == QuantMix::kQ8_0 || mix == QuantMix::kMxfp4 ? TensorType::kQ8_0
                                                             : TensorType::kQ6_K;
  if (m.experts == 8 && (ends_with(name, ".attn_v.weight") || ends_with(name, ".attn_k.weight")))
    return TensorType::kQ8_0;
  const bool m_mix = mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M;
  const bool down = ends_with(name, ".ffn_down.weight") || ends_with(name, ".ffn_down_exps.weight");
  if (m_mix && (ends_with(name, ".attn_v.weight") || down) &&
      more_bits_layer(layer_of(name), m.layers))
    return TensorType::kQ6_K;
  return base_type(mix);
}

}  // namespace

std::optional<QuantMix> parse_quant_mix(std::string_view name) {
  for (QuantMix m : {QuantMix::kQ8_0, QuantMix::kQ4_0, QuantMix::kQ4_K_M, QuantMix::kQ5_K_M,
                     QuantMix::kQ6_K, QuantMix::kMxfp4})
    if (to_string(m) == name) return m;
  return std::nullopt;
}

std::string_view to_string(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ8_0: return "q8_0";
    case QuantMix::kQ4_0: return "q4_0";
    case QuantMix::kQ4_K_M: return "q4_k_m";
    case QuantMix::kQ5_K_M: return "q5_k_m";
    case QuantMix::kQ6_K: return "q6_k";
    case QuantMix::kMxfp4: return "mxfp4";
  }
  return "unknown";
}

uint32_t file_type_of(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ8_0: return 7;
    case QuantMix::kQ4_0: return 2;
    case QuantMix::kQ4_K_M: return 15;
    case QuantMix::kQ5_K_M: return 17;
    case QuantMix::kQ6_K: return 18;
    case QuantMix::kMxfp4: return 38;  // the number GGUF tools give their MXFP4 (MoE) files
  }
  return 0;
}

Result<std::vector<TensorPlan>> plan_quantization(const GgufFile& in, QuantMix mix) {
  ModelFacts facts;
  for (const TensorInfo& t : in.tensors()) {
    facts.layers = std::max(facts.layers, layer_of(t.name) + 1);
    if (t.name == "output.weight") facts.tied = false;
    if (facts.experts == 0 && ends_with(t.name, ".ffn_gate_inp.weight") && t.dims.size() == 2)
      facts.experts = t.dims[1];
  }
  std::vector<TensorPlan> plans;
  for (const TensorInfo& t : in.tensors()) {
    TensorPlan p{t.name, t.type, t.type, false};
    if (!block_geometry(t.type))
      return invalid_argument("quantize: tensor '" + t.name + "' has type " + to_string(t.type) +
                              " of unknown size; cannot copy it");
    if (!is_float_type(t.type) && is_computable(t.type))
      return invalid_argument("quantize: tensor '" + t.name + "' is already " +
                              to_string(t.type) +
                              "; quantize from an F32, F16 or BF16 file (re-quantizing adds "
                              "the errors of both encodings)");
    if (is_float_type(t.type)) {
      const bool matrix = t.dims.size() >= 2 && ends_with(t.name, ".weight");
      // Vectors (norms, biases) and routers (ffn_gate_inp: a few rows that pick the experts)
      // stay f32.
      if (!matrix || ends_with(t.name, ".ffn_gate_inp.weight")) {
        p.to = TensorType::kF32;
      } else {
        p.to = choose(mix, t.name, facts);
        const int64_t block = block_geometry(p.to)->elements;
        if (t.dims[0] % block != 0) {  // K types need 256, the others 32
          p.fallback = true;
          p.to = t.dims[0] % 32 == 0 ? TensorType::kQ8_0
                 : t.type == TensorType::kF32 ? TensorType::kF16 : t.type;
        }
      }
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

Result<QuantizeReport> quantize_model(const GgufFile& in, QuantMix mix, GgufWriter& out) {
  Result<std::vector<TensorPlan>> plans = plan_quantization(in, mix);
  if (!plans.ok()) return plans.status();
  GgufWriter w(in.alignment());
  for (const auto& [key, value] : in.metadata()) w.set(key, value);
  w.set("general.file_type", uint_value(ValueType::kUint32, file_type_of(mix)));
  w.set("general.quantization_version", uint_value(ValueType::kUint32, 2));
  QuantizeReport report;
  for (const TensorPlan& p : *plans) {
    const TensorInfo& t = *in.tensor(p.name);
    report.bytes_in += t.bytes.size();
    Status s;
    if (p.to == p.from) {
      s = w.add_tensor(t.name, t.type, t.dims, {t.bytes.begin(), t.bytes.end()});
    } else {
      Result<std::vector<float>> values = in.tensor_f32(t.name);
      if (!values.ok()) return values.status();
      s = w.add_tensor_f32(t.name, t.dims, *values, p.to);
    }
    if (!s.ok()) return Status(s.code(), "quantize: " + s.message());
    report.bytes_out += *tensor_bytes(p.to, t.n_elements());
    ++report.tensors_by_type[p.to];
    report.fallbacks += p.fallback ? 1 : 0;
  }
  out = std::move(w);
  return report;
}

}  // namespace kvcache::gguf
