// The speculative-decoding flags of `kvcache run` (--draft, --draft-model, --draft-max) and the
// drafter they ask for, built beside the target. Layer: tools. Parsing and range checks live
// here (a bad value is a usage error naming the flag); the drafters and the acceptance rule
// live in engine/speculative.h. batch and serve do not draft yet.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

namespace kvcache::tools {

struct DraftFlags {
  std::string mode;        // --draft: "" (off) | ngram[:N] | self:q8_0 | self:q4_0
  std::string model;       // --draft-model FILE
  int32_t draft_max = 0;   // --draft-max K; 0 = engine::kDefaultDraftMax (clamped to the step)
};

void add_draft_flags(CLI::App* cmd, DraftFlags& f);

// The drafter and its model (when it has one). Move-only.
struct DraftSetup {
  std::optional<engine::LoadedModel> model;   // --draft-model's file
  std::unique_ptr<engine::Model> self_model;  // --draft self:TYPE: the target re-encoded
  std::unique_ptr<engine::Drafter> drafter;   // nullptr = drafting off
  engine::SpecOptions options;
  std::string summary;                        // what to print (the draft cache's summary)
};

// A failed setup: the message, and whether it is a usage error (exit 2) or a refusal (exit 1).
struct DraftError {
  std::string message;
  bool usage = false;
};

// Builds the drafter the flags ask for beside `target`. Usage errors: --draft-max without a
// drafter, or K + 1 above the target's step width (--max-step-tokens / max_write). Refusals:
// the draft file does not load, or its vocabulary differs (naming the first differing token).
// self:TYPE re-encodes the target's matrices in memory (engine::Model::requantized).
std::optional<DraftError> make_drafter(const DraftFlags& f, const engine::Runtime& target,
                                       const engine::CacheOptions& cache,
                                       const engine::LoadOptions& load,
                                       const engine::SamplerConfig& sampling, DraftSetup& out);

}  // namespace kvcache::tools
