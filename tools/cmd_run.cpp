// kvcache run [MODEL]: load a model (default: the embedded tiny one), build the cache the
// flags ask for, prefill the prompt in chunks and generate. --interactive reads prompts line
// by line (/undo, /undo N, /reset, /save F, /quit); --save-session / --load-session keep a
// conversation in a snapshot file (tools/session_file.h); --chat reads user messages and
// formats the conversation with the chat template kvcache serve uses; --json prints one JSON
// object (per turn) on stdout. Logs, the cache summary and timings go to stderr. See SPEC §8.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/cache.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "engine/reference.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/utf8.h"
#include "cache_flags.h"
#include "draft_flags.h"
#include "core/str_cat.h"
#include "flag_names.h"
#include "op_test/npy.h"
#include "program/cache_summary.h"
#include "program/gguf.h"
#include "program/gguf_keys.h"
#include "text/chat_template.h"
#include "text/tool_calls.h"
#include "session_file.h"

namespace kvcache::tools {
namespace {

using nlohmann::json;

struct RunFlags {
  std::string model;
  std::string prompt = "In the beginning";
  bool prompt_given = false;  // --prompt on the command line (a loaded session may go without)
  std::string prompt_ids;  // comma list of token ids; replaces --prompt
  bool prompt_ids_given = false;  // even when empty: an empty list is an error
  int32_t max_new_tokens = 64;
  double temperature = 0.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  CacheFlags cache;
  bool interactive = false;
  int32_t undo_turns = engine::kDefaultUndoTurns;
  bool chat = false;
  std::string system;
  std::string chat_template;
  bool json = false;
  std::string dump_logits;
  bool reference = false;
  bool ignore_eos = false;
  bool no_parse_special = false;
  std::string save_session;  // snapshot file written after the run (tools/session_file.h)
  std::string load_session;  // snapshot file restored before the first turn
  DraftFlags draft;          // speculative decoding (tools/draft_flags.h)
};

// Everything a run needs, built from the flags.
using Loaded = engine::Runtime;

void add_flags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("model", f.model, "GGUF model file (default: the embedded tiny model)");
  cmd->add_option("--prompt", f.prompt, "Prompt text")
      ->each([&f](const std::string&) { f.prompt_given = true; })
      ->capture_default_str();
  cmd->add_option("--prompt-ids", f.prompt_ids, "Prompt as comma-separated token ids")
      ->each([&f](const std::string&) { f.prompt_ids_given = true; });
  cmd->add_option("--max-new-tokens", f.max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_option("--temperature", f.temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = all")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "Nucleus sampling mass in (0, 1]")
      ->check(CLI::Range(1e-9, 1.0))->capture_default_str();
  cmd->add_option("--seed", f.seed, "Sampling seed")->capture_default_str();
  add_cache_flags(cmd, f.cache,
                  {CacheFlag::kLayout, CacheFlag::kCapacity, CacheFlag::kInitialCapacity,
                   CacheFlag::kKvDtype, CacheFlag::kMaxStepTokens, CacheFlag::kWindows,
                   CacheFlag::kThreads, CacheFlag::kMapWeights, CacheFlag::kKvMemory});
  refuse_beside_kv_memory(cmd);
  cmd->add_flag("--interactive", f.interactive,
                "Read prompts from stdin line by line (/undo [N], /reset, /quit)");
  cmd->add_option("--undo-turns", f.undo_turns,
                  "With --interactive/--chat: turns whose start is saved for /undo past a "
                  "sliding window (older turns' saved start is released)")
      ->check(CLI::Range(0, 1 << 16))->capture_default_str();
  cmd->add_flag("--chat", f.chat,
                "Chat: each stdin line is a user message, formatted with the chat template "
                "(as kvcache serve does)");
  cmd->add_option("--system", f.system, "With --chat: a system message");
  cmd->add_option("--chat-template", f.chat_template,
                  "With --chat: plain, chatml, llama3, gemma, mistral or phi3 (default: detected)");
  cmd->add_flag("--json", f.json, "Print one JSON object on stdout");
  cmd->add_flag("--ignore-eos", f.ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--no-parse-special", f.no_parse_special,
                "Encode control-token text in prompts as plain text");
  cmd->add_option("--save-session", f.save_session,
                  "Save the conversation (K/V and token ids) to this snapshot file at the end");
  cmd->add_option("--load-session", f.load_session,
                  "Continue the conversation saved in this snapshot file (same model, cache "
                  "geometry and --kv-dtype; without --prompt the run just continues it)");
  add_draft_flags(cmd, f.draft);
  cmd->add_option("--dump-logits", f.dump_logits,
                  "Write the prompt's logits [T, vocab] as float32 .npy and exit")
      ->group("");  // hidden: a testing aid
  cmd->add_flag("--reference", f.reference, "With --dump-logits: use the no-cache reference")
      ->group("");
}

// The model and the cache the flags ask for.
Status load(const RunFlags& f, Loaded& l) {
  KVCACHE_ASSIGN_OR_RETURN(
      l, engine::open_runtime(engine::ModelSource::file(f.model), cache_options(f.cache),
                              load_options(f.cache)));
  return ok_status();
}

// BOS/EOS as the file says only at the start of a conversation.
Result<std::vector<int32_t>> encode(const RunFlags& f, const Loaded& l, const std::string& text,
                                    bool conversation_start) {
  text::EncodeOptions o;
  o.add_special = conversation_start;
  o.parse_special = !f.no_parse_special;
  return l.tokenizer->encode(text, o);
}

Result<std::vector<int32_t>> prompt_tokens(const RunFlags& f, const Loaded& l,
                                           const std::string& text, bool conversation_start) {
  if (!f.prompt_ids_given) return encode(f, l, text, conversation_start);
  KVCACHE_ASSIGN_OR_RETURN(std::vector<int64_t> ids, parse_int_list(f.prompt_ids, "--prompt-ids"));
  std::vector<int32_t> out;
  for (int64_t v : ids) {
    if (v < 0 || v >= l.model->hparams().vocab)
      return invalid_argument(str_cat("--prompt-ids: ", v, " is out of range, expected [0, ",
                                      l.model->hparams().vocab, ")"));
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// The model's geometry with the planned cache's policies, and the summary options of the plan.
ModelGeometry planned_geometry(const Loaded& l) {
  ModelGeometry g = l.model->geometry();
  g.cache = l.setup.geometry;
  return g;
}
SummaryOptions summary_options(const Loaded& l) {
  SummaryOptions o;
  o.config = l.setup.config;
  o.kind = l.setup.kind;
  o.kv_memory = l.setup.kv_memory;
  return o;
}

json summary_json(const Loaded& l) {
  return cache_summary_json(planned_geometry(l), summary_options(l));
}

std::string summary_text(const Loaded& l) {
  return cache_summary_text(planned_geometry(l), summary_options(l));
}

// The prompt's logits for every token, through the cache in chunks (or the reference).
Status dump_logits(const RunFlags& f, Loaded& l, const std::vector<int32_t>& tokens) {
  const int32_t vocab = l.model->hparams().vocab;
  std::vector<float> all;
  if (f.reference) {
    std::vector<double> ref = engine::reference_logits(*l.model, tokens, &l.setup.geometry);
    all.assign(ref.begin(), ref.end());
  } else {
    engine::Logits out;
    KVCACHE_RETURN_IF_ERROR(engine::prefill_chunks(
        *l.engine, l.seq, tokens, l.setup.step_tokens, engine::LogitsMode::kAll, out,
        [&all](const engine::Logits& o) { all.insert(all.end(), o.data.begin(), o.data.end()); }));
  }
  const int64_t shape[] = {static_cast<int64_t>(tokens.size()), vocab};
  KVCACHE_RETURN_IF_ERROR_CTX(write_npy(f.dump_logits, shape, all), "--dump-logits");
  std::fprintf(stderr, "kvcache run: wrote logits [%zu, %d] to %s\n", tokens.size(), vocab,
               f.dump_logits.c_str());
  return ok_status();
}

// Tokens the cache kept per decode forward while drafting (1 = plain decoding).
double per_step(const engine::TurnStats& st) {
  return st.spec.steps > 0 ? static_cast<double>(st.decode_tokens) / static_cast<double>(st.spec.steps) : 0.0;
}

// alpha, k, c, v and the ideal speed-up (docs/speculative.md); null without a plain step.
json figures_json(const engine::SpecStats& spec) {
  const std::optional<engine::SpecFigures> f = engine::spec_figures(spec);
  if (!f) return nullptr;
  return {{"alpha", f->alpha}, {"k", f->k}, {"c", f->c}, {"v", f->v},
          {"ideal_speedup", f->ideal_speedup}};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// What --undo-turns costs at most: one saved turn start is W - 1 positions of every sliding
// layer (the summary's checkpoint_bytes) — copied in the sequence layout, pinned by a fork in
// the cell layout.
std::string undo_summary(const Loaded& l, int32_t turns) {
  const int64_t per_turn = summary_json(l).value("checkpoint_bytes", int64_t{0});
  const std::string n = str_cat(turns);
  if (per_turn <= 0)
    return "undo: no sliding window looks back; every turn is undone by a rewind (nothing saved)\n";
  const std::string most = human_bytes(per_turn * turns);
  if (l.setup.kind == kCellKind)
    return "undo history: the last " + n + " turn(s) keep their start (--undo-turns): a fork " +
           "each, pinning up to " + human_bytes(per_turn) + " of sliding-pool cells and a " +
           "sequence id (at most " + most + "); older turns undo only while the pools hold them\n";
  return "undo history: the last " + n + " turn(s) keep their start (--undo-turns): a copy of " +
         human_bytes(per_turn) + " each (at most " + most + "); older turns undo only while " +
         "the rings hold them\n";
}

// Refuses, before any work, a prompt the cache cannot hold after the `pos` positions the
// conversation already has; names the lengths and the flag that raises the budget.
Status check_fits(const Loaded& l, int64_t pos, size_t prompt) {
  const int64_t capacity = l.setup.config.capacity;
  const auto n = static_cast<int64_t>(prompt);
  if (pos + n <= capacity) return ok_status();
  std::string m = str_cat("the prompt is ", n, " tokens");
  if (pos > 0) m += str_cat(" after the conversation's ", pos);
  m += str_cat(", but the cache holds ", capacity, " positions; raise --capacity");
  if (l.model->hparams().context_length > 0)
    m += str_cat(" (the model's context is ", l.model->hparams().context_length, ")");
  return out_of_range(m);
}

// Runs one turn and reports it (streamed text or a JSON object).
Status run_turn(const RunFlags& f, Loaded& l, engine::Session& session, engine::Sampler& sampler,
                const std::vector<int32_t>& prompt, std::vector<int32_t>* generated_out = nullptr) {
  KVCACHE_RETURN_IF_ERROR(check_fits(l, session.pos(), prompt.size()));
  text::Utf8Stream stream;  // a token may end inside a character: hold it for the next
  auto show = [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  auto on_token = [&](int32_t tok) {
    if (!f.json) show(stream.push(l.tokenizer->decode_one(tok)));
  };
  std::function<bool(int32_t)> is_eog;
  if (!f.ignore_eos) is_eog = [&](int32_t tok) { return l.tokenizer->is_eog(tok); };
  Result<engine::TurnStats> st = session.turn(prompt, f.max_new_tokens, sampler, on_token, is_eog);
  if (!f.json) show(stream.finish());
  if (!st.ok()) return st.status();
  if (generated_out != nullptr) *generated_out = st->generated;
  const double pre = per_s(st->prefill_tokens, st->prefill_seconds);
  const double dec = per_s(st->decode_tokens, st->decode_seconds);
  if (f.json) {
    json j;
    // Generated bytes need not be UTF-8: invalid ones become U+FFFD; "tokens" has the ids.
    j["text"] = text::utf8_sanitize(l.tokenizer->decode(st->generated));
    j["tokens"] = st->generated;
    j["prompt_tokens"] = prompt.size();
    j["prompt_ids"] = prompt;
    j["prefill_tokens_per_s"] = pre;
    j["decode_tokens_per_s"] = dec;
    j["prefill_seconds"] = st->prefill_seconds;
    j["decode_seconds"] = st->decode_seconds;
    j["position"] = session.pos();
    j["stopped_full"] = st->stopped_full;
    j["eog_token"] = st->eog_token;  // -1 when the turn did not end at one
    j["step_tokens"] = l.setup.step_tokens;
    j["cache_kind"] = l.setup.kind;
    j["threads"] = cpu::global_pool().size();
    j["cache"] = summary_json(l);
    const engine::UndoCost undo = session.undo_cost();
    j["undo"] = {{"turns", session.turns()}, {"turns_kept", undo.turns_kept},
                 {"checkpoint_bytes", undo.checkpoint_bytes}, {"forks", undo.forks}};
    if (session.drafter() != nullptr)
      j["draft"] = {{"mode", session.drafter()->name()},
                    {"draft_max", session.spec_options().draft_max},
                    {"steps", st->spec.steps},
                    {"drafted", st->spec.drafted},
                    {"accepted", st->spec.accepted},
                    {"acceptance", st->spec.acceptance()},
                    {"tokens_per_step", per_step(*st)},
                    {"verify_steps", st->spec.verify_steps},
                    {"draft_seconds", st->spec.draft_seconds},
                    {"verify_seconds", st->spec.verify_seconds},
                    {"plain_seconds", st->spec.plain_seconds},
                    {"figures", figures_json(st->spec)}};
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the text line ends before the timing line on stderr
    if (st->stopped_full) std::fprintf(stderr, "kvcache run: the cache is full; stopped\n");
  }
  std::string drafting;
  if (session.drafter() != nullptr)
    drafting = str_cat("; draft ", session.drafter()->name(), ": acceptance ",
                       fixed(100.0 * st->spec.acceptance(), 1), "% (", st->spec.accepted, "/",
                       st->spec.drafted, "), ", fixed(per_step(*st), 2),
                       " tokens/step over ", st->spec.steps, " steps");
  std::fprintf(stderr,
               "prefill: %lld tokens, %.1f tok/s; decode: %lld tokens, %.1f tok/s; "
               "position %lld%s\n",
               static_cast<long long>(st->prefill_tokens), pre,
               static_cast<long long>(st->decode_tokens), dec,
               static_cast<long long>(session.pos()), drafting.c_str());
  std::fflush(stdout);
  return ok_status();
}

// Handles "/undo [N]", "/reset"; false when `line` is not a command.
bool command(const std::string& line, engine::Session& session) {
  if (line == "/reset") {
    Status s = session.reset();
    std::fprintf(stderr, "%s\n", s.ok() ? "reset: the conversation is empty"
                                        : ("reset refused: " + s.message()).c_str());
    return true;
  }
  if (line.rfind("/undo", 0) != 0) return false;
  std::string arg = line.substr(5);
  int32_t n = 1;
  if (!arg.empty()) {
    const size_t first = arg.find_first_not_of(' ');
    const char* begin = arg.data() + (first == std::string::npos ? arg.size() : first);
    const char* end = arg.data() + arg.size();
    const auto [ptr, ec] = std::from_chars(begin, end, n);  // whole, base 10
    if (begin == end || ec != std::errc() || ptr != end || n < 1 || n > (1 << 30)) {
      std::fprintf(stderr, "undo: expected /undo or /undo N with N >= 1\n");
      return true;
    }
  }
  Status s = session.undo(n);
  if (s.ok())
    std::fprintf(stderr, "undo: back to position %lld (%zu turn(s) left)\n",
                 static_cast<long long>(session.pos()), session.turns());
  else
    std::fprintf(stderr, "undo refused: %s%s\n", s.message().c_str(),
                 s.code() == StatusCode::kOutOfRange ? " -- raise --undo-turns to keep more" : "");
  return true;
}

int interactive(const RunFlags& f, Loaded& l, engine::Session& session,
                engine::Sampler& sampler) {
  std::string line;
  std::fprintf(stderr, "> ");
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/quit") break;
    if (line == "/save" || line.rfind("/save ", 0) == 0) {
      const size_t at = line.find_first_not_of(' ', 5);
      Status s = at == std::string::npos
                     ? invalid_argument("expected /save FILE")
                     : save_session_file(line.substr(at), *l.model, *l.cache, session);
      if (!s.ok()) std::fprintf(stderr, "save refused: %s\n", s.message().c_str());
    } else if (!command(line, session) && !line.empty()) {
      Result<std::vector<int32_t>> ids = encode(f, l, line, session.pos() == 0);
      Status s = ids.ok() ? run_turn(f, l, session, sampler, *ids) : ids.status();
      if (!s.ok()) std::fprintf(stderr, "kvcache run: %s\n", s.message().c_str());
    }
    std::fprintf(stderr, "> ");
  }
  std::fprintf(stderr, "\n");
  return 0;
}

// --chat: the conversation is rendered with the chat template each turn; when what the session
// already holds is a prefix of the new rendering only the rest is fed, else it starts over.
int chat(const RunFlags& f, Loaded& l, engine::Session& session, engine::Sampler& sampler) {
  Result<std::string> model_template = l.file->get_string(gguf::key_pattern(gguf::Key::kTokenizerChatTemplate));
  const text::TemplateChoice choice = text::choose_chat_template(
      f.chat_template, model_template.ok() ? std::optional<std::string>(*model_template) : std::nullopt);
  if (!choice.tmpl) return fail("run", flag_message(invalid_argument(choice.problem), {kChatFieldFlags}));
  std::vector<text::ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  std::vector<int32_t> held;  // every token the session holds, in order
  std::string line;
  std::fprintf(stderr, "chat template %s\n> ", std::string(text::to_string(*choice.tmpl)).c_str());
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/quit") break;
    if (!line.empty()) {
      messages.push_back({"user", line});
      Result<text::RenderedChat> rendered = text::render_chat_spans(
          *choice.tmpl, messages, true, text::default_chat_tokens(*choice.tmpl));
      Result<std::vector<int32_t>> ids =
          rendered.ok() ? l.tokenizer->encode(rendered->text, text::chat_prompt_options(rendered->content))
                        : Result<std::vector<int32_t>>(rendered.status());
      Status s = ids.ok() ? ok_status() : ids.status();
      if (s.ok() && !(held.size() < ids->size() && std::equal(held.begin(), held.end(), ids->begin()))) {
        s = session.reset();
        held.clear();
      }
      std::vector<int32_t> generated;
      if (s.ok()) {
        const std::vector<int32_t> rest(ids->begin() + static_cast<std::ptrdiff_t>(held.size()), ids->end());
        s = run_turn(f, l, session, sampler, rest, &generated);
        held.insert(held.end(), rest.begin(), rest.end());
        held.insert(held.end(), generated.begin(), generated.end());
      }
      if (s.ok()) {
        text::ChatMessage reply("assistant", l.tokenizer->decode(generated));
        if (*choice.tmpl == text::ChatTemplate::kHarmony) {  // its channels, not its framing
          text::ParsedAnswer a = text::parse_harmony(reply.content, false, false);
          reply.content = std::move(a.content);
          reply.reasoning = std::move(a.reasoning);
        }
        messages.push_back(std::move(reply));
      } else {
        messages.pop_back();
        std::fprintf(stderr, "kvcache run: %s\n", s.message().c_str());
      }
    }
    std::fprintf(stderr, "> ");
  }
  std::fprintf(stderr, "\n");
  return 0;
}

int run(const RunFlags& f) {
  apply_threads(f.cache);
  engine::SamplerConfig sc;
  sc.temperature = static_cast<float>(f.temperature);
  sc.top_k = f.top_k;
  sc.top_p = static_cast<float>(f.top_p);
  sc.seed = f.seed;
  if (Status bad = engine::check_sampler_config(sc); !bad.ok())
    return fail("run", flag_message(bad, {kSamplerFieldFlags}));
  Loaded l;
  Status s = load(f, l);
  if (!s.ok()) {
    fail("run", flag_message(s, {kCacheFieldFlags}));
    return plan_exit_code(s);
  }
  std::fprintf(stderr, "%s", summary_text(l).c_str());
  std::fprintf(stderr, "model: %s, %d layers, d=%d, vocab %d, %.2fM params; prefill chunk %lld\n",
               l.model->hparams().arch.c_str(), l.model->hparams().n_layers,
               l.model->hparams().d_model, l.model->hparams().vocab,
               static_cast<double>(l.model->n_params()) / 1e6,
               static_cast<long long>(l.setup.step_tokens));
  DraftSetup draft;
  if (std::optional<DraftError> e = make_drafter(f.draft, l, cache_options(f.cache),
                                                 load_options(f.cache), sc, draft)) {
    std::fprintf(stderr, "kvcache run: %s\n", e->message.c_str());
    return e->usage ? 2 : 1;
  }
  std::fprintf(stderr, "%s", draft.summary.c_str());
  engine::Sampler sampler(sc);
  engine::Session session(*l.engine, l.setup.step_tokens, l.seq);
  if (s = session.set_undo_turns(f.undo_turns); !s.ok()) return fail("run", s.message());
  if (s = session.set_drafter(draft.drafter.get(), draft.options); !s.ok())
    return fail("run", s.message());
  if (draft.drafter)
    std::fprintf(stderr, "speculative decoding: %s, up to %d drafts per step (adaptive)\n",
                 draft.drafter->name().c_str(), draft.options.draft_max);
  if (f.interactive || f.chat) std::fprintf(stderr, "%s", undo_summary(l, f.undo_turns).c_str());
  const bool sessions = !f.save_session.empty() || !f.load_session.empty();
  if (f.chat && sessions)
    return fail("run", "--save-session/--load-session: not with --chat (its messages are not saved)");
  if (f.chat) return chat(f, l, session, sampler);
  if (!f.load_session.empty()) {
    if (s = load_session_file(f.load_session, *l.model, *l.cache, session); !s.ok())
      return fail("run", "--load-session: " + s.message());
  }
  auto save = [&]() {
    if (f.save_session.empty()) return 0;
    Status saved = save_session_file(f.save_session, *l.model, *l.cache, session);
    return saved.ok() ? 0 : fail("run", "--save-session: " + saved.message());
  };
  if (f.interactive) return interactive(f, l, session, sampler) == 0 ? save() : 1;
  // A loaded session without --prompt/--prompt-ids continues from its held-back token.
  const bool resumed = !session.conversation().empty();
  Result<std::vector<int32_t>> prompt =
      resumed && !f.prompt_given && !f.prompt_ids_given
          ? Result<std::vector<int32_t>>(std::vector<int32_t>{})
          : prompt_tokens(f, l, f.prompt, !resumed);
  if (!prompt.ok()) return fail("run", prompt.status().message());
  if (prompt->empty() && !resumed)
    return fail("run", "--prompt: the prompt is empty, expected at least one token");
  if (s = check_fits(l, session.pos(), prompt->size()); !s.ok()) return fail("run", s.message());
  if (!f.dump_logits.empty()) {
    s = dump_logits(f, l, *prompt);
    return s.ok() ? 0 : fail("run", s.message());
  }
  s = run_turn(f, l, session, sampler, *prompt);
  return s.ok() ? save() : fail("run", s.message());
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text with a model through the cache");
  add_flags(cmd, *flags);
  return [flags] { return run(*flags); };
}

}  // namespace kvcache::tools
