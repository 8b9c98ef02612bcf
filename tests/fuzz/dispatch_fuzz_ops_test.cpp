// The dispatch fuzzer (dispatch_fuzz.cpp) feeds every op the server accepts: each op id
// find_handler accepts is picked as itself, and the fuzzer's seeds run each one's handler; most
// of them decode their seed and reach the fake driver or the fake NVML. Built without sanitizers
// (dispatch_fuzz_smoke runs the same target under ASan/UBSan).
#include <gtest/gtest.h>

#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "gen/nvml_ops.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "server/dispatch.h"
#include "tests/fuzz/dispatch_fuzz.h"

extern "C" int LLVMFuzzerInitialize(int*, char***);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out);

namespace rgpu::server {
namespace {

std::vector<uint16_t> accepted_ops() {
  std::vector<uint16_t> ops;
  for (uint32_t v = 0; v <= 0xffff; ++v)
    if (find_handler(static_cast<uint16_t>(v))) ops.push_back(static_cast<uint16_t>(v));
  return ops;
}

std::string label(uint16_t op) {
  const char* n = op_name(op);
  return (n ? n : "?") + std::string(" (op ") + std::to_string(op) + ")";
}

TEST(DispatchFuzz, PicksEveryOpTheServerAcceptsAsItselfAndNothingElse) {
  LLVMFuzzerInitialize(nullptr, nullptr);
  const std::vector<uint16_t> ops = accepted_ops();
  // Every family of ops: control, mapped memory, the CUDA calls, NVML.
  for (uint16_t op : std::initializer_list<uint16_t>{proto::kOpSnapshot, proto::kOpSessions, proto::kOpMappedAlloc, proto::kOpMappedCopy,
                      proto::kOpMappedFree, proto::kOpManagedAlloc, proto::kOpMappedWrite, proto::kOpAllocMany,
                      op::cuMemFree_v2, op::cuLaunchKernel, nvml_op::nvmlInit_v2})
    EXPECT_TRUE(find_handler(op)) << label(op);
  for (uint16_t op : ops) EXPECT_EQ(dispatch_fuzz_op(op), op) << label(op);
  for (uint32_t v = 0; v <= 0xffff; ++v)
    ASSERT_TRUE(find_handler(dispatch_fuzz_op(static_cast<uint16_t>(v)))) << v;
}

TEST(DispatchFuzz, ItsSeedsRunEveryOpsHandlerAndMostDecode) {
  LLVMFuzzerInitialize(nullptr, nullptr);
  std::vector<std::vector<uint8_t>> seeds;
  rgpu_fuzz_seeds(&seeds);
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  const std::vector<DispatchFuzzCount>& counts = dispatch_fuzz_counts();
  const std::vector<uint16_t> ops = accepted_ops();
  size_t decoded = 0;
  std::vector<std::string> never_run, never_decoded;
  for (uint16_t op : ops) {
    if (counts[op].inputs == 0) never_run.push_back(label(op));
    if (counts[op].decoded > 0)
      ++decoded;
    else
      never_decoded.push_back(label(op));
  }
  EXPECT_TRUE(never_run.empty()) << ::testing::PrintToString(never_run);
  std::printf("dispatch_fuzz seeds: %zu seeds; %zu ops accepted, every one run, %zu decoded a seed; not decoded: %s\n",
              seeds.size(), ops.size(), decoded, ::testing::PrintToString(never_decoded).c_str());
  // The ops written by hand decode their seeds (the layouts above are the messages' own).
  for (uint16_t op : std::initializer_list<uint16_t>{proto::kOpSnapshot, proto::kOpSessions, proto::kOpMappedAlloc, proto::kOpMappedCopy,
                      proto::kOpMappedFree, proto::kOpManagedAlloc, proto::kOpMappedWrite, proto::kOpParamLayout,
                      proto::kOpFuncAttributes, proto::kOpAllocAhead, proto::kOpAllocMany, proto::kOpModuleByHash,
                      proto::kOpToolsContextObject, proto::kOpModuleFunctions, proto::kOpClusterTopology,
                      proto::kOpExportTableInfo,
                      proto::kOpClusterOccupancyTable, op::cuMemFree_v2, nvml_op::nvmlInit_v2,
                      nvml_op::nvmlDeviceGetName})
    EXPECT_GT(counts[op].decoded, 0u) << label(op);
  EXPECT_GE(decoded * 100, ops.size() * 90) << "fewer than 90% of the ops decode a seed";
}

}  // namespace
}  // namespace rgpu::server
