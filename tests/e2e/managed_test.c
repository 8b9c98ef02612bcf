/* Managed memory (cuMemAllocManaged) through rgpu: the program reads and writes it from the host
 * at the pointer the driver returned, between synchronizing calls, while copies, memsets and
 * kernels use the same pointer as device memory (tests/e2e/test_managed.py runs it).
 *
 * Usage: managed_test [image]     the test kernels (tests/kernels) for the launch checks
 *        managed_test collide     reserves the addresses fakecuda gives managed memory first
 *                                 (0x5c0000000000...), so the client cannot map its copy: the
 *                                 allocation must fail with CUDA_ERROR_NOT_SUPPORTED
 * Prints "managed_test: attribute NAME=V" lines and "managed_test: unmapped after free=B" for the
 * Python side to judge (they differ between rgpu and a local driver), then the check summary. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

enum { N = 1 << 16 }; /* 256 KiB of u32: several pages */

static void* read_image(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* p = malloc((size_t)n);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

static int all_equal(const unsigned* p, size_t from, size_t to, unsigned (*want)(size_t)) {
  for (size_t i = from; i < to; ++i)
    if (p[i] != want(i)) {
      fprintf(stderr, "  [%zu] = %u, want %u\n", i, p[i], want(i));
      return 0;
    }
  return 1;
}
static unsigned iota(size_t i) { return (unsigned)i; }
static unsigned iota3(size_t i) { return (unsigned)(3 * i + 1); }
static unsigned zero(size_t i) { (void)i; return 0; }
static unsigned abc(size_t i) { (void)i; return 0xabcu; }
static unsigned seven(size_t i) { (void)i; return 7; }

static int collide(void) {
  /* fakecuda places managed memory from 0x5c0000000000 up; hold 1 TiB of it here. */
  size_t span = (size_t)1 << 40;
  void* want = (void*)(uintptr_t)0x5c0000000000ull;
  void* r = mmap(want, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(r == want, "could not reserve the managed window");
  CUdeviceptr m = 0;
  CUresult rc = cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL);
  CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocManaged over a taken address returned %s", err_name(rc));
  /* The server freed its allocation again: the session goes on. */
  CUdeviceptr d;
  CU(cuMemAlloc(&d, 4096));
  CU(cuMemsetD8(d, 1, 4096));
  CU(cuCtxSynchronize());
  CU(cuMemFree(d));
  munmap(r, span);
  /* With the addresses free again, the next allocation works. */
  rc = cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL);
  CHECK(rc == CUDA_SUCCESS, "cuMemAllocManaged after the reservation went returned %s", err_name(rc));
  if (rc == CUDA_SUCCESS) {
    ((unsigned*)(uintptr_t)m)[5] = 5;
    CU(cuMemFree(m));
  }
  return 0;
}

