// Tests of server/limits.h against the fake driver: every way a session makes GPU memory counts
// against --memory-limit-mb, and every way it ends gives the count back (issue 17, the quotas).
#include "server/limits.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

#ifndef RGPU_FAKE_DRIVER
#error "RGPU_FAKE_DRIVER must name build/lib/libfakecuda.so"
#endif

namespace rgpu::server::limits {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class GpuQuota : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    void* lib = dlopen(RGPU_FAKE_DRIVER, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    load_driver_table(lib, &drv_);
    install(&drv_);  // what main does: every handler calls through the wrapped table
    ASSERT_EQ(drv_.cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(drv_.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  }
  void SetUp() override {
    ASSERT_EQ(proto::table::held(proto::table::kGpu), 0u);
    settings().gpu.per_session = 64 * kMiB;
  }
  void TearDown() override { settings().gpu.per_session = 0; }
  static uint64_t held() { return proto::table::held(proto::table::kGpu); }
  static DriverTable drv_;
};
DriverTable GpuQuota::drv_;

TEST_F(GpuQuota, AnAllocationPastTheSessionLimitFailsOutOfMemoryAndAFreeGivesRoomBack) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(drv_.cuMemAlloc_v2(&a, 48 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(held(), 48 * kMiB);
  EXPECT_EQ(drv_.cuMemAlloc_v2(&b, 32 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(held(), 48 * kMiB);  // the refused one is not counted
  ASSERT_EQ(drv_.cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
  ASSERT_EQ(drv_.cuMemAlloc_v2(&b, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(drv_.cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(drv_.cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);  // the driver's answer; nothing uncounted twice
  EXPECT_EQ(held(), 0u);
}

TEST_F(GpuQuota, FreeMemoryIsNoMoreThanTheLimitLeaves) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(drv_.cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0, 64 * kMiB);
  CUdeviceptr a = 0;
  ASSERT_EQ(drv_.cuMemAlloc_v2(&a, 40 * kMiB), CUDA_SUCCESS);
  size_t free1 = 0;
  ASSERT_EQ(drv_.cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, 24 * kMiB);
  EXPECT_GT(total, 64 * kMiB);  // the device's size is not the limit's
  ASSERT_EQ(drv_.cuMemFree_v2(a), CUDA_SUCCESS);
  settings().gpu.per_session = 0;
  ASSERT_EQ(drv_.cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_GT(free1, 64 * kMiB);  // no limit: the driver's answer
}

TEST_F(GpuQuota, ManagedPitchedPooledAndStreamOrderedAllocationsCountToo) {
  CUdeviceptr m = 0, p = 0, s = 0;
  size_t pitch = 0;
  ASSERT_EQ(drv_.cuMemAllocManaged(&m, 16 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  // The fake has no pitched allocation: that part runs on a driver with one (the real driver).
  const bool pitched = drv_.cuMemAllocPitch_v2 != nullptr;
  if (pitched) ASSERT_EQ(drv_.cuMemAllocPitch_v2(&p, &pitch, 1000, 1024, 4), CUDA_SUCCESS);
  EXPECT_EQ(held(), 16 * kMiB + pitch * 1024);
  ASSERT_EQ(drv_.cuMemAllocAsync(&s, 16 * kMiB, nullptr), CUDA_SUCCESS);
  CUdeviceptr more = 0;
  EXPECT_EQ(drv_.cuMemAllocAsync(&more, 40 * kMiB, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(drv_.cuMemAllocManaged(&more, 40 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  if (pitched) EXPECT_EQ(drv_.cuMemAllocPitch_v2(&more, &pitch, 40 * kMiB, 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(drv_.cuMemFreeAsync(s, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv_.cuMemFree_v2(m), CUDA_SUCCESS);
  if (pitched) ASSERT_EQ(drv_.cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(drv_.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  ASSERT_EQ(drv_.cuMemAllocFromPoolAsync(&q, 40 * kMiB, pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(drv_.cuMemAllocFromPoolAsync(&more, 40 * kMiB, pool, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(drv_.cuMemFreeAsync(q, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
  drv_.cuStreamSynchronize(nullptr);
  drv_.cuMemPoolDestroy(pool);
}

TEST_F(GpuQuota, VirtualMemoryHandlesCountFromCreateToRelease) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  ASSERT_EQ(drv_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  const size_t n = (48 * kMiB + g - 1) / g * g;
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  ASSERT_EQ(drv_.cuMemCreate(&h, n, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(held(), n);
  EXPECT_EQ(drv_.cuMemCreate(&h2, n, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(drv_.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

}  // namespace
}  // namespace rgpu::server::limits
