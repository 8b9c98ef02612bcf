// The argument checks of one-way calls against what driver 580 answered on the H200
// (tests/conformance and the probes named in client/driver/argument_checks.h): each refusal the
// driver makes at once, and the neighbouring calls it accepts, which the checks must pass.
#include "client/driver/argument_checks.h"

#include <gtest/gtest.h>

namespace rgpu::client::checks {
namespace {

DeviceLimits h200() {
  DeviceLimits d;
  d.max_threads_per_block = 1024;
  d.max_block[0] = d.max_block[1] = 1024;
  d.max_block[2] = 64;
  d.max_grid[0] = 2147483647;
  d.max_grid[1] = d.max_grid[2] = 65535;
  d.max_shared_per_block_optin = 232448;
  d.max_shared_per_block = 49152;
  d.multiprocessors = 132;
  return d;
}

LaunchShape shape(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared = 0,
                  bool cooperative = false) {
  return {{gx, gy, gz}, {bx, by, bz}, shared, cooperative};
}

TEST(LaunchChecks, RefuseBlocksTheDeviceCannotRun) {
  const FunctionLimits fn;
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 1025, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 1024, 2, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 1, 1, 65)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 0, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 1024, 1, 1)), CUDA_SUCCESS);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 16, 1, 64)), CUDA_SUCCESS);
}

TEST(LaunchChecks, RefuseEmptyAndOversizedGrids) {
  const FunctionLimits fn;
  EXPECT_EQ(launch(h200(), fn, shape(0, 1, 1, 32, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 0, 1, 32, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 65536, 1, 32, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(1u << 31, 1, 1, 32, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(2147483647u, 65535, 65535, 32, 1, 1)), CUDA_SUCCESS);
}

TEST(LaunchChecks, HoldSharedMemoryToTheFunctionsLimitOnlyWhenKnown) {
  FunctionLimits unknown;
  EXPECT_EQ(launch(h200(), unknown, shape(1, 1, 1, 32, 1, 1, (48 << 10) + 1)), CUDA_SUCCESS);  // the server's
  EXPECT_EQ(launch(h200(), unknown, shape(1, 1, 1, 32, 1, 1, 232449)), CUDA_ERROR_INVALID_VALUE);
  FunctionLimits fn;
  fn.max_dynamic_shared = 48 << 10;
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 32, 1, 1, 48 << 10)), CUDA_SUCCESS);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 32, 1, 1, (48 << 10) + 1)), CUDA_ERROR_INVALID_VALUE);
  fn.max_dynamic_shared = 0;  // "set dyn 0", then a launch asking for 1 byte
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 32, 1, 1, 1)), CUDA_ERROR_INVALID_VALUE);
}

TEST(LaunchChecks, HoldBlocksToTheFunctionsLaunchBoundsWhenKnown) {
  FunctionLimits fn;
  fn.max_threads_per_block = 256;
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 256, 1, 1)), CUDA_SUCCESS);
  EXPECT_EQ(launch(h200(), fn, shape(1, 1, 1, 257, 1, 1)), CUDA_ERROR_INVALID_VALUE);
}

