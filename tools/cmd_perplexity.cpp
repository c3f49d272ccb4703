// kvcache perplexity [MODEL] --text-file F [--ctx N] [--kv-dtype/--k-dtype/--v-dtype/--kv-rotate]
// [--kl-base FILE] [--json]: the text's tokens in consecutive windows of N, each run from an
// empty cache through the normal forward (so the K/V storage type is what is measured); the
// second half of each window is scored. --kl-base saves (first run) or compares against (later
// runs) every scored position's full next-token distribution. Exit 2 for bad input (naming
// the flag), 1 for a failure after that. docs/perplexity.md. Thin over engine/perplexity.h.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache_flags.h"
#include "commands.h"
#include "core/str_cat.h"
#include "engine/perplexity.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "flag_names.h"
#include "kl_base_file.h"
#include "program/file_bytes.h"

namespace kvcache::tools {
namespace {

constexpr uint64_t kMaxPerplexityTextBytes = uint64_t{16} << 20;  // hours of CPU time for any model
constexpr int64_t kMaxCtx = int64_t{1} << 30;

struct PplFlags {
  std::string model;
  std::string text_file;
  int64_t ctx = 0;  // 0 = min(the model's context, 4096)
  CacheFlags cache;
  std::string kl_base;
  bool json = false;
};

int usage(const std::string& msg) {
  std::fprintf(stderr, "kvcache perplexity: %s\n", msg.c_str());
  return 2;
}
// The text's windows: ctx tokens each, the rest of the text dropped; the first token of each
// window is BOS when the tokenizer adds one (every window starts as a document would).
struct Windows {
  int64_t ctx = 0;
  std::vector<int32_t> tokens;  // windows x ctx
  int64_t count() const { return static_cast<int64_t>(tokens.size()) / ctx; }
  std::span<const int32_t> window(int64_t w) const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(w * ctx), ctx);
  }
  int64_t first() const { return ctx / 2; }  // the first scored index of a window
  int64_t scored() const { return count() * (ctx - first()); }
};

// The context the flags ask for; InvalidArgument naming --ctx.
Result<int64_t> choose_ctx(const PplFlags& f, const engine::Model& model) {
  const int64_t context = engine::model_context(model);
  const int64_t ctx = f.ctx > 0 ? f.ctx : engine::default_capacity(model);
  if (f.ctx == 1)
    return invalid_argument("--ctx: 1 is too small, expected at least 2 (a window needs a "
                            "context token and a scored one), or 0 for the model's context");
  if (context > 0 && ctx > context)
    return invalid_argument(str_cat("--ctx: ", ctx, " is larger than the model's context of ",
                                    context));
  return ctx;
}

Result<Windows> split(const std::string& text, const text::Tokenizer& tok, int64_t ctx,
                      const std::string& path) {
  text::EncodeOptions plain;
  plain.add_special = false;
  plain.parse_special = false;
  Result<std::vector<int32_t>> encoded = tok.encode(text, plain);
  if (!encoded.ok())
    return invalid_argument(str_cat("--text-file: '", path, "': ", encoded.status().message()));
  std::vector<int32_t>& ids = *encoded;
  if (ids.empty()) return invalid_argument(str_cat("--text-file: '", path, "' holds no tokens"));
  if (static_cast<int64_t>(ids.size()) < ctx)
    return invalid_argument(str_cat("--text-file: '", path, "' is ", ids.size(),
                                    " tokens, fewer than one window of --ctx ", ctx,
                                    "; lower --ctx or give a longer text"));
  Windows w;
  w.ctx = ctx;
  w.tokens.assign(ids.begin(), ids.begin() + (static_cast<int64_t>(ids.size()) / ctx) * ctx);
  Result<std::vector<int32_t>> start = tok.encode("", text::EncodeOptions{});
  if (start.ok() && !start->empty() && start->front() == tok.bos() && tok.bos() >= 0)
    for (int64_t i = 0; i < w.count(); ++i) w.tokens[static_cast<size_t>(i * ctx)] = tok.bos();
  return w;
}

// What a run adds up, per scored token.
struct Totals {
  double nll = 0.0, base_nll = 0.0;
  int64_t scored = 0, agree = 0;
  std::vector<float> kld;  // per scored token, with a base
};

