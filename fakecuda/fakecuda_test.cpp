// fakecuda against its contract: the driver calls the server makes, with the nvcc-built images of
// tests/kernels. Linked directly against libfakecuda.so (the same exported symbols the server
// dlsym's). Tests share one process, so each makes its own context and leaves none behind.
#include <cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "test_kernel_paths.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::vector<uint8_t> read_file(const char* path, bool nul = false) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> d{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (nul) d.push_back(0);
  return d;
}

// Runs first (tests run in file order): nothing works before cuInit.
TEST(FakeCudaInit, CallsBeforeCuInitFailNotInitialized) {
  int n = -1;
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);  // the one call that works before cuInit
  EXPECT_EQ(v, 13000);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
}

class Fake : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxCreate_v4(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    for (CUmodule m : modules_) cuModuleUnload(m);
    EXPECT_EQ(cuCtxDestroy_v2(ctx_), CUDA_SUCCESS);
    CUcontext cur = reinterpret_cast<CUcontext>(1);
    cuCtxGetCurrent(&cur);
    EXPECT_EQ(cur, nullptr);
  }
  CUdeviceptr alloc(size_t n) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc_v2(&p, n), CUDA_SUCCESS);
    return p;
  }
  CUmodule load_module(const char* path, bool ptx = false) {
    std::vector<uint8_t> image = read_file(path, ptx);
    CUmodule m = nullptr;
    EXPECT_EQ(cuModuleLoadData(&m, image.data()), CUDA_SUCCESS) << path;
    modules_.push_back(m);
    return m;
  }
  CUfunction func(const char* name) {
    if (!module_) module_ = load_module(RGPU_TEST_KERNEL_FATBIN);
    CUfunction f = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&f, module_, name), CUDA_SUCCESS) << name;
    return f;
  }
  void spin(CUstream s, long long ms) {
    void* args[] = {&ms};
    ASSERT_EQ(cuLaunchKernel(func("rgpu_spin"), 1, 1, 1, 1, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  }
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUmodule> modules_;
};

class FakeImages : public Fake {
 protected:
  void SetUp() override {
    if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time, so there are no images";
    Fake::SetUp();
  }
};

// ---------- device ----------

TEST_F(Fake, ReportsOneH200) {
  int n = 0;
  ASSERT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
  CUdevice d = -1;
  EXPECT_EQ(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuDeviceGet(&d, 0), CUDA_SUCCESS);
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, d), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H200 (rgpu fake)");
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, d), CUDA_SUCCESS);
  EXPECT_EQ(total, 143155ull << 20);
  CUuuid a, b;
  ASSERT_EQ(cuDeviceGetUuid_v2(&a, d), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid(&b, d), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(a.bytes, b.bytes, 16), 0);
  int major = 0, minor = -1;
  ASSERT_EQ(cuDeviceComputeCapability(&major, &minor, d), CUDA_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 90);
  char bus[32];
  ASSERT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, d), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:1B:00.0");  // cuDeviceGetPCIBusId: a 4-digit domain, as on the H200
}

TEST_F(Fake, AnswersEveryDeviceAttributeAndRefusesOutOfRange) {
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = -12345;
    EXPECT_EQ(cuDeviceGetAttribute(&v, CUdevice_attribute(a), 0), CUDA_SUCCESS) << a;
    EXPECT_NE(v, -12345) << a;
  }
  int v;
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CUdevice_attribute(100000), 0), CUDA_ERROR_INVALID_VALUE);
  auto attr = [](CUdevice_attribute a) {
    int x = 0;
    cuDeviceGetAttribute(&x, a, 0);
    return x;
  };
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
}

TEST_F(Fake, PitchedMemoryPadsRowsToTheTextureAlignment) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 5, 4), CUDA_SUCCESS);
  int align = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(pitch % static_cast<size_t>(align), 0u);
  std::vector<uint8_t> row(pitch * 5, 0x7e), back(pitch * 5);
  EXPECT_EQ(cuMemcpyHtoD_v2(p, row.data(), row.size()), CUDA_SUCCESS);  // every row's bytes are the allocation's
  EXPECT_EQ(cuMemcpyDtoH_v2(back.data(), p, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, row);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 5, 2), CUDA_ERROR_INVALID_VALUE);  // elements of 4, 8 or 16 bytes
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 0, 5, 4), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Fake, NamesItsErrors) {
  const char* s = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "invalid argument");
  // Every code driver 580 names, in its words (tests/conformance holds all of them to h200.txt).
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_UNSUPPORTED_LIMIT, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_UNSUPPORTED_LIMIT");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_PROFILER_DISABLED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "profiler disabled while using external profiling tool");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
}

// ---------- contexts ----------

TEST_F(Fake, CallsWithoutACurrentContextFailInvalidContext) {
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx_);
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc_v2(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
  CUstream s;
  EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuCtxPushCurrent_v2(ctx_), CUDA_SUCCESS);
  CUdevice d = -1;
  EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
  EXPECT_EQ(d, 0);
}

TEST_F(Fake, CurrentContextIsPerThread) {
  std::thread([] {
    CUcontext c = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
  }).join();
  std::thread([this] {
    EXPECT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    CUcontext c = nullptr;
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, ctx_);
  }).join();
}

TEST_F(Fake, PrimaryContextIsRefCounted) {
  unsigned flags = 99;
  int active = -1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  CUcontext p1, p2;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  EXPECT_EQ(p1, p2);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(flags, unsigned(CU_CTX_SCHED_BLOCKING_SYNC));
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(p1), CUDA_SUCCESS);
    CUdeviceptr d;
    EXPECT_EQ(cuMemAlloc_v2(&d, 1024), CUDA_SUCCESS);
  }).join();
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(p1), CUDA_ERROR_INVALID_CONTEXT);  // inactive until retained again
  }).join();
}

