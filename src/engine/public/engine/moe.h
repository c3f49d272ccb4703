// The mixture-of-experts MLP of a block (qwen3moe; llama with experts, Mixtral's layout;
// gpt-oss with router/expert biases and its clamped SwiGLU): the
// router's softmax, the top-k experts of every token, and each selected expert's SwiGLU run
// once per step over all the tokens routed to it (its three matrices read once per step),
// the small experts' products of a step shared over the pool in one dispatch per stage.
// Layer: engine. Experts no token chose are never read. Attention and the dense MLP are in
// forward.cpp; loading the expert tensors in model.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model.h"
#include "kernels/weight.h"

namespace kvcache::engine {

struct ExpertChoice {
  int32_t expert = 0;
  float weight = 0.0f;  // the gate's weight on this expert's output
};

// For each of the t rows of logits [t, n_expert]: the k experts with the highest logits (ties:
// the lower index), best first, out[r * k + j]. Weights: the softmax over all n_expert logits
// at the chosen ones, divided by their sum when `renormalize` (then the softmax over the chosen
// logits alone). Cost: O(t * n_expert * k).
void route_tokens(std::span<const float> logits, int64_t t, int32_t n_expert, int32_t k,
                  bool renormalize, std::vector<ExpertChoice>& out);

// What the MoE MLPs read since the counters were last reset (benchmarks, tests).
struct MoeStats {
  int64_t expert_runs = 0;   // (step, layer, expert) triples run: one read of its 3 matrices
  int64_t expert_bytes = 0;  // bytes of expert matrices those runs read
  int64_t router_bytes = 0;  // bytes of router matrices read (one read per layer and step)
  // Per layer and expert, tokens routed to it: [layer * n_expert + expert]; empty until a
  // mixture-of-experts step ran.
  std::vector<int64_t> tokens;
};

// One expert's share of a step: choices order[a, a + n) are routed to it.
struct MoeGroup {
  int32_t expert = 0;
  int64_t a = 0, n = 0;
  int64_t slot = -1;  // first row in the fused buffers; -1 = run alone (n > kSmallBatch)
};
// A work item of the fused products: rows [r0, r1) of one group's expert matrix.
struct MoeItem {
  int32_t group = 0;
  int64_t r0 = 0, r1 = 0;
};

// Buffers of moe_ffn, grown to the largest step seen, and its counters.
struct MoeScratch {
  std::vector<float> logits, xs, gate, up, out, big_out;
  std::vector<float> y;  // [t, d]: the caller's output buffer (forward.cpp)
  std::vector<ExpertChoice> choices;
  std::vector<int32_t> order;  // indices into choices, grouped by expert
  std::vector<MoeGroup> groups;       // ascending expert
  std::vector<kernels::ProductInput> inputs;  // per group: its gathered rows, then its activations
  std::vector<MoeItem> items;
  MoeStats stats;
};

// y[t, d] = the MoE MLP of h[t, d] (the block's normalised input) for block `layer` (w must be
// a mixture-of-experts block: w.router non-empty). Tokens are grouped by expert and each
// group's rows gathered. Groups of at most kSmallBatch tokens (decode, batched decode, small
// chunks) run together: one pool dispatch for every group's gate and up rows (work items =
// (expert, row chunk) pairs, weight.h matmul_rows), the activation, one dispatch for every
// group's down rows. Larger groups run alone with matmul's GEMM. The outputs are added,
// weighted, in ascending expert order: bitwise the same for any thread count.
void moe_ffn(const LayerWeights& w, const HParams& hp, int32_t layer, std::span<const float> h,
             int64_t t, std::span<float> y, MoeScratch& s);

}  // namespace kvcache::engine
