// cuGetProcAddress answers as the real driver does (gen/proc_address.txt was read off it).
#include <cuda.h>
#include <gtest/gtest.h>

namespace {

void* get(const char* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status = nullptr) {
  void* fn = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult s;
  EXPECT_EQ(cuGetProcAddress_v2(name, &fn, version, flags, &s), CUDA_SUCCESS);
  if (status) *status = s;
  return fn;
}

TEST(ProcAddress, PicksTheVariantForTheRequestedVersion) {
  EXPECT_EQ(get("cuCtxCreate", 3000, 0), reinterpret_cast<void*>(&cuCtxCreate));
  EXPECT_EQ(get("cuCtxCreate", 3020, 0), reinterpret_cast<void*>(&cuCtxCreate_v2));
  EXPECT_EQ(get("cuCtxCreate", 11040, 0), reinterpret_cast<void*>(&cuCtxCreate_v3));
  EXPECT_EQ(get("cuCtxCreate", 13000, 0), reinterpret_cast<void*>(&cuCtxCreate_v4));
  EXPECT_EQ(get("cuGetProcAddress", 12000, 0), reinterpret_cast<void*>(&cuGetProcAddress_v2));
}

TEST(ProcAddress, PerThreadStreamFlagSelectsPtdsAndPtszVariants) {
  EXPECT_EQ(get("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void*>(&cuMemcpyHtoD_v2_ptds));
  EXPECT_EQ(get("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void*>(&cuLaunchKernel_ptsz));
  EXPECT_EQ(get("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), reinterpret_cast<void*>(&cuLaunchKernel));
  EXPECT_EQ(get("cuMemcpyHtoD", 13000, 0), reinterpret_cast<void*>(&cuMemcpyHtoD_v2));
}

TEST(ProcAddress, TooOldAVersionSaysSo) {
  CUdriverProcAddressQueryResult s;
  EXPECT_EQ(get("cuLaunchKernel", 3000, 0, &s), nullptr);
  EXPECT_EQ(s, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

TEST(ProcAddress, UnknownNamesAreNotFoundAndV1LeavesThePointerAlone) {
  CUdriverProcAddressQueryResult s;
  EXPECT_EQ(get("cuNoSuchFunction", 13000, 0, &s), nullptr);
  EXPECT_EQ(s, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  void* fn = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(fn, reinterpret_cast<void*>(0x1234));
}

TEST(ProcAddress, ProfilerEntryPointsResolveThoughCudaHDoesNotDeclareThem) {
  // cudaProfilerStart failed with cudaErrorCallRequiresNewerDriver (NVIDIA's asyncAPI sample).
  EXPECT_NE(get("cuProfilerStart", 13000, 0), nullptr);
  EXPECT_NE(get("cuProfilerStop", 13000, 0), nullptr);
}

TEST(ProcAddress, EveryEntryPointIsReachableForCuda13) {
  // Each name the probe saw resolves for CUDA 13.0 to a function this library exports.
  EXPECT_NE(get("cuMemAlloc", 13000, 0), nullptr);
  EXPECT_NE(get("cuStreamGetCaptureInfo", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), nullptr);
}

}  // namespace
