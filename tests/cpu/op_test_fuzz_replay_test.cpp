// Replays the op-test case-directory fuzz corpus (fuzz/corpus/op_test) and saved crashers
// through fuzz/op_test_fuzz.cpp's entry function.
#include <gtest/gtest.h>

#include <string>

#include "fuzz_replay.h"
#include "fuzz_targets.h"

namespace {

TEST(FuzzReplay, OpTestCorpusRunsCleanly) {
  EXPECT_GE(kvcache::testing::replay_target(kvcache::fuzz::op_test_one, "op_test"), 4);
}

TEST(FuzzReplay, OpTestEmptyAndMarkerOnlyInputsRunCleanly) {
  EXPECT_EQ(kvcache::fuzz::op_test_one(nullptr, 0), 0);
  const std::string only_marks = "{}\n@@@ \n@@@ ../x\n@@@ a.npy";
  EXPECT_EQ(kvcache::fuzz::op_test_one(reinterpret_cast<const uint8_t*>(only_marks.data()),
                                       only_marks.size()),
            0);
}

}  // namespace
