// The speculative-decoding flags. See draft_flags.h.
#include "draft_flags.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <string_view>
#include <utility>

#include "core/str_cat.h"
#include "program/cache_summary.h"

namespace kvcache::tools {
namespace {

// "ngram" or "ngram:N" (N in 1..kMaxNgram) -> N; nullopt otherwise.
std::optional<int32_t> ngram_width(std::string_view mode) {
  if (mode == "ngram") return engine::kDefaultNgram;
  if (mode.substr(0, 6) != "ngram:") return std::nullopt;
  const std::string_view n = mode.substr(6);
  int32_t v = 0;
  const auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
  if (n.empty() || ec != std::errc() || ptr != n.data() + n.size() || v < 1 ||
      v > engine::kMaxNgram)
    return std::nullopt;
  return v;
}

// "self:q8_0", "self:q4_0", "self:q4_k", "self:q5_k", "self:q6_k" -> the type; nullopt
// otherwise.
std::optional<gguf::TensorType> self_type(std::string_view mode) {
  using gguf::TensorType;
  static constexpr std::pair<std::string_view, TensorType> kTypes[] = {
      {"self:q8_0", TensorType::kQ8_0}, {"self:q4_0", TensorType::kQ4_0},
      {"self:q4_k", TensorType::kQ4_K}, {"self:q5_k", TensorType::kQ5_K},
      {"self:q6_k", TensorType::kQ6_K}};
  for (const auto& [name, type] : kTypes)
    if (mode == name) return type;
  return std::nullopt;
}

std::string draft_summary(const engine::Model& model, const std::string& name,
                          const engine::ModelDrafter& d) {
  ModelGeometry g = model.geometry();
  g.cache = d.setup().geometry;
  SummaryOptions o;
  o.config = d.setup().config;
  o.kind = d.setup().kind;
  return str_cat("draft model ", name, ": ", model.hparams().n_layers, " layers, d=",
                 model.hparams().d_model, ", ", model.n_params() / 1000, "K params; its cache:\n",
                 cache_summary_text(g, o));
}

// A ModelDrafter over `model` with the target's cache choices, sized for K more positions.
std::optional<DraftError> model_drafter(const engine::Model& model, const std::string& label,
                                        const engine::Runtime& target,
                                        const engine::CacheOptions& cache,
                                        const engine::SamplerConfig& sampling, DraftSetup& out) {
  engine::CacheOptions o = cache;
  o.windows.clear();  // --windows is the target's
  o.capacity = target.setup.config.capacity + out.options.draft_max;
  o.max_step_tokens = target.setup.step_tokens;
  Result<std::unique_ptr<engine::ModelDrafter>> d =
      engine::ModelDrafter::create(model, o, sampling, label);
  if (!d.ok()) return DraftError{"draft " + label + ": " + d.status().message()};
  out.summary = draft_summary(model, label, **d);
  out.drafter = std::move(*d);
  return std::nullopt;
}

}  // namespace

void add_draft_flags(CLI::App* cmd, DraftFlags& f) {
  CLI::Option* mode =
      cmd->add_option("--draft", f.mode,
                      "Speculative decoding: ngram[:N] drafts from the longest recent match of "
                      "the last N (default 3) tokens in the conversation; self:q8_0 or "
                      "self:q4_0 drafts with the model's own weights re-encoded in memory")
          ->check(CLI::Validator(
              [](std::string& v) -> std::string {
                return ngram_width(v) || self_type(v)
                           ? std::string()
                           : str_cat("'", v, "' is not a drafter, expected ngram, ngram:N with N "
                                     "in 1..", engine::kMaxNgram,
                                     ", self:q8_0, self:q4_0, self:q4_k, self:q5_k or self:q6_k");
              },
              "ngram[:N]|self:TYPE", "draft mode"));
  CLI::Option* model = cmd->add_option(
      "--draft-model", f.model,
      "Speculative decoding with a draft model: a smaller GGUF with the same vocabulary");
  mode->excludes(model);
  cmd->add_option("--draft-max", f.draft_max,
                  str_cat("Most drafted tokens per verification step, K (default ",
                          engine::kDefaultDraftMax,
                          "); adaptive within [0, K] (docs/speculative.md); K + 1 <= the "
                          "step width"))
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--draft-k", f.draft_k,
                  "How adaptive K is chosen: cost (default; from the measured step and draft "
                  "times) or acceptance (from the acceptance rate only; widths that do not "
                  "depend on timing). docs/speculative.md, \"Adaptive K\"")
      ->check(CLI::IsMember({"cost", "acceptance"}));
}

