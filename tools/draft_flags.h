// The speculative-decoding flags of `kvcache run`, `batch` and `serve` (--draft, --draft-model,
// --draft-max) and the drafter they ask for, built beside the target (run: one drafter; batch
// and serve: a factory making one per session). Layer: tools. Parsing and range checks live
// here (a bad value is a usage error naming the flag); the drafters and the acceptance rule
// live in engine/speculative.h.
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
#include "serve/executor.h"

namespace kvcache::tools {

struct DraftFlags {
  std::string mode;        // --draft: "" (off) | ngram[:N] | self:q8_0 | self:q4_0
  std::string model;       // --draft-model FILE
  int32_t draft_max = 0;   // --draft-max K; 0 = engine::kDefaultDraftMax (clamped to the step)
  std::string draft_k = "cost";  // --draft-k: adaptive K's rule, cost | acceptance
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

// The batching executor's drafting: the model it drafts with (loaded or re-encoded once,
// shared by every session's drafter). Must outlive the executor.
struct ExecutorDraft {
  std::optional<engine::LoadedModel> model;   // --draft-model's file
  std::shared_ptr<engine::Model> self_model;  // --draft self:TYPE
  std::string name;                           // "ngram:3", "self:q4_0", "model:NAME"; "" = off
};

// As make_drafter for batch and serve, filling eo.make_drafter and eo.spec.draft_max (0 = the
// executor's default): ngram makes an NgramDrafter per session; self:TYPE and --draft-model a
// ModelDrafter per session over the shared draft model with its own sequence cache (the
// target's K/V types, DraftRoom's positions and step; greedy drafts, so q is one-hot and the
// acceptance rule holds for any request's sampling). K against the step width is checked by
// the executor.
std::optional<DraftError> make_executor_drafter(const DraftFlags& f,
                                                const engine::LoadedModel& target,
                                                const engine::CacheOptions& cache,
                                                const engine::LoadOptions& load,
                                                serve::ExecutorOptions& eo, ExecutorDraft& out);

// The summary to print for an executor's drafting: the mode and K, and for a draft model one
// session's draft cache (built once to report it; every session has one like it).
// "" when drafting is off.
Result<std::string> executor_draft_summary(const ExecutorDraft& d,
                                           const serve::ExecutorOptions& eo,
                                           const serve::Executor& e);

}  // namespace kvcache::tools