TEST(LaunchChecks, CooperativeGridsMustBeResidentAndBlocksComeFirst) {
  FunctionLimits fn;
  fn.max_coresident_blocks = 8 * 132;
  EXPECT_EQ(launch(h200(), fn, shape(8 * 132, 1, 1, 256, 1, 1, 0, true)), CUDA_SUCCESS);
  EXPECT_EQ(launch(h200(), fn, shape(8 * 132 + 1, 1, 1, 256, 1, 1, 0, true)), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(launch(h200(), fn, shape(1, 8 * 132 + 1, 1, 256, 1, 1, 0, true)), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(launch(h200(), fn, shape(8 * 132 + 1, 1, 1, 1025, 1, 1, 0, true)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), fn, shape(8 * 132 + 1, 1, 1, 256, 1, 1, 0, false)), CUDA_SUCCESS);  // not cooperative
  // Shared memory no block can have: nothing is resident, whatever the occupancy known.
  EXPECT_EQ(launch(h200(), FunctionLimits{}, shape(1, 1, 1, 32, 1, 1, 300 << 10, true)),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(launch(h200(), FunctionLimits{}, shape(1, 1, 1, 32, 1, 1, 300 << 10, false)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(h200(), FunctionLimits{}, shape(1u << 20, 1, 1, 32, 1, 1, 0, true)), CUDA_SUCCESS);  // occupancy unknown
}

TEST(LaunchChecks, UnknownDeviceLimitsCheckOnlyWhatIsAlwaysWrong) {
  EXPECT_EQ(launch(DeviceLimits{}, FunctionLimits{}, shape(1, 1, 1, 4096, 1, 1, 1 << 20)), CUDA_SUCCESS);
  EXPECT_EQ(launch(DeviceLimits{}, FunctionLimits{}, shape(0, 1, 1, 32, 1, 1)), CUDA_ERROR_INVALID_VALUE);
}

TEST(MemsetChecks, RefuseUnalignedDestinationsOnlyWhenSomethingIsSet) {
  const CUdeviceptr p = 0x7f0000000000;
  EXPECT_EQ(memset_destination(p + 1, 4, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_destination(p + 2, 4, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_destination(p + 4, 4, 4), CUDA_SUCCESS);
  EXPECT_EQ(memset_destination(p + 1, 4, 0), CUDA_SUCCESS);  // "memset d32 p+1 n0": SUCCESS on the H200
  EXPECT_EQ(memset_destination(p + 1, 2, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_destination(p + 2, 2, 4), CUDA_SUCCESS);
  EXPECT_EQ(memset_destination(p + 1, 1, 4), CUDA_SUCCESS);
}

TEST(MemsetChecks, RefuseUnalignedPitchesOfMoreThanOneRow) {
  const CUdeviceptr p = 0x7f0000000000;
  EXPECT_EQ(memset_2d(p + 1, 256, 4, 4, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_2d(p + 1, 256, 4, 4, 0), CUDA_SUCCESS);
  EXPECT_EQ(memset_2d(p, 258, 4, 4, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_2d(p, 258, 4, 4, 1), CUDA_SUCCESS);
  EXPECT_EQ(memset_2d(p, 257, 2, 4, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(memset_2d(p, 256, 2, 4, 2), CUDA_SUCCESS);
}

TEST(FlagChecks, AcceptExactlyTheFlagsTheDriverAccepts) {
  // Each bit alone, as tried on the H200: stream create takes bit 0; event create bits 0-2, with
  // INTERPROCESS only beside DISABLE_TIMING; wait and record flags leave bit 0 to the server.
  for (int b = 0; b < 32; ++b) {
    const unsigned f = 1u << b;
    EXPECT_EQ(stream_create_flags(f), b == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) << b;
    EXPECT_EQ(event_create_flags(f), b <= 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) << b;
    EXPECT_EQ(stream_wait_event_flags(f), b == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) << b;
    EXPECT_EQ(event_record_flags(f), b == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) << b;
  }
  EXPECT_EQ(stream_create_flags(0), CUDA_SUCCESS);
  EXPECT_EQ(event_create_flags(0), CUDA_SUCCESS);
  EXPECT_EQ(event_create_flags(3), CUDA_SUCCESS);
  EXPECT_EQ(event_create_flags(6), CUDA_SUCCESS);
  EXPECT_EQ(event_create_flags(7), CUDA_SUCCESS);
  EXPECT_EQ(event_create_flags(5), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(stream_wait_event_flags(7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(stream_wait_event_flags(0), CUDA_SUCCESS);
}

TEST(FunctionAttributeChecks, RefuseReadOnlyAttributesAndImpossibleSharedMemory) {
  for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX; ++a) {
    const bool writable = a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
                          a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT ||
                          (a >= CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH && a <= CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
    EXPECT_EQ(set_function_attribute(h200(), a, 0, -1), writable ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) << a;
  }
  EXPECT_EQ(set_function_attribute(h200(), CU_FUNC_ATTRIBUTE_MAX, 0, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set_function_attribute(h200(), 99, 0, -1), CUDA_ERROR_INVALID_VALUE);
  constexpr int kDyn = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  EXPECT_EQ(set_function_attribute(h200(), kDyn, 232448, -1), CUDA_SUCCESS);
  EXPECT_EQ(set_function_attribute(h200(), kDyn, 232449, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set_function_attribute(h200(), kDyn, 300 << 10, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set_function_attribute(h200(), kDyn, -1, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set_function_attribute(h200(), kDyn, 232448, 1024), CUDA_ERROR_INVALID_VALUE);  // less static shared
  EXPECT_EQ(set_function_attribute(DeviceLimits{}, kDyn, 1 << 30, -1), CUDA_SUCCESS);  // no device known
}

}  // namespace
}  // namespace rgpu::client::checks