std::optional<DraftError> make_drafter(const DraftFlags& f, const engine::Runtime& target,
                                       const engine::CacheOptions& cache,
                                       const engine::LoadOptions& load,
                                       const engine::SamplerConfig& sampling, DraftSetup& out) {
  const int64_t step = target.setup.step_tokens;
  if (f.mode.empty() && f.model.empty()) {
    if (f.draft_max > 0)
      return DraftError{"--draft-max: needs --draft or --draft-model", true};
    return std::nullopt;
  }
  out.options.measured_cost = f.draft_k == "cost";
  out.options.draft_max = f.draft_max > 0
                              ? f.draft_max
                              : static_cast<int32_t>(std::min<int64_t>(engine::kDefaultDraftMax,
                                                                       step - 1));
  if (step < 2)
    return DraftError{str_cat("--draft: the step width is ", step,
                              " token (--max-step-tokens); speculative decoding needs >= 2"),
                      true};
  if (Status s = engine::check_spec_options(out.options, step); !s.ok())
    return DraftError{str_cat("--draft-max ", out.options.draft_max, ": a verification step is ",
                              out.options.draft_max + 1,
                              " tokens but the cache's step width (--max-step-tokens, max_write) "
                              "is ",
                              step, "; expected --draft-max <= ", step - 1),
                      true};
  if (const std::optional<gguf::TensorType> type = self_type(f.mode)) {
    Result<engine::Model> m = target.model->requantized(*type);
    if (!m.ok()) return DraftError{"--draft " + f.mode + ": " + m.status().message()};
    out.self_model = std::make_unique<engine::Model>(std::move(*m));
    return model_drafter(*out.self_model, f.mode, target, cache, sampling, out);
  }
  if (!f.mode.empty()) {
    out.drafter = std::make_unique<engine::NgramDrafter>(*ngram_width(f.mode));
    return std::nullopt;
  }
  Result<engine::LoadedModel> m = engine::load_model(engine::ModelSource::file(f.model), load);
  if (!m.ok()) return DraftError{"--draft-model: " + m.status().message()};
  if (Status s = engine::check_same_vocabulary(*target.tokenizer, *m->tokenizer); !s.ok())
    return DraftError{"--draft-model: " + s.message()};
  out.model = std::move(*m);
  return model_drafter(*out.model->model, "model:" + out.model->name, target, cache, sampling,
                       out);
}

namespace {

// One session's ModelDrafter over `model`: the target's K/V choices, sized by `room`.
Result<std::unique_ptr<engine::Drafter>> session_drafter(const engine::Model& model,
                                                         engine::CacheOptions o,
                                                         const std::string& label,
                                                         const serve::DraftRoom& room) {
  o.windows.clear();  // --windows is the target's
  o.kv_memory.reset();
  o.capacity = room.positions;
  o.max_step_tokens = room.step_tokens;
  KVCACHE_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelDrafter> d,
                           engine::ModelDrafter::create(model, o, engine::SamplerConfig{}, label));
  return std::unique_ptr<engine::Drafter>(std::move(d));
}

}  // namespace

std::optional<DraftError> make_executor_drafter(const DraftFlags& f,
                                                const engine::LoadedModel& target,
                                                const engine::CacheOptions& cache,
                                                const engine::LoadOptions& load,
                                                serve::ExecutorOptions& eo, ExecutorDraft& out) {
  if (f.mode.empty() && f.model.empty()) {
    if (f.draft_max > 0) return DraftError{"--draft-max: needs --draft or --draft-model", true};
    return std::nullopt;
  }
  eo.spec.draft_max = f.draft_max;
  eo.spec.measured_cost = f.draft_k == "cost";
  if (const std::optional<int32_t> n = ngram_width(f.mode)) {
    out.name = str_cat("ngram:", *n);
    eo.make_drafter = [n = *n](const serve::DraftRoom&) -> Result<std::unique_ptr<engine::Drafter>> {
      return std::unique_ptr<engine::Drafter>(std::make_unique<engine::NgramDrafter>(n));
    };
    return std::nullopt;
  }
  const engine::Model* model = nullptr;
  if (const std::optional<gguf::TensorType> type = self_type(f.mode)) {
    Result<engine::Model> m = target.model->requantized(*type);
    if (!m.ok()) return DraftError{"--draft " + f.mode + ": " + m.status().message()};
    out.self_model = std::make_shared<engine::Model>(std::move(*m));
    out.name = f.mode;
    model = out.self_model.get();
  } else {
    Result<engine::LoadedModel> m = engine::load_model(engine::ModelSource::file(f.model), load);
    if (!m.ok()) return DraftError{"--draft-model: " + m.status().message()};
    if (Status s = engine::check_same_vocabulary(*target.tokenizer, *m->tokenizer); !s.ok())
      return DraftError{"--draft-model: " + s.message()};
    out.model = std::move(*m);
    out.name = "model:" + out.model->name;
    model = out.model->model.get();
  }
  eo.make_drafter = [model, cache, label = out.name](const serve::DraftRoom& room) {
    return session_drafter(*model, cache, label, room);
  };
  return std::nullopt;
}

Result<std::string> executor_draft_summary(const ExecutorDraft& d,
                                           const serve::ExecutorOptions& eo,
                                           const serve::Executor& e) {
  if (d.name.empty()) return std::string();
  std::string head = str_cat("speculative decoding: ", d.name, ", up to ", e.spec().draft_max,
                             " drafts per session and step (adaptive)\n");
  const engine::Model* model =
      d.self_model ? d.self_model.get() : d.model ? d.model->model.get() : nullptr;
  if (model == nullptr) return head;
  const serve::DraftRoom room{e.max_session_tokens() + e.spec().draft_max, e.setup().step_tokens};
  KVCACHE_ASSIGN_OR_RETURN(std::unique_ptr<engine::Drafter> one, eo.make_drafter(room));
  const auto& md = static_cast<const engine::ModelDrafter&>(*one);
  return head + str_cat("each of up to ", e.max_sessions(), " sessions has a ") +
         draft_summary(*model, d.name, md);
}

}  // namespace kvcache::tools
