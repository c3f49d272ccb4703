// `kvcache op-test`: runs a case directory (case.json + .npy arrays) through a cpu cache and
// writes per-step outputs and result.json (SPEC §9). Layer: tools; a library so the tests can
// call it without a process. The whole case is parsed and every array loaded and shape-checked
// before anything runs, so a malformed case writes nothing.
#pragma once

#include <cstdint>
#include <filesystem>

#include "core/status.h"

namespace kvcache::tools {

struct OpTestOptions {
  int threads = 0;  // > 0: resize the cpu layer's global pool first; 0 = keep it
  // > 0: refuse (ResourceExhausted) a case whose cache at capacity would need more bytes,
  // before anything is allocated (the fuzz target's bound); 0 = no limit.
  int64_t max_cache_bytes = 0;
};

// ok when the case ran (refused steps are results in result.json, not errors). A malformed
// case (missing file, bad JSON, unknown kind/dtype/op, .npy of the wrong dtype or shape, ...)
// returns InvalidArgument / NotFound / DataLoss naming the file, field and expectation.
// Outputs: OUT_DIR/s{step}_l{layer}.npy; a layer listed again in the same step (an attend-only
// entry, as a KV-shared model layer would make) writes s{step}_l{layer}_{n}.npy, n = 1, 2, ...
Status run_op_test(const std::filesystem::path& case_dir, const std::filesystem::path& out_dir,
                   const OpTestOptions& options = {});

}  // namespace kvcache::tools