int main(int argc, char** argv) {
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));

  if (argc > 1 && strcmp(argv[1], "collide") == 0) {
    collide();
    printf("managed_test: %d checks, %d failed\n", g_checks, g_failures);
    return g_failures != 0;
  }

  static const struct {
    const char* name;
    CUdevice_attribute id;
  } attrs[] = {
      {"MANAGED_MEMORY", CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY},
      {"CONCURRENT_MANAGED_ACCESS", CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS},
      {"PAGEABLE_MEMORY_ACCESS", CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS},
      {"DIRECT_MANAGED_MEM_ACCESS_FROM_HOST", CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; ++i) {
    int v = -1;
    CU(cuDeviceGetAttribute(&v, attrs[i].id, dev));
    printf("managed_test: attribute %s=%d\n", attrs[i].name, v);
  }

  CUdeviceptr m;
  CU(cuMemAllocManaged(&m, N * sizeof(unsigned), CU_MEM_ATTACH_GLOBAL));
  unsigned* h = (unsigned*)(uintptr_t)m;
  CHECK(all_equal(h, 0, N, zero), "fresh managed memory is not zero");

  /* Written from the host, read by a device-to-device copy and a device-to-host copy. */
  for (size_t i = 0; i < N; ++i) h[i] = (unsigned)i;
  CUdeviceptr d;
  CU(cuMemAlloc(&d, N * sizeof(unsigned)));
  CU(cuMemcpyDtoD(d, m, N * sizeof(unsigned)));
  unsigned* back = malloc(N * sizeof(unsigned));
  CU(cuMemcpyDtoH(back, d, N * sizeof(unsigned)));
  CHECK(all_equal(back, 0, N, iota), "host writes to managed memory did not reach the device (DtoD)");
  memset(back, 0, N * sizeof(unsigned));
  h[100] = 100; /* unchanged value, rewritten */
  CU(cuMemcpyDtoH(back, m, N * sizeof(unsigned)));
  CHECK(all_equal(back, 0, N, iota), "cuMemcpyDtoH from managed memory");

  /* Host to device into managed memory, seen by the host after the copy returns. */
  unsigned* src = malloc(N * sizeof(unsigned));
  for (size_t i = 0; i < N; ++i) src[i] = 3 * (unsigned)i + 1;
  CU(cuMemcpyHtoD(m + 4096, src + 1024, (N - 1024) * sizeof(unsigned)));
  CHECK(all_equal(h, 0, 1024, iota), "the bytes before a copy into managed memory changed");
  CHECK(all_equal(h, 1024, N, iota3), "cuMemcpyHtoD into managed memory not seen by the host");

  /* Device to device into managed memory. */
  CU(cuMemcpyHtoD(d, src, N * sizeof(unsigned)));
  CU(cuMemsetD32(m, 0, N));
  CU(cuMemcpyDtoD(m, d, N * sizeof(unsigned)));
  CU(cuCtxSynchronize());
  CHECK(all_equal(h, 0, N, iota3), "cuMemcpyDtoD into managed memory not seen by the host");

  /* Memset, async on a stream, then a synchronize. */
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuMemsetD32Async(m, 0xabc, N, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(h, 0, N, abc), "cuMemsetD32Async on managed memory not seen by the host");

  /* Advice, prefetch and attach are accepted. */
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CU(cuMemAdvise(m, N * sizeof(unsigned), CU_MEM_ADVISE_SET_PREFERRED_LOCATION, loc));
  CU(cuMemPrefetchAsync(m, N * sizeof(unsigned), loc, 0, s));
  CU(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(h, 0, N, abc), "prefetch changed managed memory");

  /* Kernels read and write it through the same pointer. */
  if (argc > 1) {
    void* image = read_image(argv[1]);
    CHECK(image != NULL, "cannot read %s", argv[1]);
    CUmodule mod;
    CUfunction fill;
    CU(cuModuleLoadData(&mod, image));
    CU(cuModuleGetFunction(&fill, mod, "rgpu_fill_u32"));
    for (size_t i = 0; i < N; ++i) h[i] = (unsigned)i;
    unsigned value = 7;
    unsigned long long n = N / 2;
    void* params[] = {&m, &value, &n};
    CU(cuLaunchKernel(fill, 64, 1, 1, 128, 1, 1, 0, s, params, NULL));
    CU(cuStreamSynchronize(s));
    CU(cuCtxSynchronize());
    CHECK(all_equal(h, 0, N / 2, seven), "a kernel's writes to managed memory not seen by the host");
    CHECK(all_equal(h, N / 2, N, iota), "the host's writes to managed memory lost around a kernel");
    CU(cuModuleUnload(mod));
    free(image);
  }

  /* Pointer attributes. */
  unsigned is_managed = 0;
  CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 8));
  CHECK(is_managed == 1, "IS_MANAGED = %u", is_managed);
  CUdeviceptr start = 0;
  size_t size = 0;
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, m + 8));
  CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, m + 8));
  /* The size asked for, as the driver reports it (rgpu-server holds whole 2 MiB granules for it,
     server/mapped_memory.cpp, and the shim answers the program's size). */
  CHECK(start == m && size == N * sizeof(unsigned), "range %llx+%zu", (unsigned long long)start, size);
  CUpointer_attribute range_attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  CUdeviceptr start2 = 0;
  size_t size2 = 0;
  void* range_data[2] = {&start2, &size2};
  CU(cuPointerGetAttributes(2, range_attrs, range_data, m + 100));
  CHECK(start2 == m && size2 == N * sizeof(unsigned), "cuPointerGetAttributes range %llx+%zu",
        (unsigned long long)start2, size2);
  /* The host pointer is the address itself, usable here because rgpu mirrors it (a managed address
     it does not mirror is refused by name instead of handed out to crash the program). */
  void* host_ptr = NULL;
  CU(cuPointerGetAttribute(&host_ptr, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 8));
  CHECK(host_ptr == (void*)(uintptr_t)(m + 8), "HOST_POINTER %p", host_ptr);
  CUpointer_attribute which[2] = {CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
  unsigned managed2 = 0;
  CUdeviceptr dp = 0;
  void* data[2] = {&managed2, &dp};
  CU(cuPointerGetAttributes(2, which, data, m));
  CHECK(managed2 == 1 && dp == m, "cuPointerGetAttributes: managed %u, device pointer %llx", managed2,
        (unsigned long long)dp);

  /* Free: the copy here goes away too (through rgpu the address is free again here after the
   * next call that waits for the server). Then allocate and free a few times: the driver may hand
   * the same address out again. */
  CU(cuMemFree(m));
  CU(cuCtxSynchronize());
  void* probe = mmap((void*)(uintptr_t)m, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  printf("managed_test: unmapped after free=%d\n", probe == (void*)(uintptr_t)m);
  if (probe != MAP_FAILED) munmap(probe, 4096);
  for (int round = 0; round < 8; ++round) {
    CUdeviceptr r;
    size_t bytes = (size_t)(round + 1) * 12345;
    CU(cuMemAllocManaged(&r, bytes, CU_MEM_ATTACH_GLOBAL));
    unsigned char* p = (unsigned char*)(uintptr_t)r;
    int fresh = 1;
    for (size_t i = 0; i < bytes; ++i) fresh &= p[i] == 0;
    CHECK(fresh, "round %d: fresh managed memory is not zero", round);
    memset(p, round + 1, bytes);
    unsigned char last = 0;
    CU(cuMemcpyDtoH(&last, r + bytes - 1, 1));
    CHECK(last == round + 1, "round %d: last byte %u", round, last);
    CU(cuMemFree(r));
  }

  CU(cuMemFree(d));
  CU(cuStreamDestroy(s));
  free(back);
  free(src);
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("managed_test: %d checks, %d failed\n", g_checks, g_failures);
  if (g_failures == 0) printf("managed_test: all passed\n");
  return g_failures != 0;
}