TEST_F(Fake, ContextQueries) {
  unsigned v = 0;
  EXPECT_EQ(cuCtxGetApiVersion(ctx_, &v), CUDA_SUCCESS);
  EXPECT_GT(v, 0u);
  size_t lim = 0;
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 << 24), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&lim, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(lim, size_t(1) << 24);
  int least = 1, greatest = 1;
  EXPECT_EQ(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, 0);
}

TEST_F(Fake, AnswersEveryLimitCudaHDeclaresWithTheDriversDefaults) {
  // cuBLASLt 13's cublasLtCreate asks for CU_LIMIT_CIG_ENABLED; the fake once knew only limits 0
  // to 6 and answered it CUDA_ERROR_UNSUPPORTED_LIMIT, so no cuBLAS program ran on it. The values
  // are the H200's under driver 580 (tests/conformance/h200.txt); 0 marks UNSUPPORTED_LIMIT.
  const std::pair<CUlimit, size_t> expected[] = {
      {CU_LIMIT_STACK_SIZE, 1024},
      {CU_LIMIT_PRINTF_FIFO_SIZE, 8650752},
      {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
      {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 0},
      {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048},
      {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64},
      {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 11796480},
      {CU_LIMIT_SHMEM_SIZE, 232448},
      {CU_LIMIT_CIG_ENABLED, 0},
      {CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED, 0},
  };
  ASSERT_EQ(std::size(expected), size_t(CU_LIMIT_MAX));
  for (auto [limit, value] : expected) {
    size_t got = 12345;
    bool unsupported = limit == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED;
    EXPECT_EQ(cuCtxGetLimit(&got, limit), unsupported ? CUDA_ERROR_UNSUPPORTED_LIMIT : CUDA_SUCCESS) << limit;
    if (!unsupported) {
      EXPECT_EQ(got, value) << limit;
    }
  }
  size_t got = 0;
  // Past the last limit: INVALID_VALUE, as any other bad argument.
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(&got, static_cast<CUlimit>(99)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(nullptr, CU_LIMIT_CIG_ENABLED), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Fake, SetLimitStoresClampsOrRefusesAsTheDriver) {
  size_t got = 0;
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 4 << 20), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_PRINTF_FIFO_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(got, size_t(4) << 20);
  // The CIG limits are query-only: NOT_PERMITTED, and they keep their value.
  for (CUlimit limit : {CU_LIMIT_SHMEM_SIZE, CU_LIMIT_CIG_ENABLED}) {
    size_t before = 0;
    ASSERT_EQ(cuCtxGetLimit(&before, limit), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetLimit(limit, 0), CUDA_ERROR_NOT_PERMITTED) << limit;
    EXPECT_EQ(cuCtxGetLimit(&got, limit), CUDA_SUCCESS);
    EXPECT_EQ(got, before) << limit;
  }
  // The sync depth (compute capability 9.0) and the CIG fallback: not on this device at all.
  for (CUlimit limit : {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED}) {
    EXPECT_EQ(cuCtxSetLimit(limit, 0), CUDA_ERROR_UNSUPPORTED_LIMIT) << limit;
    EXPECT_EQ(cuCtxGetLimit(&got, limit), CUDA_ERROR_UNSUPPORTED_LIMIT) << limit;
  }
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MAX, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(static_cast<CUlimit>(99), 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 129), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_MAX_L2_FETCH_GRANULARITY), CUDA_SUCCESS);
  EXPECT_EQ(got, 64u);
  // The persisting L2 size: above the device's maximum (its attribute) INVALID_VALUE, the value
  // kept; up to it stored.
  int max_persisting = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&max_persisting, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, size_t(1) << 40), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_PERSISTING_L2_CACHE_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(got, size_t(max_persisting) * 3 / 10);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_PERSISTING_L2_CACHE_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(got, 0u);
}

TEST_F(Fake, APrimaryContextActiveAgainHasTheDefaultLimits) {
  CUcontext p = nullptr;
  size_t got = 0;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);  // the last reference
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&got, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(got, size_t(8) << 20);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

// ---------- memory ----------

TEST_F(Fake, AllocationsAreAlignedDeviceAddressesWithinTheReportedTotal) {
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc_v2(&p, (143155ull << 20) + 1), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free0, total;
  ASSERT_EQ(cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);
  CUdeviceptr a = alloc(1000), b = alloc(1);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_EQ(b % 256, 0u);
  EXPECT_GE(a, 0x7e0000000000ull);
  EXPECT_GE(b, a + 1000);
  size_t free1;
  ASSERT_EQ(cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, 1001u);
  CUdeviceptr base;
  size_t size;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, a + 999), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 1000u);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, a + 1000), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuMemFree_v2(a + 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
}

TEST_F(Fake, CopiesRoundTripAndBadRangesAreRefusedWithoutWriting) {
  CUdeviceptr a = alloc(256), b = alloc(256);
  std::vector<uint8_t> in(256), out(256, 0xee);
  for (int i = 0; i < 256; ++i) in[i] = uint8_t(i);
  ASSERT_EQ(cuMemcpyHtoD_v2(a, in.data(), 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(b, a, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), b, 256), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  // Unified cuMemcpy: device to device and device to host.
  ASSERT_EQ(cuMemcpy(b + 128, a, 16), CUDA_SUCCESS);
  std::vector<uint8_t> back(16);
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(back.data()), b + 128, 16), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(back.data(), in.data(), 16), 0);

  std::vector<uint8_t> untouched(300, 0x5a);
  EXPECT_EQ(cuMemcpyDtoH_v2(untouched.data(), a, 257), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH_v2(untouched.data(), a + 200, 57), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(a + 1, in.data(), 256), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(0x7e00deadbe00ull, in.data(), 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(0x1000, in.data(), 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD_v2(b, a - 1, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(0x7eff00000000ull, a, 4), CUDA_ERROR_INVALID_VALUE) << "unallocated device address";
  EXPECT_EQ(cuMemsetD8_v2(a + 255, 0, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32_v2(b, 0, 65), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(untouched, std::vector<uint8_t>(300, 0x5a));
  std::vector<uint8_t> want = in;  // b, with the unified copy above
  std::copy(in.begin(), in.begin() + 16, want.begin() + 128);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), b, 256), CUDA_SUCCESS);
  EXPECT_EQ(want, out) << "a refused memset wrote";
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), a, 256), CUDA_SUCCESS);
  EXPECT_EQ(in, out) << "a refused copy or memset wrote";
  cuMemFree_v2(a);
  cuMemFree_v2(b);
}

