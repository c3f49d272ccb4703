// kvcache export --from-hf DIR --out FILE.gguf [--dtype f32|f16|bf16]: a Hugging Face
// checkpoint to GGUF (docs/model_format.md). Thin over program/hf_import.h.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "program/cache_summary.h"
#include "program/hf_import.h"

namespace kvcache::tools {
namespace {

struct ExportArgs {
  std::string from_hf, out, dtype = "f32";
};

int run_export(const ExportArgs& a) {
  hf::ExportOptions o;
  o.hf_dir = a.from_hf;
  o.out_path = a.out;
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
    std::fprintf(stderr, "kvcache export: %s\n", r.status().message().c_str());
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
  return [args] { return run_export(*args); };
}

}  // namespace kvcache::tools
