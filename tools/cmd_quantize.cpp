// kvcache quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|q5_k_m|q6_k|mxfp4: a float model file
// re-encoded with quantized matrices (docs/model_format.md, "Quantized files"). Thin over
// program/gguf_quantize.h.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "core/str_cat.h"
#include "program/gguf.h"
#include "program/gguf_quantize.h"

namespace kvcache::tools {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
};

int quantize_failed(const Status& s) {
  std::string_view m = s.message();
  if (m.rfind("quantize: ", 0) == 0) m.remove_prefix(10);  // the library names the operation too
  return fail("quantize", m);
}

int run_quantize(const QuantizeArgs& a) {
  const auto mix = gguf::parse_quant_mix(a.type);
  if (!mix)
    return quantize_failed(invalid_argument("--type = '" + a.type +
                                 "', expected q8_0, q4_0, q4_k_m, q5_k_m, q6_k or mxfp4"));
  if (a.in == a.out) return quantize_failed(invalid_argument("IN and OUT are the same file '" + a.in + "'"));
  Result<gguf::GgufFile> in = gguf::GgufFile::open(a.in);
  if (!in.ok()) return quantize_failed(in.status());
  gguf::GgufWriter w;
  Result<gguf::QuantizeReport> r = gguf::quantize_model(*in, *mix, w);
  if (!r.ok()) return quantize_failed(r.status());
  if (Status s = w.write(a.out); !s.ok()) return quantize_failed(s);
  std::string types;
  for (const auto& [type, n] : r->tensors_by_type)
    types += str_cat((types.empty() ? "" : ", "), n, " ", gguf::to_string(type));
  std::fprintf(stderr,
               "kvcache quantize: wrote %s (%s): %s; %lld fell back (row length); tensor data "
               "%.1f MB -> %.1f MB\n",
               a.out.c_str(), a.type.c_str(), types.c_str(),
               static_cast<long long>(r->fallbacks), static_cast<double>(r->bytes_in) / 1e6,
               static_cast<double>(r->bytes_out) / 1e6);
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* sub = app.add_subcommand("quantize", "Re-encode a float GGUF model with quantized matrices");
  sub->add_option("in", args->in, "Input .gguf (F32/F16/BF16 tensors)")->required();
  sub->add_option("out", args->out, "Output .gguf")->required();
  sub->add_option("--type", args->type, "q8_0, q4_0, q4_k_m, q5_k_m, q6_k or mxfp4")->required();
  return [args] { return run_quantize(*args); };
}

}  // namespace kvcache::tools
