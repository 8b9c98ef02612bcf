/* Occupancy with a block-size -> shared-memory function, virtual memory management and stream
 * attributes, as NVIDIA's samples (vectorAddMMAP, cudaCompressibleMemory, simpleOccupancy) and
 * PyTorch's expandable segments use them. One body, run through rgpu (shim -> server -> fake or
 * real driver) and directly against the real driver; every check holds on both. A driver without
 * cuMemCreate makes the VMM part say it skipped (tests/e2e/test_extras.py holds the fake to
 * having it). Under rgpu (RGPU_SERVER set) shareable handles must be refused. Cooperative
 * launches: the most blocks that fit at once run, one more is refused.
 * Usage: extras_test FATBIN   (tests/kernels image) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int is_pow2(size_t v) { return v && !(v & (v - 1)); }

/* ---------- occupancy ---------- */

static int g_b2d_calls;
static size_t smem_16_per_thread(int block) {
  ++g_b2d_calls;
  return (size_t)block * 16;
}
/* Blocks above 256 threads would need more shared memory than any SM has: only the table of
 * per-size values (not one value for all) lets the driver see that. */
static size_t impossible_above_256(int block) {
  ++g_b2d_calls;
  return block > 256 ? ((size_t)1 << 30) : 0;
}

static int good_block(int b, int limit) { return b > 0 && b % 32 == 0 && b <= limit; }

static void test_occupancy(CUfunction f) {
  int grid = 0, block = 0;
  CU(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
  CHECK(good_block(block, 1024) && grid > 0, "no callback: grid %d block %d", grid, block);

  grid = block = 0;
  CU(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 4096, 128));
  CHECK(good_block(block, 128) && grid > 0, "limit 128: grid %d block %d", grid, block);

  grid = block = 0;
  g_b2d_calls = 0;
  CU(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_16_per_thread, 0, 0));
  CHECK(good_block(block, 1024) && grid > 0, "callback: grid %d block %d", grid, block);
  CHECK(g_b2d_calls > 0, "the block-size function was never called");

  grid = block = 0;
  g_b2d_calls = 0;
  CU(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, impossible_above_256, 0, 0));
  CHECK(good_block(block, 256) && grid > 0, "per-size callback: grid %d block %d (want <= 256)", grid, block);

  grid = block = 0;
  CU(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, impossible_above_256, 0, 512,
                                               CU_OCCUPANCY_DEFAULT));
  CHECK(good_block(block, 256) && grid > 0, "with flags: grid %d block %d", grid, block);

  CHECK(cuOccupancyMaxPotentialBlockSize(NULL, &block, f, NULL, 0, 0) != CUDA_SUCCESS, "NULL minGridSize accepted");
}

/* ---------- cooperative launches ---------- */

static void test_cooperative(CUfunction fill, CUdevice dev) {
  int per_sm = 0, sms = 0, coop = 0;
  CU(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
  CHECK(coop == 1, "cooperative launch attribute %d", coop);
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fill, 256, 0));
  unsigned most = (unsigned)(per_sm * sms);
  CHECK(most > 0, "no block fits: %d per SM, %d SMs", per_sm, sms);
  const unsigned long long n = 1 << 20;
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, n * 4));
  unsigned value = 0xc0000001u;
  void* args[] = {&p, &value, (void*)&n};
  CU(cuLaunchCooperativeKernel(fill, most, 1, 1, 256, 1, 1, 0, NULL, args));
  CU(cuCtxSynchronize());
  unsigned* host = malloc(n * 4);
  CU(cuMemcpyDtoH(host, p, n * 4));
  CHECK(host[0] == value && host[n - 1] == value, "cooperative fill wrote %#x ... %#x", host[0], host[n - 1]);
  /* One block more than fits at once. Through rgpu a launch is one-way: its error comes with the
   * next call that waits. */
  CUresult rc = cuLaunchCooperativeKernel(fill, most + 1, 1, 1, 256, 1, 1, 0, NULL, args);
  if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
  CHECK(rc == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "%u blocks: %s", most + 1, err_name(rc));
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = most + 1;
  cfg.gridDimY = cfg.gridDimZ = cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.blockDimX = 256;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  rc = cuLaunchKernelEx(&cfg, fill, args, NULL);
  if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
  CHECK(rc == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cuLaunchKernelEx cooperative, %u blocks: %s", most + 1,
        err_name(rc));
  cfg.gridDimX = most;
  value = 0xc0000002u;
  CU(cuLaunchKernelEx(&cfg, fill, args, NULL));
  CU(cuMemcpyDtoH(host, p, 4));
  CHECK(host[0] == value, "cuLaunchKernelEx cooperative wrote %#x", host[0]);
  free(host);
  CU(cuMemFree(p));
}