double quantile(std::vector<float> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];  // nearest rank
}

double mean(double sum, int64_t n) { return n > 0 ? sum / static_cast<double>(n) : 0.0; }

// The base against this run: reads the base, or writes this run's rows, or neither.
struct BaseFile {
  std::optional<KlBaseReader> reader;
  std::optional<KlBaseWriter> writer;
  std::vector<float> row;
};

Status open_base(const PplFlags& f, const Windows& w, int32_t vocab, BaseFile& b) {
  if (f.kl_base.empty()) return ok_status();
  KlBaseHeader h;
  h.vocab = static_cast<uint32_t>(vocab);
  h.ctx = static_cast<uint32_t>(w.ctx);
  h.windows = static_cast<uint32_t>(w.count());
  h.tokens = w.tokens.size();
  h.fingerprint = token_fingerprint(w.tokens);
  h.rows = static_cast<uint64_t>(w.scored());
  b.row.resize(static_cast<size_t>(vocab));
  if (kl_base_exists(f.kl_base)) {
    KVCACHE_ASSIGN_OR_RETURN(b.reader, KlBaseReader::open(f.kl_base, h));
  } else {
    KVCACHE_ASSIGN_OR_RETURN(b.writer, KlBaseWriter::create(f.kl_base, h));
  }
  return ok_status();
}

Status score_all(engine::CachedEngine& e, const Windows& w, BaseFile& b, Totals& t) {
  const bool progress = isatty(fileno(stderr)) != 0;
  Status bad = ok_status();
  auto on_token = [&](int32_t next, std::span<const float> logp) {
    if (!bad.ok()) return;
    t.nll -= logp[static_cast<size_t>(next)];
    ++t.scored;
    if (b.writer) bad = b.writer->append(logp);
    if (!b.reader || !(bad = b.reader->next(b.row)).ok()) return;
    t.base_nll -= b.row[static_cast<size_t>(next)];
    t.kld.push_back(static_cast<float>(engine::kl_divergence(b.row, logp)));
    t.agree += engine::argmax(b.row) == engine::argmax(logp) ? 1 : 0;
  };
  for (int64_t i = 0; i < w.count(); ++i) {
    const std::span<const int32_t> win = w.window(i);
    auto scored = [&](int64_t pos, std::span<const float> logp) {
      on_token(win[static_cast<size_t>(pos)], logp);
    };
    KVCACHE_RETURN_IF_ERROR(
        engine::score_window(*e.engine, e.seq, win, e.setup.step_tokens, w.first(), scored));
    KVCACHE_RETURN_IF_ERROR(bad);
    if (progress)
      std::fprintf(stderr, "window %lld/%lld: perplexity %.4f over %lld tokens\n",
                   static_cast<long long>(i + 1), static_cast<long long>(w.count()),
                   std::exp(mean(t.nll, t.scored)), static_cast<long long>(t.scored));
  }
  return b.writer ? b.writer->finish() : ok_status();
}

nlohmann::json report_json(const PplFlags& f, const engine::CachedEngine& e, const Windows& w,
                           const Totals& t, const BaseFile& b) {
  nlohmann::json j;
  j["ppl"] = std::exp(mean(t.nll, t.scored));
  j["nll_mean"] = mean(t.nll, t.scored);
  j["tokens"] = t.scored;
  j["windows"] = w.count();
  j["ctx"] = w.ctx;
  j["k_dtype"] = to_string(e.setup.config.key_type());
  j["v_dtype"] = to_string(e.setup.config.value_type());
  j["rotate"] = e.setup.config.rotated();
  if (b.reader) {
    double sum = 0.0;
    for (float k : t.kld) sum += k;
    j["ppl_base"] = std::exp(mean(t.base_nll, t.scored));
    j["kld_mean"] = mean(sum, t.scored);
    j["kld_p99"] = quantile(t.kld, 0.99);
    j["kld_max"] = t.kld.empty() ? 0.0 : *std::max_element(t.kld.begin(), t.kld.end());
    j["top1_agreement"] = mean(static_cast<double>(t.agree), t.scored);
  }
  if (b.writer) j["kl_base_saved"] = f.kl_base;
  return j;
}

