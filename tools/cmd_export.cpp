// kvcache export --from-hf DIR --out FILE.gguf [--dtype f32|f16|bf16] [--no-tokenizer]: a
// Hugging Face checkpoint to GGUF (docs/model_format.md). Thin over program/hf_import.h; the
// written file must load through the engine's own loader before it takes the --out name.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "engine/model.h"
#include "text/tokenizer.h"
#include "program/cache_summary.h"
#include "program/gguf.h"
#include "program/hf_import.h"

namespace kvcache::tools {
namespace {

struct ExportArgs {
  std::string from_hf, out, dtype = "f32";
  bool no_tokenizer = false;
};

// The loader's verdict on a written file: the hyperparameters, weights and tokenizer `run`
// would load (one home for those rules: the engine).
Status loads(const std::string& path) {
  Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
  if (!file.ok()) return file.status();
  engine::LoadOptions lo;
  Result<engine::Model> model = engine::Model::load(*file, lo);
  if (!model.ok())
    return Status(model.status().code(), "the result would not load: " + model.status().message());
  Result<text::Tokenizer> tok = text::Tokenizer::from_gguf(*file, model->hparams().vocab);
  if (!tok.ok())
    return Status(tok.status().code(), "the result would not load: " + tok.status().message());
  return ok_status();
}

int run_export(const ExportArgs& a) {
  hf::ExportOptions o;
  o.hf_dir = a.from_hf;
  o.out_path = a.out;
  o.with_tokenizer = !a.no_tokenizer;
  o.verify = loads;
  if (a.dtype == "f32") o.dtype = gguf::TensorType::kF32;
  else if (a.dtype == "f16") o.dtype = gguf::TensorType::kF16;
  else if (a.dtype == "bf16") o.dtype = gguf::TensorType::kBF16;
  else {
    std::fprintf(stderr, "kvcache export: --dtype = '%s', expected f32, f16 or bf16\n",
                 a.dtype.c_str());
    return 1;
  }
  auto r = hf::export_hf(o);
  if (!r.ok()) {
    const std::string m = r.status().message();
    const bool tokenizer = m.rfind("tokenizer.json", 0) == 0;
    std::fprintf(stderr, "kvcache export: %s%s\n", m.c_str(),
                 tokenizer ? "; pass --no-tokenizer to export without a tokenizer" : "");
    return 1;
  }
  std::fprintf(stderr, "kvcache export: wrote %s: arch %s, %lld tensors, %s, tokenizer: %s\n",
               a.out.c_str(), r->arch.c_str(), static_cast<long long>(r->n_tensors),
               policy_groups(r->geometry).c_str(), r->tokenizer ? "byte-level BPE" : "none (raw bytes)");
  return 0;
}

}  // namespace

Runner add_export(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand("export", "Convert a Hugging Face checkpoint to GGUF");
  sub->add_option("--from-hf", args->from_hf, "Checkpoint directory (config.json + safetensors)")
      ->required();
  sub->add_option("--out", args->out, "Output .gguf file")->required();
  sub->add_option("--dtype", args->dtype, "Matrix storage: f32, f16, bf16 (default f32)");
  sub->add_flag("--no-tokenizer", args->no_tokenizer,
                "Write no tokenizer (run then uses raw bytes), even if tokenizer.json exists");
  return [args] { return run_export(*args); };
}

}  // namespace kvcache::tools