/* ---------- virtual memory management ---------- */

static void test_vmm(CUdevice dev, int through_rgpu) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gmin = 0, grec = 0;
  CU(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CHECK(is_pow2(gmin) && is_pow2(grec) && grec >= gmin, "granularity min %zu recommended %zu", gmin, grec);
  if (through_rgpu) {
    CUmemAllocationProp bad = prop;
    bad.win32HandleMetaData = &bad;
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_ERROR_INVALID_VALUE,
          "a Windows-only pointer was sent");
  }
  if (!gmin) return;

  size_t size = 2 * gmin;
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = cuMemCreate(&h, size, &prop, 0);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) {
    printf("extras_test: VMM mapping skipped: this driver has no cuMemCreate\n");
    return;
  }
  CHECK(rc == CUDA_SUCCESS, "cuMemCreate returned %s", err_name(rc));
  if (rc != CUDA_SUCCESS) return;

  CUmemAllocationProp got;
  memset(&got, 0xff, sizeof got);
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  CHECK(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            got.location.id == dev && got.win32HandleMetaData == NULL,
        "properties: type %d location %d/%d", (int)got.type, (int)got.location.type, got.location.id);

  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, size, 0, 0, 0));
  CU(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, size, &access, 1));
  unsigned long long flags = 0;
  CU(cuMemGetAccess(&flags, &prop.location, va));
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access flags %llu", flags);

  CU(cuMemsetD32(va, 0x12345678u, size / 4));
  unsigned* host = malloc(size);
  CU(cuMemcpyDtoH(host, va, size));
  CHECK(host[0] == 0x12345678u && host[size / 4 - 1] == 0x12345678u, "mapped memory reads back %#x", host[0]);
  free(host);

  CUmemGenericAllocationHandle again = 0;
  CU(cuMemRetainAllocationHandle(&again, (void*)(uintptr_t)(va + gmin)));
  CHECK(again == h, "retained handle %llu, created %llu", (unsigned long long)again, (unsigned long long)h);
  if (again) CU(cuMemRelease(again));

  if (through_rgpu) {
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
              CUDA_ERROR_NOT_SUPPORTED,
          "a shareable handle was exported");
  }

  CU(cuMemUnmap(va, size));
  CU(cuMemRelease(h));
  CU(cuMemAddressFree(va, size));
}

static void test_shareable_refused(void) {
  int fd = -1;
  CHECK(cuMemExportToShareableHandle(&fd, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_ERROR_NOT_SUPPORTED,
        "cuMemExportToShareableHandle not refused");
  CUmemGenericAllocationHandle h = 0;
  CHECK(cuMemImportFromShareableHandle(&h, (void*)(intptr_t)3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
            CUDA_ERROR_NOT_SUPPORTED,
        "cuMemImportFromShareableHandle not refused");
}

/* ---------- stream attributes ---------- */

static void test_stream_attributes(int through_rgpu) {
  int least = 0, greatest = 0;
  CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  CUstream s = NULL;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUstreamAttrValue v;
  memset(&v, 0, sizeof v);
  v.priority = greatest;
  CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
  memset(&v, 0x55, sizeof v);
  CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
  CHECK(v.priority == greatest, "priority attribute %d, set %d", v.priority, greatest);
  int prio = 1;
  CU(cuStreamGetPriority(s, &prio));
  CHECK(prio == greatest, "cuStreamGetPriority %d after the attribute set %d", prio, greatest);

  memset(&v, 0, sizeof v);
  v.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
  CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
  memset(&v, 0, sizeof v);
  CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
  CHECK(v.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC, "sync policy %d", (int)v.syncPolicy);

  if (through_rgpu) {
    CHECK(cuStreamGetAttribute(s, (CUstreamAttrID)9999, &v) == CUDA_ERROR_INVALID_VALUE, "unknown id accepted");
    CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &v) == CUDA_ERROR_INVALID_VALUE,
          "a launch-only attribute was accepted for a stream");
  }
  CU(cuStreamSynchronize(s));
  CU(cuStreamDestroy(s));
}


