// The executor's private records: a session (one completion being generated) and a request
// (n completions of one prompt). Layer: serve; internal to executor*.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "serve/executor.h"

namespace kvcache::serve {

struct Executor::Session {
  explicit Session(const engine::SamplerConfig& sc) : sampler(sc) {}
  int64_t id = -1;               // never reused
  int64_t request = -1;
  int32_t completion = 0;        // index in the request's completions
  int32_t seq = -1;              // cache sequence while admitted; -1 while waiting
  std::vector<int32_t> tokens;   // prompt + generated
  int64_t prompt_len = 0;
  int64_t fed = 0;               // tokens[0, fed) are in the cache at positions [0, fed)
  int64_t admitted_at = 0;       // tick of the last admission: the youngest is preempted first
  int32_t forks_pending = 0;     // completion 0 of an n > 1 request before its first sample
  engine::Sampler sampler;
  std::optional<text::GrammarCursor> grammar;  // with GenerateParams::grammar: its place
  bool trigger_off = false;      // a lazy grammar whose trigger can no longer appear
  size_t trigger_scan = 0;       // text before this offset was searched for the trigger
  std::unordered_map<int32_t, int32_t> counts;   // generated token -> times (for penalties)
  std::vector<float> adjusted;                   // logits after bias and penalties
  engine::TokenLogprob drawn_logprob;            // of the token draw_one last drew
  bool snapshotted = false;      // its prompt's window tail was kept (see snapshot_prompt)
  size_t streamed = 0;           // bytes of the completion's text already streamed
  bool counted = false;          // prefix hit/miss counted (at the first admission only)
  bool done = false;
  // Shared store: waiting for a lookup's answer (not stepped meanwhile) until the deadline.
  bool store_wait = false;
  bool store_counts = false;     // an import counts as a prefix hit (first admission only)
  std::chrono::steady_clock::time_point store_deadline;
  int64_t store_next = -1;       // next prompt block to write to the store; -1 = none
  uint64_t store_parent = 0;     // key of block store_next - 1
  // Speculative decoding: may_draft as ExecutorOptions::make_drafter says for its request;
  // the drafter is made at the first step that drafts; `draft` holds what this step verifies
  // and draft_seconds what proposing it took (for adaptive K's measured costs).
  bool may_draft = false;
  std::unique_ptr<engine::Drafter> drafter;
  engine::AdaptiveK draft_k;
  engine::Draft draft;
  double draft_seconds = 0.0;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - fed; }
};

// Whether a request's draws see adjusted logits (logit_bias, presence or frequency penalty),
// and the adjustment: logits += bias, less the penalties for `counts` (generated token ->
// times). One home for draw_one and the verification of drafts (executor_step.cpp).
bool adjusts_logits(const GenerateParams& p);
void adjust_logits(const GenerateParams& p, const std::unordered_map<int32_t, int32_t>& counts,
                   std::span<float> logits);

struct Executor::Request {
  int64_t id = -1;
  GenerateParams params;
  std::shared_ptr<text::TokenMasker> masker;  // with params.grammar: shared by its sessions
  std::vector<int64_t> sessions;  // session ids by completion, as they are created
  RequestResult result;
};

}  // namespace kvcache::serve