// Mapped pinned memory (DEVICEMAP) is reachable from the device at its host address, but it is
// host memory: its pointer attributes say so (they crashed, looking for a device allocation).
TEST_F(Fake, MappedPinnedMemoryHasHostPointerAttributes) {
  void* h = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&h, 65536, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % (2 << 20), 0u);  // driver 580: 2 MiB-aligned (the fake: 4 KiB)
  unsigned type = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUdeviceptr(h)), CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned(CU_MEMORYTYPE_HOST));
  CUcontext c = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, CUdeviceptr(h) + 100), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  void* hp = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, CUdeviceptr(h)), CUDA_SUCCESS);
  EXPECT_EQ(hp, h);
  // One buffer: the same id at both ends, the whole range (rgpu-server's graph handler relies on it).
  unsigned long long first = 0, last = 1;
  EXPECT_EQ(cuPointerGetAttribute(&first, CU_POINTER_ATTRIBUTE_BUFFER_ID, CUdeviceptr(h)), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&last, CU_POINTER_ATTRIBUTE_BUFFER_ID, CUdeviceptr(h) + 65535), CUDA_SUCCESS);
  EXPECT_EQ(first, last);
  CUdeviceptr start = 0;
  size_t size = 0;
  EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CUdeviceptr(h) + 100), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, CUdeviceptr(h) + 100), CUDA_SUCCESS);
  EXPECT_EQ(start, CUdeviceptr(h));
  EXPECT_EQ(size, 65536u);
  // cuMemGetAddressRange answers pinned memory too (driver 580; the fake said NOT_FOUND).
  start = 0, size = 0;
  EXPECT_EQ(cuMemGetAddressRange_v2(&start, &size, CUdeviceptr(h) + 100), CUDA_SUCCESS);
  EXPECT_EQ(start, CUdeviceptr(h));
  EXPECT_EQ(size, 65536u);
  EXPECT_EQ(cuMemFreeHost(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAddressRange_v2(&start, &size, CUdeviceptr(h) + 100), CUDA_ERROR_NOT_FOUND);
}

