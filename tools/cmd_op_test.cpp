// kvcache op-test CASE_DIR --out OUT_DIR [--threads N]: runs a byte-layer case from files
// (SPEC §9). The work lives in op_test/op_test.cpp; this file only reads the flags.
#include <cstdio>
#include <string>

#include "commands.h"
#include "op_test/op_test.h"

namespace kvcache::tools {

Runner add_op_test(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "op-test", "Run a byte-layer case (case.json + .npy arrays) and write its outputs");
  struct Flags {
    std::string case_dir, out_dir;
    int threads = 0;
  };
  auto flags = std::make_shared<Flags>();
  sub->add_option("CASE_DIR", flags->case_dir, "Directory holding case.json and its arrays")
      ->required();
  sub->add_option("--out", flags->out_dir, "Directory for s{step}_l{layer}.npy and result.json")
      ->required();
  sub->add_option("--threads", flags->threads, "Kernel threads (default: hardware, at most 8)")
      ->check(CLI::Range(1, 256));
  return [flags] {
    OpTestOptions options;
    options.threads = flags->threads;
    Status st = run_op_test(flags->case_dir, flags->out_dir, options);
    if (!st.ok()) {
      std::fprintf(stderr, "kvcache op-test: %s\n", st.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace kvcache::tools