void print_text(const nlohmann::json& j) {
  std::printf("perplexity %.4f (mean NLL %.6f nats) over %lld tokens: %lld windows of %lld, "
              "the second half of each scored\n",
              j["ppl"].get<double>(), j["nll_mean"].get<double>(), j["tokens"].get<long long>(),
              j["windows"].get<long long>(), j["ctx"].get<long long>());
  std::printf("K/V: k %s, v %s, rotation %s\n", j["k_dtype"].get<std::string>().c_str(),
              j["v_dtype"].get<std::string>().c_str(), j["rotate"].get<bool>() ? "on" : "off");
  if (j.contains("kld_mean")) {
    const double base = j["ppl_base"].get<double>();
    std::printf("against the base: perplexity %.4f (%+.3f %%), mean KL %.3e nats (p99 %.3e, "
                "max %.3e), top-1 agreement %.2f %%\n",
                base, 100.0 * (j["ppl"].get<double>() / base - 1.0), j["kld_mean"].get<double>(),
                j["kld_p99"].get<double>(), j["kld_max"].get<double>(),
                100.0 * j["top1_agreement"].get<double>());
  }
  if (j.contains("kl_base_saved"))
    std::printf("saved the next-token log-probabilities to %s\n",
                j["kl_base_saved"].get<std::string>().c_str());
}

int run(const PplFlags& f) {
  apply_threads(f.cache);
  Result<std::string> text =
      read_file(f.text_file, FileRule{"--text-file", kMaxPerplexityTextBytes, ""});
  if (!text.ok()) return usage(text.status().message());
  Result<engine::LoadedModel> m =
      engine::load_model(engine::ModelSource::file(f.model), load_options(f.cache));
  if (!m.ok()) return fail("perplexity", m.status().message());
  Result<int64_t> ctx = choose_ctx(f, *m->model);
  if (!ctx.ok()) return usage(ctx.status().message());
  Result<Windows> w = split(*text, *m->tokenizer, *ctx, f.text_file);
  if (!w.ok()) return usage(w.status().message());
  engine::CacheOptions o = cache_options(f.cache);
  o.capacity = *ctx;
  Result<engine::CachedEngine> e = engine::build_engine(*m->model, o);
  if (!e.ok()) return fail("perplexity", flag_message(e.status(), {kCacheFieldFlags}));
  BaseFile base;
  if (Status s = open_base(f, *w, m->model->hparams().vocab, base); !s.ok())
    return s.code() == StatusCode::kDataLoss ? fail("perplexity", "--kl-base " + s.message())
                                             : usage("--kl-base " + s.message());
  Totals t;
  if (Status s = score_all(*e, *w, base, t); !s.ok()) return fail("perplexity", s.message());
  const nlohmann::json j = report_json(f, *e, *w, t, base);
  if (f.json)
    std::printf("%s\n", j.dump().c_str());
  else
    print_text(j);
  return 0;
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
  auto f = std::make_shared<PplFlags>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a text through the cache; K/V types against a base run");
  cmd->add_option("model", f->model, "GGUF model file (default: the embedded tiny model)");
  cmd->add_option("--text-file", f->text_file, "Text to score (at most 16 MiB)")->required();
  cmd->add_option("--ctx", f->ctx,
                  "Tokens per window (>= 2; the second half is scored); 0 = min(the model's "
                  "context, 4096)")
      ->check(CLI::Range(int64_t{0}, kMaxCtx))->capture_default_str();
  add_cache_flags(cmd, f->cache, {CacheFlag::kKvDtype, CacheFlag::kMaxStepTokens,
                                  CacheFlag::kThreads, CacheFlag::kMapWeights});
  cmd->add_option("--kl-base", f->kl_base,
                  "Base file: written when absent (this run's next-token log-probabilities), "
                  "else compared against (mean KL divergence, top-1 agreement)");
  cmd->add_flag("--json", f->json, "Print one JSON object on stdout");
  cmd->footer(
      "Windows of --ctx tokens run one by one from an empty cache; tokens at indices "
      "[ctx/2, ctx) of each window are scored (each predicted from all before it in the "
      "window); the text's last partial window is dropped. A text shorter than one window is "
      "refused. See docs/perplexity.md.");
  return [f] { return run(*f); };
}

}  // namespace kvcache::tools