// VMM: physical memory by handle, mapped into a reservation, reachable once access is set; the
// memory lives while mapped after its handle is released; an exported fd maps the same bytes.
TEST_F(Fake, VirtualMemoryMapsHandlesIntoReservations) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 2 * g, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % g, 0u);
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  ASSERT_EQ(cuMemCreate(&h, g, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemCreate(&h2, g + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  size_t free1 = 0;
  cuMemGetInfo_v2(&free1, &total);
  EXPECT_EQ(free0 - free1, g);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);          // already mapped there
  EXPECT_EQ(cuMemMap(va + 4 * g, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // outside the reservation
  uint32_t word = 1;
  EXPECT_EQ(cuMemsetD32_v2(va, 5, 1), CUDA_ERROR_INVALID_VALUE);  // no access yet
  CUmemAccessDesc acc{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va, 2 * g, &acc, 1), CUDA_ERROR_INVALID_VALUE);  // half of it unmapped
  ASSERT_EQ(cuMemSetAccess(va, g, &acc, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32_v2(va, 0xfeedu, g / 4), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(va), CUDA_ERROR_INVALID_VALUE);  // a mapping is not cuMemAlloc's
  // A mapping's range is the reservation (driver 580), its mapping the handle's size.
  size_t range = 0, mapping = 0;
  EXPECT_EQ(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 64), CUDA_SUCCESS);
  EXPECT_EQ(range, 2 * g);
  EXPECT_EQ(cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + 64), CUDA_SUCCESS);
  EXPECT_EQ(mapping, g);

  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle imported = 0;
  ASSERT_EQ(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);
  ASSERT_EQ(cuMemMap(va + g, g, 0, imported, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(va + g, g, &acc, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(&word, va + g + 64, 4), CUDA_SUCCESS);
  EXPECT_EQ(word, 0xfeedu);  // the same physical memory

  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(imported), CUDA_SUCCESS);
  word = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&word, va, 4), CUDA_SUCCESS);  // still mapped: still there
  EXPECT_EQ(word, 0xfeedu);
  EXPECT_EQ(cuMemAddressFree(va, 2 * g), CUDA_ERROR_INVALID_VALUE);  // mappings left
  EXPECT_EQ(cuMemUnmap(va, g / 2), CUDA_ERROR_INVALID_VALUE);         // part of a mapping
  ASSERT_EQ(cuMemUnmap(va, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH_v2(&word, va, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(va, 2 * g), CUDA_SUCCESS);
  size_t free2 = 0;
  cuMemGetInfo_v2(&free2, &total);
  EXPECT_EQ(free2, free0);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
}

// Stream-ordered allocations are placed as driver 580 places them (the fake once put each at
// the window's next 256-byte boundary): back to back in a pool's 32 MiB chunk, first fit.
TEST_F(Fake, PoolAllocationsShareChunksFirstFit) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0, q = 0, r = 0, big = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&q, 1 << 20, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(p % (2 << 20), 0u);
  EXPECT_EQ(q, p + (1 << 20));
  CUdeviceptr map_base = 0;
  size_t map_size = 0, range = 0;
  EXPECT_EQ(cuPointerGetAttribute(&map_base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, q + 8), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&map_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, q + 8), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, q + 8), CUDA_SUCCESS);
  EXPECT_EQ(map_base, p);
  EXPECT_EQ(map_size, size_t(32) << 20);
  EXPECT_EQ(range, size_t(1) << 20);
  // A size past a chunk gets one of its own, in whole 2 MiB granules.
  ASSERT_EQ(cuMemAllocFromPoolAsync(&big, (33 << 20) + 1, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&map_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, big), CUDA_SUCCESS);
  EXPECT_EQ(map_size, size_t(34) << 20);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(q, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&r, 4096, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(r, p);  // the chunk's start again
  uint32_t word = 0;
  ASSERT_EQ(cuMemsetD32Async(r, 0xabcdu, 1024, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(&word, r + 4092, 4), CUDA_SUCCESS);
  EXPECT_EQ(word, 0xabcdu);
  EXPECT_EQ(cuMemcpyDtoH_v2(&word, r + 4094, 4), CUDA_ERROR_INVALID_VALUE);  // past its end, though the chunk goes on
  ASSERT_EQ(cuMemFreeAsync(r, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(big, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

TEST_F(Fake, MemsetsFillWithTheirElementWidth) {
  CUdeviceptr d = alloc(64);
  uint8_t out[64];
  ASSERT_EQ(cuMemsetD8_v2(d, 0xab, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD16_v2(d, 0x1234, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32_v2(d + 16, 0xdeadbeef, 2), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(d + 32, 7, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(out, d, 64), CUDA_SUCCESS);
  uint16_t h;
  std::memcpy(&h, out + 6, 2);
  EXPECT_EQ(h, 0x1234);
  EXPECT_EQ(out[8], 0xab);
  uint32_t w;
  std::memcpy(&w, out + 20, 4);
  EXPECT_EQ(w, 0xdeadbeefu);
  std::memcpy(&w, out + 32, 4);
  EXPECT_EQ(w, 7u);
  EXPECT_EQ(out[63], 0xab);
  cuStreamDestroy_v2(s);
  cuMemFree_v2(d);
}

// ---------- streams and events ----------

TEST_F(Fake, StreamHandlesAreHeapPointersNotAligned256AsTheDrivers) {
  // The real driver's CUstream is a heap pointer (rgpu_conformance "stream create": nonnull, not
  // aligned to 256); the fake's make_shared block sometimes was, so a test could come to rely on it.
  for (int i = 0; i < 8; ++i) {
    CUstream s = nullptr;
    ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    auto p = reinterpret_cast<uintptr_t>(s);
    EXPECT_EQ(p % 16, 0u);
    EXPECT_NE(p % 256, 0u);
    EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  }
}

TEST_F(FakeImages, StreamsRunAsynchronouslyAndInOrder) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr d = alloc(4096);
  std::vector<uint32_t> in(1024, 3), out(1024, 0);
  func("rgpu_spin");  // the module's load, outside the timed part
  // A kernel long enough that a loaded machine's scheduling stays well inside it.
  auto t0 = Clock::now();
  spin(s, 1000);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, in.data(), 4096, s), CUDA_SUCCESS);  // pageable: staged now
  in.assign(1024, 99);                                                   // ... so this is not copied
  ASSERT_EQ(cuMemsetD32Async(d, 5, 1, s), CUDA_SUCCESS);
  EXPECT_LT(ms_since(t0), 500) << "async calls waited for the kernel";
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_GE(ms_since(t0), 990);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), d, 4096), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 5u);
  EXPECT_EQ(out[1], 3u);
  EXPECT_EQ(out[1023], 3u);
  unsigned flags = 9;
  EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  cuMemFree_v2(d);
}

TEST_F(FakeImages, LegacyStreamWaitsForBlockingStreamsButNotNonBlockingOnes) {
  CUstream blocking, nonblocking;
  ASSERT_EQ(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreateWithPriority(&nonblocking, CU_STREAM_NON_BLOCKING, -1), CUDA_SUCCESS);
  int prio = 0;
  EXPECT_EQ(cuStreamGetPriority(nonblocking, &prio), CUDA_SUCCESS);
  EXPECT_EQ(prio, -1);
  CUdeviceptr d = alloc(4);
  uint32_t v = 1;

  func("rgpu_spin");  // the module's load, outside the timed part
  auto t0 = Clock::now();
  spin(nonblocking, 1000);
  ASSERT_EQ(cuMemcpyHtoD_v2(d, &v, 4), CUDA_SUCCESS);  // legacy stream: does not wait
  EXPECT_LT(ms_since(t0), 500);
  ASSERT_EQ(cuStreamSynchronize(nonblocking), CUDA_SUCCESS);

  t0 = Clock::now();
  spin(blocking, 200);
  ASSERT_EQ(cuMemcpyHtoD_v2(d, &v, 4), CUDA_SUCCESS);  // waits for the blocking stream
  EXPECT_GE(ms_since(t0), 190);
  cuStreamDestroy_v2(blocking);
  cuStreamDestroy_v2(nonblocking);
  cuMemFree_v2(d);
}

TEST_F(FakeImages, ASynchronizeBehindALongKernelDoesNotStallOtherThreads) {
  CUstream slow, fast;
  ASSERT_EQ(cuStreamCreate(&slow, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&fast, 0), CUDA_SUCCESS);
  spin(slow, 500);
  std::atomic<bool> slow_done{false};
  std::thread waiter([&] {
    cuCtxSetCurrent(ctx_);
    EXPECT_EQ(cuStreamSynchronize(slow), CUDA_SUCCESS);
    slow_done = true;
  });
  CUdeviceptr d = alloc(1 << 20);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(cuMemsetD8Async(d, uint8_t(i), 1 << 20, fast), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(fast), CUDA_SUCCESS);
  }
  EXPECT_FALSE(slow_done.load());
  waiter.join();
  EXPECT_TRUE(slow_done.load());
  cuStreamDestroy_v2(slow);
  cuStreamDestroy_v2(fast);
  cuMemFree_v2(d);
}

TEST_F(Fake, ElapsedTimeWithANullOutPointerIsAnInvalidHandle) {
  // Driver 580 answers INVALID_HANDLE even for two recorded, completed events (rgpu_conformance
  // "null elapsed out"); the fake said INVALID_VALUE.
  CUevent a, b;
  ASSERT_EQ(cuEventCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime(nullptr, a, b), CUDA_ERROR_INVALID_HANDLE);
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  EXPECT_GE(ms, 0);
  EXPECT_EQ(cuEventDestroy_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(b), CUDA_SUCCESS);
}

TEST_F(Fake, EventFlagsAreCheckedAsTheDrivers) {
  // Driver 580 on the H200: an interprocess event must be untimed; the EXTERNAL flags of a wait or
  // a record are for stream capture only (ILLEGAL_STATE outside one); a record's other flag bits
  // are INVALID_VALUE. The fake said SUCCESS to all of them.
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecordWithFlags(e, s, CU_EVENT_RECORD_EXTERNAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuEventRecordWithFlags(e, s, 0x2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventRecordWithFlags(e, s, 0x80), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuEventRecordWithFlags(e, s, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  // In a capture both are event nodes.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecordWithFlags(e, s, CU_EVENT_RECORD_EXTERNAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(Fake, MemsetD2DSetsEachRowUpToItsWidth) {
  // Driver 580 exports cuMemsetD2D8/16/32 (_v2) and their Async forms; the fake had none.
  constexpr size_t kPitch = 64, kRows = 4;
  CUdeviceptr d = alloc(kPitch * kRows);
  std::vector<uint8_t> host(kPitch * kRows);
  auto row_bytes = [&](size_t y, size_t from, size_t to, uint8_t want) {
    for (size_t x = from; x < to; ++x)
      if (host[y * kPitch + x] != want) return false;
    return true;
  };
  ASSERT_EQ(cuMemsetD8_v2(d, 0, kPitch * kRows), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D8_v2(d, kPitch, 0xab, 10, kRows), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(host.data(), d, host.size()), CUDA_SUCCESS);
  for (size_t y = 0; y < kRows; ++y) {
    EXPECT_TRUE(row_bytes(y, 0, 10, 0xab)) << y;
    EXPECT_TRUE(row_bytes(y, 10, kPitch, 0)) << y;
  }
  ASSERT_EQ(cuMemsetD2D16_v2(d, kPitch, 0x1234, 3, 2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D32_v2(d + 2 * kPitch, kPitch, 0xdeadbeefu, 2, 2), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D8Async(d + 32, kPitch, 0x11, 4, kRows, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D16Async(d + 40, kPitch, 0x2222, 2, kRows, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D32Async(d + 48, kPitch, 0x33333333u, 1, kRows, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(host.data(), d, host.size()), CUDA_SUCCESS);
  for (size_t y = 0; y < 2; ++y) {
    uint16_t h[3];
    std::memcpy(h, &host[y * kPitch], sizeof h);
    for (uint16_t v : h) EXPECT_EQ(v, 0x1234) << y;
    EXPECT_TRUE(row_bytes(y, 6, 10, 0xab)) << y;
  }
  for (size_t y = 2; y < 4; ++y) {
    uint32_t w[2];
    std::memcpy(w, &host[y * kPitch], sizeof w);
    for (uint32_t v : w) EXPECT_EQ(v, 0xdeadbeefu) << y;
    EXPECT_TRUE(row_bytes(y, 8, 10, 0xab)) << y;
  }
  for (size_t y = 0; y < kRows; ++y) {
    EXPECT_TRUE(row_bytes(y, 32, 36, 0x11)) << y;
    EXPECT_TRUE(row_bytes(y, 36, 40, 0)) << y;
    EXPECT_TRUE(row_bytes(y, 40, 44, 0x22)) << y;
    EXPECT_TRUE(row_bytes(y, 48, 52, 0x33)) << y;
    EXPECT_TRUE(row_bytes(y, 52, kPitch, 0)) << y;
  }
  // A pitch narrower than a row, a misaligned start, rows past the allocation: refused.
  EXPECT_EQ(cuMemsetD2D8_v2(d, 8, 0, 10, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D32_v2(d + 2, kPitch, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D8_v2(d, kPitch, 0, 1, kRows + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D8_v2(d, kPitch, 0, 0, kRows), CUDA_SUCCESS);
  cuStreamDestroy_v2(s);
  cuMemFree_v2(d);
}

TEST_F(FakeImages, EventsTimeAndOrderAcrossStreams) {
  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent start, stop, untimed, never;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&stop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&never, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(never), CUDA_SUCCESS);  // never recorded counts as complete

  CUdeviceptr d = alloc(4);
  ASSERT_EQ(cuMemsetD32_v2(d, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, a), CUDA_SUCCESS);
  spin(a, 200);
  ASSERT_EQ(cuMemsetD32Async(d, 42, 1, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecordWithFlags(untimed, a, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, start, stop), CUDA_ERROR_NOT_READY);

  // b waits for stop, then reads d into pinned memory: it must see 42.
  uint32_t* pinned = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(reinterpret_cast<void**>(&pinned), 4), CUDA_SUCCESS);
  *pinned = 0;
  ASSERT_EQ(cuStreamWaitEvent(b, stop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(pinned, d, 4, b), CUDA_SUCCESS);  // pinned: returns at once
  EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(*pinned, 42u);

  ASSERT_EQ(cuEventSynchronize(stop), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_GE(ms, 190.f);
  EXPECT_LT(ms, 2000.f);
  EXPECT_EQ(cuEventElapsedTime(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(&ms, start, never), CUDA_ERROR_INVALID_HANDLE);
  for (CUevent e : {start, stop, untimed, never}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(start), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
  cuStreamDestroy_v2(a);
  cuStreamDestroy_v2(b);
  cuMemFree_v2(d);
}

// ---------- modules ----------

TEST_F(FakeImages, LoadsEveryImageKindWithAllTestKernels) {
  struct {
    const char* path;
    bool ptx;
  } images[] = {{RGPU_TEST_KERNEL_CUBIN, false},      {RGPU_TEST_KERNEL_FATBIN, false},
                {RGPU_TEST_KERNEL_FATBIN_LZ4, false}, {RGPU_TEST_KERNEL_FATBIN_ZSTD, false},
                {RGPU_TEST_KERNEL_FATBIN_NONE, false}, {RGPU_TEST_KERNEL_FATBIN_PTX, false},
                {RGPU_TEST_KERNEL_PTX, true}};
  for (auto& img : images) {
    CUmodule m = load_module(img.path, img.ptx);
    unsigned count = 0;
    ASSERT_EQ(cuModuleGetFunctionCount(&count, m), CUDA_SUCCESS);
    EXPECT_EQ(count, 9u) << img.path;  // eight extern "C" kernels and rgpu_local_scale
    // Module-scope variables of machine code get zeroed device memory of their size.
    if (!img.ptx && std::string(img.path) != RGPU_TEST_KERNEL_FATBIN_PTX) {
      CUdeviceptr g = 0, again = 0;
      size_t bytes = 0;
      ASSERT_EQ(cuModuleGetGlobal_v2(&g, &bytes, m, "rgpu_constant_table"), CUDA_SUCCESS) << img.path;
      EXPECT_EQ(bytes, 64u);
      float table[16] = {1};
      ASSERT_EQ(cuMemcpyDtoH_v2(table, g, sizeof table), CUDA_SUCCESS);
      EXPECT_EQ(table[0], 0.0f);
      ASSERT_EQ(cuModuleGetGlobal_v2(&again, nullptr, m, "rgpu_constant_table"), CUDA_SUCCESS);
      EXPECT_EQ(again, g);  // placed once
      EXPECT_EQ(cuModuleGetGlobal_v2(&g, &bytes, m, "no_such_global"), CUDA_ERROR_NOT_FOUND);
    }
    CUfunction f;
    for (const char* k :
         {"rgpu_vec_add", "rgpu_fill_u32", "rgpu_affine", "rgpu_spin", "rgpu_empty", "rgpu_printf", "rgpu_big_params"})
      EXPECT_EQ(cuModuleGetFunction(&f, m, k), CUDA_SUCCESS) << img.path << " " << k;
    EXPECT_EQ(cuModuleGetFunction(&f, m, "rgpu_nope"), CUDA_ERROR_NOT_FOUND);
    ASSERT_EQ(cuModuleGetFunction(&f, m, "rgpu_affine"), CUDA_SUCCESS);
    size_t off = 0, size = 0;
    ASSERT_EQ(cuFuncGetParamInfo(f, 1, &off, &size), CUDA_SUCCESS);
    EXPECT_EQ(off, 8u);
    EXPECT_EQ(size, 24u);
    ASSERT_EQ(cuFuncGetParamInfo(f, 2, &off, &size), CUDA_SUCCESS);
    EXPECT_EQ(off, 32u);
    EXPECT_EQ(cuFuncGetParamInfo(f, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
    const char* name = nullptr;
    ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
    EXPECT_STREQ(name, "rgpu_affine");
    int v = 0;
    EXPECT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
    EXPECT_EQ(v, 1024);
  }
}

TEST_F(FakeImages, LoadsFromAFileAFatBinaryAndAWrapper) {
  CUmodule m;
  ASSERT_EQ(cuModuleLoad(&m, RGPU_TEST_KERNEL_PTX), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleLoad(&m, "/nonexistent/image.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
  std::vector<uint8_t> fatbin = read_file(RGPU_TEST_KERNEL_FATBIN);
  ASSERT_EQ(cuModuleLoadFatBinary(&m, fatbin.data()), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  struct {
    uint32_t magic, version;
    const void* data;
    const void* unused;
  } wrapper{0x466243B1, 1, fatbin.data(), nullptr};
  ASSERT_EQ(cuModuleLoadFatBinary(&m, &wrapper), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  // A bare pointer is read as far as the image's headers say, so garbage gets a buffer that big.
  std::vector<uint8_t> garbage(4096, 0);
  std::memcpy(garbage.data(), "\x7f" "ELF", 4);
  EXPECT_EQ(cuModuleLoadData(&m, garbage.data()), CUDA_ERROR_INVALID_IMAGE);
  garbage.assign(4096, 0x41);
  EXPECT_EQ(cuModuleLoadData(&m, garbage.data()), CUDA_ERROR_INVALID_IMAGE);
}

// ---------- launches ----------

TEST_F(FakeImages, VecAddRunsFromKernelParams) {
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1);
  for (int i = 0; i < n; ++i) a[i] = float(i), b[i] = 0.5f * float(i);
  CUdeviceptr da = alloc(n * 4), db = alloc(n * 4), dc = alloc(n * 4);
  ASSERT_EQ(cuMemcpyHtoD_v2(da, a.data(), n * 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD_v2(db, b.data(), n * 4), CUDA_SUCCESS);
  int nn = n;
  void* args[] = {&da, &db, &dc, &nn};
  ASSERT_EQ(cuLaunchKernel(func("rgpu_vec_add"), (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(c.data(), dc, n * 4), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], 1.5f * float(i)) << i;
  // Fewer threads than elements: only the first grid*block are written, as on the GPU.
  ASSERT_EQ(cuMemsetD32_v2(dc, 0, n), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(func("rgpu_vec_add"), 1, 1, 1, 100, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(c.data(), dc, n * 4), CUDA_SUCCESS);
  EXPECT_EQ(c[99], 1.5f * 99);
  EXPECT_EQ(c[100], 0.f);
  for (CUdeviceptr p : {da, db, dc}) cuMemFree_v2(p);
}

TEST_F(FakeImages, AffineRunsFromExtraAndWrongSizesAreRefused) {
  struct Affine {
    float scale;
    double shift;
    int flag;
  };
  struct Params {
    CUdeviceptr x;
    Affine p;
    int n;
  };
  static_assert(offsetof(Params, p) == 8 && offsetof(Params, n) == 32);
  const int n = 64;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float(i);
  CUdeviceptr dx = alloc(n * 4);
  ASSERT_EQ(cuMemcpyHtoD_v2(dx, x.data(), n * 4), CUDA_SUCCESS);
  Params prm{};
  prm.x = dx;
  prm.p = {2.0f, 0.25, 1};
  prm.n = n;
  size_t size = 36;  // the kernel's param_bytes (no tail padding), not sizeof(Params)
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &prm, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CUfunction f = func("rgpu_affine");
  ASSERT_EQ(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  std::vector<float> out(n);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), dx, n * 4), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], float(i) * 2.0f + 1.25f) << i;

  size_t wrong = sizeof(Params);  // 40
  void* bad_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &prm, CU_LAUNCH_PARAM_BUFFER_SIZE, &wrong, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, bad_extra), CUDA_ERROR_INVALID_VALUE);
  void* no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &prm, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, no_size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);

  // cuLaunchKernelEx with kernelParams, on a stream.
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  Affine p{1.0f, -1.0, 0};
  int nn = n;
  void* args[] = {&dx, &p, &nn};
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 64;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = s;
  ASSERT_EQ(cuLaunchKernelEx(&cfg, f, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), dx, n * 4), CUDA_SUCCESS);
  EXPECT_EQ(out[10], 10.f * 2.0f + 1.25f - 1.0f);
  cuStreamDestroy_v2(s);
  cuMemFree_v2(dx);
}

TEST_F(FakeImages, BadDimensionsAreRefused) {
  CUfunction f = func("rgpu_empty");
  EXPECT_EQ(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(FakeImages, DynamicSharedMemoryIsHeldToTheFunctionsLimit) {
  // 48 KiB unless raised with cuFuncSetAttribute or cuKernelSetAttribute (driver 580: a launch
  // past it is INVALID_VALUE, the occupancy calculator finds no block); the fake once let any
  // size up to the device's opt-in maximum through.
  CUfunction f = func("rgpu_empty");
  int limit = 0;
  ASSERT_EQ(cuFuncGetAttribute(&limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  EXPECT_EQ(limit, 48 << 10);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 48 << 10, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, (48 << 10) + 1, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  int blocks = -1;
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 100 << 10), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 0);
  ASSERT_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 100 << 10, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 100 << 10), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(FakeImages, LaunchesAndEventCreateWithoutAContextAreInvalidContextFirst) {
  // Driver 580: with no current context a launch or cuEventCreate is INVALID_CONTEXT whatever
  // the arguments; the fake checked the arguments first (INVALID_VALUE).
  CUfunction f = func("rgpu_empty");
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 0, 1, 1, 32, 1, 1, 0, nullptr, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_CONTEXT);
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, 0xff), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuCtxPushCurrent_v2(popped), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeImages, CooperativeLaunchAboveTheFunctionsSharedLimitIsTooLarge) {
  // Driver 580 on the H200: dynamic shared memory above the function's limit makes a cooperative
  // grid that cannot be resident (COOPERATIVE_LAUNCH_TOO_LARGE), where a plain launch is
  // INVALID_VALUE; the block-size check still comes first.
  CUfunction f = func("rgpu_empty");
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, (48 << 10) + 1, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, (48 << 10) + 1, nullptr, nullptr),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = (48 << 10) + 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  EXPECT_EQ(cuLaunchKernelEx(&cfg, f, nullptr, nullptr), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 1025, 1, 1, (48 << 10) + 1, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 48 << 10, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 100 << 10, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, (100 << 10) + 1, nullptr, nullptr),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(FakeImages, AKernelKeepsItsOwnSharedLimitAfterItsFunctionsIsSet) {
  // Driver 580 on the H200: cuFuncSetAttribute on the function of a kernel (cuKernelGetFunction)
  // changes what launches of it may use, not what cuKernelGetAttribute answers; the fake's
  // kernel followed the function (51200 where the driver keeps 102400).
  std::vector<uint8_t> image = read_file(RGPU_TEST_KERNEL_FATBIN, false);
  CUlibrary lib = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel k = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "rgpu_empty"), CUDA_SUCCESS);
  ASSERT_EQ(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10, k, 0), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  EXPECT_EQ(v, 100 << 10);
  ASSERT_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 50 << 10), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  EXPECT_EQ(v, 50 << 10);
  ASSERT_EQ(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 100 << 10);
  CUfunction kf = reinterpret_cast<CUfunction>(k);
  EXPECT_EQ(cuLaunchKernel(kf, 1, 1, 1, 32, 1, 1, 50 << 10, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(kf, 1, 1, 1, 32, 1, 1, (50 << 10) + 1, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
}

TEST_F(FakeImages, ConstSizeIsTheModulesConstantBank) {
  // Every function of the test image reports the image's 64 bytes of __constant__ memory
  // (rgpu_constant_table[16]), used or not, as driver 580 does; the fake said 0.
  for (const char* name : {"rgpu_empty", "rgpu_fill_u32", "rgpu_vec_add"}) {
    int v = -1;
    EXPECT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, func(name)), CUDA_SUCCESS);
    EXPECT_EQ(v, 64) << name;
  }
}

TEST_F(FakeImages, UnknownKernelIsNotSupported) {
  const char* ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry mystery(.param .u32 x)\n{ ret; }\n";
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, ptx), CUDA_SUCCESS);
  modules_.push_back(m);
  CUfunction f;
  ASSERT_EQ(cuModuleGetFunction(&f, m, "mystery"), CUDA_SUCCESS);
  int x = 1;
  void* args[] = {&x};
  testing::internal::CaptureStderr();
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("kernel mystery has no host implementation"), std::string::npos);
}

TEST_F(FakeImages, BadPointerPoisonsTheContextAtTheNextSynchronize) {
  CUdeviceptr good = alloc(16);
  CUdeviceptr bad = good + 4096;  // past the allocation
  unsigned value = 7;
  unsigned long long n = 4;
  void* args[] = {&bad, &value, &n};
  ASSERT_EQ(cuLaunchKernel(func("rgpu_fill_u32"), 1, 1, 1, 4, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS) << "the error is sticky";
  // Another context is unaffected.
  std::thread([] {
    CUcontext other;
    ASSERT_EQ(cuCtxCreate_v4(&other, nullptr, 0, 0), CUDA_SUCCESS);
    CUdeviceptr q;
    EXPECT_EQ(cuMemAlloc_v2(&q, 16), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
  }).join();
}

TEST_F(FakeImages, FillAndPrintfAndEmptyRun) {
  CUdeviceptr d = alloc(4000);
  unsigned value = 0xfeedu;
  unsigned long long n = 1000;
  void* args[] = {&d, &value, &n};
  ASSERT_EQ(cuLaunchKernel(func("rgpu_fill_u32"), 2, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  std::vector<uint32_t> out(1000);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), d, 4000), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0xfeedu);
  EXPECT_EQ(out[999], 0xfeedu);
  int v = 17;
  void* pargs[] = {&v};
  testing::internal::CaptureStdout();
  ASSERT_EQ(cuLaunchKernel(func("rgpu_printf"), 1, 1, 1, 1, 1, 1, 0, nullptr, pargs, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "rgpu_printf: 17\n");
  auto t0 = Clock::now();
  for (int i = 0; i < 10000; ++i)
    ASSERT_EQ(cuLaunchKernel(func("rgpu_empty"), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  RecordProperty("empty_launch_us", std::to_string(ms_since(t0) * 100));
  cuMemFree_v2(d);
}

// ---------- graphs (graph.cpp, graph_exec.cpp) and JIT links (link.cpp) ----------

TEST_F(FakeImages, GraphRunsNodesInDependencyOrderAndInstancesAreCopies) {
  CUdeviceptr p = alloc(4096), q = alloc(4096);
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  unsigned v = 5;
  unsigned long long n = 1024;
  void* args[] = {&p, &v, &n};
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = func("rgpu_fill_u32");
  k.gridDimX = k.gridDimY = k.gridDimZ = 1;
  k.blockDimX = 128, k.blockDimY = k.blockDimZ = 1;
  k.kernelParams = args;
  CUgraphNode kn = nullptr, cn = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&kn, g, nullptr, 0, &k), CUDA_SUCCESS);
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = p, c.dstDevice = q;
  c.WidthInBytes = 4096, c.Height = c.Depth = 1;
  ASSERT_EQ(cuGraphAddMemcpyNode(&cn, g, &kn, 1, &c, ctx_), CUDA_SUCCESS);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  v = 6;  // the node copied its arguments; the graph changes, the instance does not
  ASSERT_EQ(cuGraphKernelNodeSetParams_v2(kn, &k), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(x, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<uint32_t> out(1024);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), q, 4096), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 5u);
  EXPECT_EQ(out[1023], 5u);
  // A second edge between the same nodes: refused.
  EXPECT_EQ(cuGraphAddDependencies(g, &kn, &cn, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  cuMemFree_v2(p);
  cuMemFree_v2(q);
}

TEST_F(FakeImages, GraphExecUpdateRefusesAnotherTopology) {
  CUgraph a = nullptr, b = nullptr;
  ASSERT_EQ(cuGraphCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphCreate(&b, 0), CUDA_SUCCESS);
  CUgraphNode n1, n2, n3;
  ASSERT_EQ(cuGraphAddEmptyNode(&n1, a, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddEmptyNode(&n2, b, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddEmptyNode(&n3, b, &n2, 1), CUDA_SUCCESS);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, a, 0), CUDA_SUCCESS);
  CUgraphExecUpdateResultInfo info{};
  EXPECT_EQ(cuGraphExecUpdate_v2(x, b, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(b), CUDA_SUCCESS);
}

TEST_F(FakeImages, LinkHandsBackItsOneInputAndLogsBadInput) {
  std::vector<uint8_t> ptx = read_file(RGPU_TEST_KERNEL_PTX, true);
  char info[256] = {}, error[256] = {};
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {info, reinterpret_cast<void*>(sizeof info), error, reinterpret_cast<void*>(sizeof error)};
  CUlinkState st = nullptr;
  ASSERT_EQ(cuLinkCreate_v2(4, opts, vals, &st), CUDA_SUCCESS);
  char junk[] = "not ptx";
  EXPECT_EQ(cuLinkAddData_v2(st, CU_JIT_INPUT_PTX, junk, sizeof junk, "junk", 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_PTX);
  EXPECT_NE(std::string(error).find("cannot link junk"), std::string::npos) << error;
  ASSERT_EQ(cuLinkAddData_v2(st, CU_JIT_INPUT_PTX, ptx.data(), ptx.size(), "k.ptx", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  void* out = nullptr;
  size_t size = 0;
  ASSERT_EQ(cuLinkComplete(st, &out, &size), CUDA_SUCCESS);
  EXPECT_EQ(size, ptx.size());
  EXPECT_EQ(std::string(info), "fakecuda: linked k.ptx");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(vals[1]), std::string(info).size() + 1);
  CUmodule m = nullptr;
  EXPECT_EQ(cuModuleLoadData(&m, out), CUDA_SUCCESS);
  if (m) cuModuleUnload(m);
  EXPECT_EQ(cuLinkDestroy(st), CUDA_SUCCESS);
}

}  // namespace