/* ---------- TMA tensor maps ---------- */

static int map_is_zero(const CUtensorMap* m) {
  const unsigned char* b = (const unsigned char*)m;
  for (size_t i = 0; i < sizeof *m; ++i)
    if (b[i]) return 0;
  return 1;
}

/* A 2D float tile over device memory, as CUTLASS/cuBLAS kernels on sm_90 build them; the map the
   driver encodes must come back whole, and invalid arguments must be refused, not crash. */
static void test_tensor_map(void) {
  CUdeviceptr buf = 0;
  CU(cuMemAlloc(&buf, 256 * 256 * sizeof(float)));
  cuuint64_t dims[2] = {256, 256};
  cuuint64_t strides[1] = {256 * sizeof(float)};
  cuuint32_t box[2] = {64, 64};
  cuuint32_t elem[2] = {1, 1};
  CUtensorMap map;
  memset(&map, 0, sizeof map);
  CU(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void*)buf, dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  CHECK(!map_is_zero(&map), "cuTensorMapEncodeTiled left the map all zero");
  CUtensorMap moved = map;
  CU(cuTensorMapReplaceAddress(&moved, (void*)(buf + 1024)));
  CHECK(memcmp(&moved, &map, sizeof map) != 0, "cuTensorMapReplaceAddress changed nothing");
  CU(cuTensorMapReplaceAddress(&moved, (void*)buf));
  CHECK(memcmp(&moved, &map, sizeof map) == 0, "replacing the address back does not give the first map");
  CHECK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 9, (void*)buf, dims, strides, box, elem,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
            CUDA_ERROR_INVALID_VALUE,
        "rank 9 accepted");
  CU(cuMemFree(buf));
}

/* ---------- mapped host memory (DEVICEMAP) ---------- */

/* A kernel writes host memory through its mapped device pointer and through the host pointer
   itself (unified addressing); the host sees the values once a synchronizing call returns; the
   host's own writes reach the kernel. Through rgpu the memory has a server copy kept in step at
   call boundaries (client/mapped_memory.h). */
static void test_mapped_host_memory(CUmodule mod) {
  CUfunction fill = NULL, vadd = NULL;
  CU(cuModuleGetFunction(&fill, mod, "rgpu_fill_u32"));
  CU(cuModuleGetFunction(&vadd, mod, "rgpu_vec_add"));
  if (!fill || !vadd) return;
  enum { N = 3000 }; /* a little under three pages of u32 */
  unsigned* h = NULL;
  CU(cuMemHostAlloc((void**)&h, N * sizeof(unsigned), CU_MEMHOSTALLOC_DEVICEMAP));
  if (!h) return;
  unsigned flags = 0;
  CU(cuMemHostGetFlags(&flags, h));
  CHECK(flags & CU_MEMHOSTALLOC_DEVICEMAP, "flags 0x%x lack DEVICEMAP", flags);
  CUdeviceptr d = 0;
  CU(cuMemHostGetDevicePointer(&d, h, 0));
  CHECK(d != 0, "no device pointer");
  CUdeviceptr d_mid = 0;
  CU(cuMemHostGetDevicePointer(&d_mid, h + 1000, 0));
  CHECK(d_mid == d + 1000 * sizeof(unsigned), "device pointer of an inner address is off");

  unsigned value = 0xC0FFEEu;
  unsigned long long n = N;
  void* args[] = {&d, &value, &n};
  CU(cuLaunchKernel(fill, 4, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
  CU(cuCtxSynchronize());
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += h[i] != value;
  CHECK(bad == 0, "%d of %d values written by the kernel did not reach the host", bad, N);

  /* The host's writes reach the kernel: c = a + b with a, b, c all in mapped memory. */
  float* f = NULL;
  CU(cuMemHostAlloc((void**)&f, 3 * 1024 * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  if (f) {
    for (int i = 0; i < 1024; ++i) {
      f[i] = (float)i;
      f[1024 + i] = 0.5f * (float)i;
    }
    CUdeviceptr df = 0;
    CU(cuMemHostGetDevicePointer(&df, f, 0));
    CUdeviceptr a = df, b = df + 1024 * sizeof(float), c = df + 2048 * sizeof(float);
    int cnt = 1024;
    void* vargs[] = {&a, &b, &c, &cnt};
    CU(cuLaunchKernel(vadd, 8, 1, 1, 128, 1, 1, 0, NULL, vargs, NULL));
    CU(cuCtxSynchronize());
    bad = 0;
    for (int i = 0; i < 1024; ++i) bad += f[2048 + i] != 1.5f * (float)i;
    CHECK(bad == 0, "%d sums wrong: the kernel did not see the host's values", bad);
    /* Again after the host changes its inputs. */
    f[7] = 100.0f;
    CU(cuLaunchKernel(vadd, 8, 1, 1, 128, 1, 1, 0, NULL, vargs, NULL));
    CU(cuCtxSynchronize());
    CHECK(f[2048 + 7] == 103.5f, "after a host write: %f, want 103.5", f[2048 + 7]);
    CU(cuMemFreeHost(f));
  }

  /* Host memory registered with DEVICEMAP. */
  unsigned* reg = NULL;
  if (posix_memalign((void**)&reg, 4096, 8192) == 0) {
    memset(reg, 0, 8192);
    CU(cuMemHostRegister(reg, 8192, CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr dr = 0;
    CU(cuMemHostGetDevicePointer(&dr, reg, 0));
    unsigned v2 = 77;
    unsigned long long n2 = 2048;
    void* rargs[] = {&dr, &v2, &n2};
    CU(cuLaunchKernel(fill, 2, 1, 1, 256, 1, 1, 0, NULL, rargs, NULL));
    CU(cuCtxSynchronize());
    CHECK(reg[0] == 77 && reg[2047] == 77, "registered mapped memory: %u %u", reg[0], reg[2047]);
    CU(cuMemHostUnregister(reg));
    free(reg);
  }
  CU(cuMemFreeHost(h));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FATBIN (built from tests/kernels/test_kernels.cu)\n", argv[0]);
    return 2;
  }
  int through_rgpu = getenv("RGPU_SERVER") != NULL;
  CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed: %s\n", err_name(rc));
    return 1;
  }
  CUdevice dev;
  CUcontext primary;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&primary, dev));
  CU(cuCtxSetCurrent(primary));

  size_t len = 0;
  void* image = read_file(argv[1], &len);
  CHECK(image != NULL, "cannot read %s", argv[1]);
  CUmodule mod = NULL;
  CUfunction f = NULL;
  if (image) {
    CU(cuModuleLoadData(&mod, image));
    free(image);
  }
  if (mod) CU(cuModuleGetFunction(&f, mod, "rgpu_vec_add"));
  if (f) test_occupancy(f);
  else CHECK(0, "no kernel: occupancy not tested");
  CUfunction fill = NULL;
  if (mod) CU(cuModuleGetFunction(&fill, mod, "rgpu_fill_u32"));
  if (fill) test_cooperative(fill, dev);
  test_vmm(dev, through_rgpu);
  if (through_rgpu) test_shareable_refused();
  test_stream_attributes(through_rgpu);
  test_tensor_map();
  if (mod) test_mapped_host_memory(mod);

  if (mod) CU(cuModuleUnload(mod));
  CU(cuCtxSynchronize());
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "extras_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("extras_test: all %d checks passed\n", g_checks);
  return 0;
}
