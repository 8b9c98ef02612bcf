/* What the CUDA runtime (cudart 13) and libraries need from the driver, as a driver-API program:
 * libraries and kernels (cuLibrary*, cuKernel*) from fatbins with compressed entries, pinned host
 * memory with async copies, unified cuMemcpy, stream-ordered allocation and pools, host callbacks
 * in stream order, occupancy, and (through rgpu only) the refusals of what cannot work across a
 * network. One body, run through rgpu (shim -> server -> fake or real driver) and directly
 * against the real driver on the GPU machine; under rgpu (RGPU_SERVER set) the refused calls must
 * answer CUDA_ERROR_NOT_SUPPORTED, on the real driver they must work.
 * Usage: runtime_needs_test FATBIN [MORE_FATBINS...]   (tests/kernels images) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

/* rgpu_fill_u32(unsigned* p, unsigned value, unsigned long long n) on stream s. */
static CUresult fill(CUfunction f, CUdeviceptr p, unsigned value, unsigned long long n, CUstream s) {
  void* args[] = {&p, &value, &n};
  return cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, s, args, NULL);
}

static int all_equal(const unsigned* p, size_t n, unsigned v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return 0;
  return 1;
}

/* ---------- libraries and kernels ---------- */

static void test_library(const char* path, CUfunction* fill_out, CUlibrary* lib_out) {
  size_t len = 0;
  void* image = read_file(path, &len);
  CHECK(image != NULL, "cannot read %s", path);
  if (!image) return;
  CUlibrary lib = NULL;
  CU(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
  free(image);
  if (!lib) return;

  unsigned count = 0;
  CU(cuLibraryGetKernelCount(&count, lib));
  CHECK(count >= 6, "%s: %u kernels", path, count);
  CUkernel all[16];
  memset(all, 0, sizeof all);
  CU(cuLibraryEnumerateKernels(all, count < 16 ? count : 16, lib));
  int found_fill = 0;
  for (unsigned i = 0; i < count && i < 16; ++i) {
    const char* name = NULL;
    CU(cuKernelGetName(&name, all[i]));
    if (name && strcmp(name, "rgpu_fill_u32") == 0) found_fill = 1;
  }
  CHECK(found_fill, "%s: rgpu_fill_u32 not among the enumerated kernels", path);

  CUkernel kfill = NULL, kadd = NULL, again = NULL, missing = NULL;
  CU(cuLibraryGetKernel(&kfill, lib, "rgpu_fill_u32"));
  CU(cuLibraryGetKernel(&again, lib, "rgpu_fill_u32"));
  CHECK(kfill == again, "the same kernel name gave two handles");
  CU(cuLibraryGetKernel(&kadd, lib, "rgpu_vec_add"));
  CHECK(cuLibraryGetKernel(&missing, lib, "no_such_kernel") == CUDA_ERROR_NOT_FOUND, "a missing kernel was found");
  const char* name = NULL;
  CU(cuKernelGetName(&name, kfill));
  CHECK(name && strcmp(name, "rgpu_fill_u32") == 0, "kernel name '%s'", name ? name : "(null)");

  /* Launch through the CUkernel passed as the CUfunction, as cudart 13 does. */
  enum { N = 1000 };
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, N * sizeof(unsigned)));
  CU(fill((CUfunction)kfill, d, 0xC0FFEEu, N, NULL));
  unsigned* h = calloc(N, sizeof(unsigned));
  CU(cuMemcpyDtoH(h, d, N * sizeof(unsigned)));
  CHECK(all_equal(h, N, 0xC0FFEEu), "%s: launch via the CUkernel handle wrote %#x", path, h[0]);

  /* ... and through cuKernelGetFunction. */
  CUfunction ffill = NULL, fadd = NULL;
  CU(cuKernelGetFunction(&ffill, kfill));
  CU(cuKernelGetFunction(&fadd, kadd));
  CU(fill(ffill, d, 7u, N, NULL));
  CU(cuMemcpyDtoH(h, d, N * sizeof(unsigned)));
  CHECK(all_equal(h, N, 7u), "%s: launch via cuKernelGetFunction wrote %u", path, h[0]);
  CU(cuFuncGetName(&name, ffill));
  CHECK(name && strcmp(name, "rgpu_fill_u32") == 0, "function name '%s'", name ? name : "(null)");

  /* vec_add with the layout of a 4-parameter kernel. */
  CUdeviceptr a = 0, b = 0, c = 0;
  float ha[N], hb[N], hc[N];
  for (int i = 0; i < N; ++i) ha[i] = (float)i, hb[i] = 0.5f * (float)i;
  CU(cuMemAlloc(&a, sizeof ha));
  CU(cuMemAlloc(&b, sizeof hb));
  CU(cuMemAlloc(&c, sizeof hc));
  CU(cuMemcpyHtoD(a, ha, sizeof ha));
  CU(cuMemcpyHtoD(b, hb, sizeof hb));
  int n = N;
  void* args[] = {&a, &b, &c, &n};
  CU(cuLaunchKernel(fadd, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  CU(cuMemcpyDtoH(hc, c, sizeof hc));
  int ok = 1;
  for (int i = 0; i < N; ++i) ok &= hc[i] == 1.5f * (float)i;
  CHECK(ok, "%s: vec_add via cuKernelGetFunction gave %f at 10", path, hc[10]);

  /* The library's module answers cuModuleGetFunction. */
  CUmodule mod = NULL;
  CUfunction fmod = NULL;
  CU(cuLibraryGetModule(&mod, lib));
  CU(cuModuleGetFunction(&fmod, mod, "rgpu_fill_u32"));
  CU(fill(fmod, d, 9u, N, NULL));
  CU(cuMemcpyDtoH(h, d, N * sizeof(unsigned)));
  CHECK(all_equal(h, N, 9u), "%s: launch via cuLibraryGetModule's function wrote %u", path, h[0]);

  /* Attributes and occupancy: forwarded, sensible. */
  int threads = 0, blocks = 0;
  CUdevice dev = 0;
  CU(cuCtxGetDevice(&dev));
  CU(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kfill, dev));
  CHECK(threads >= 128, "kernel max threads %d", threads);
  CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8192, kfill, dev));
  threads = 0;
  CU(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, ffill));
  CHECK(threads >= 128, "function max threads %d", threads);
  CU(cuFuncSetAttribute(ffill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8192));
  CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, ffill, 128, 0));
  CHECK(blocks > 0, "occupancy %d blocks", blocks);
  blocks = 0;
  CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (CUfunction)kfill, 256, 0, 0));
  CHECK(blocks > 0, "occupancy (kernel handle) %d blocks", blocks);
  size_t smem = 0;
  CU(cuOccupancyAvailableDynamicSMemPerBlock(&smem, ffill, 1, 128));
  CHECK(smem > 0, "dynamic shared memory %zu", smem);

  CU(cuMemFree(a));
  CU(cuMemFree(b));
  CU(cuMemFree(c));
  CU(cuMemFree(d));
  free(h);
  if (fill_out && !*fill_out) {
    *fill_out = ffill;
    *lib_out = lib;
  } else {
    CU(cuLibraryUnload(lib));
  }
}

static void test_library_from_file(const char* path) {
  CUlibrary lib = NULL;
  CU(cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0));
  CUkernel k = NULL;
  CU(cuLibraryGetKernel(&k, lib, "rgpu_empty"));
  CU(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  CU(cuCtxSynchronize());
  if (lib) CU(cuLibraryUnload(lib));
}

/* ---------- pinned memory, copies ---------- */

static void test_pinned(void) {
  const size_t n = (9u << 20) + 123; /* more than one bulk frame */
  unsigned char *src = NULL, *dst = NULL;
  CU(cuMemHostAlloc((void**)&src, n, CU_MEMHOSTALLOC_PORTABLE));
  CU(cuMemAllocHost((void**)&dst, n));
  if (!src || !dst) return;
  CHECK(((uintptr_t)src & 4095) == 0, "pinned memory is not page-aligned");
  unsigned flags = 99;
  CU(cuMemHostGetFlags(&flags, src));
  /* The real driver also reports DEVICEMAP (3): with unified addressing every pinned allocation
   * is mapped. rgpu reports what was asked for. */
  CHECK(flags & CU_MEMHOSTALLOC_PORTABLE, "host flags %u", flags);
  fill_pattern(src, n, 3);
  memset(dst, 0, n);
  CUstream s = NULL;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, n));
  CU(cuMemcpyHtoDAsync(d, src, n, s));
  CU(cuMemcpyDtoHAsync(dst, d, n, s));
  CU(cuStreamSynchronize(s));
  CHECK(memcmp(src, dst, n) == 0, "pinned async round trip differs");

  /* Pointer attributes: pinned host memory vs device memory. */
  unsigned type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(src + 10)));
  CHECK(type == CU_MEMORYTYPE_HOST, "pinned memory type %u", type);
  type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 16));
  CHECK(type == CU_MEMORYTYPE_DEVICE, "device memory type %u", type);
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[3] = {&type, &start, &size};
  CU(cuPointerGetAttributes(3, attrs, data, d + 100));
  CHECK(type == CU_MEMORYTYPE_DEVICE && start == d && size >= n, "device range %#llx+%zu",
        (unsigned long long)start, size);

  /* Registered memory behaves like allocated pinned memory. */
  size_t rn = 1 << 20;
  unsigned char* reg = NULL;
  CHECK(posix_memalign((void**)&reg, 4096, rn) == 0, "posix_memalign");
  fill_pattern(reg, rn, 11);
  CU(cuMemHostRegister(reg, rn, CU_MEMHOSTREGISTER_PORTABLE));
  CHECK(cuMemHostRegister(reg, rn, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "registered twice");
  CU(cuMemcpyHtoDAsync(d, reg, rn, s));
  memset(dst, 0, rn);
  CU(cuMemcpyDtoHAsync(dst, d, rn, s));
  CU(cuStreamSynchronize(s));
  CHECK(memcmp(reg, dst, rn) == 0, "registered-memory round trip differs");
  CU(cuMemHostUnregister(reg));
  CHECK(cuMemHostUnregister(reg) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "unregistered twice");
  free(reg);

  /* cuMemcpy with unified addresses, every direction. */
  unsigned char* pageable = malloc(n);
  fill_pattern(pageable, n, 5);
  CUdeviceptr d2 = 0;
  CU(cuMemAlloc(&d2, n));
  CU(cuMemcpy(d, (CUdeviceptr)(uintptr_t)pageable, n));         /* host -> device */
  CU(cuMemcpy(d2, d, n));                                        /* device -> device */
  CU(cuMemcpy((CUdeviceptr)(uintptr_t)dst, d2, n));              /* device -> pinned host */
  CHECK(memcmp(pageable, dst, n) == 0, "cuMemcpy host->device->device->host differs");
  memset(pageable, 0, n);
  CU(cuMemcpyAsync((CUdeviceptr)(uintptr_t)pageable, d2, n, s)); /* device -> pageable host */
  CU(cuStreamSynchronize(s));
  CHECK(memcmp(pageable, dst, n) == 0, "cuMemcpyAsync device->host differs");
  fill_pattern(src, 4096, 77);
  CU(cuMemcpyAsync(d2, (CUdeviceptr)(uintptr_t)src, 4096, s));   /* pinned host -> device */
  CU(cuMemcpyDtoDAsync(d, d2, 4096, s));
  CU(cuMemcpyDtoHAsync(dst, d, 4096, s));
  CU(cuStreamSynchronize(s));
  CHECK(memcmp(src, dst, 4096) == 0, "cuMemcpyAsync host->device + DtoDAsync differs");
  CU(cuMemcpy((CUdeviceptr)(uintptr_t)pageable, (CUdeviceptr)(uintptr_t)src, 4096)); /* host -> host */
  CHECK(memcmp(pageable, src, 4096) == 0, "cuMemcpy host->host differs");
  free(pageable);

  CU(cuMemFree(d));
  CU(cuMemFree(d2));
  CU(cuStreamDestroy(s));
  CU(cuMemFreeHost(src));
  CU(cuMemFreeHost(dst));
}

/* ---------- stream-ordered allocation ---------- */

static void test_stream_ordered(CUfunction ffill) {
  CUstream s = NULL;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 4096 };
  unsigned* h = NULL;
  CU(cuMemAllocHost((void**)&h, N * sizeof(unsigned)));
  if (!h) return;
  CUdeviceptr d = 0;
  CU(cuMemAllocAsync(&d, N * sizeof(unsigned), s));
  CU(fill(ffill, d, 0xABCDu, N, s));
  CU(cuMemcpyDtoHAsync(h, d, N * sizeof(unsigned), s));
  CU(cuMemFreeAsync(d, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(h, N, 0xABCDu), "stream-ordered allocation held %#x", h[0]);

  CUdevice dev = 0;
  CU(cuCtxGetDevice(&dev));
  CUmemoryPool def = NULL;
  CU(cuDeviceGetDefaultMemPool(&def, dev));
  cuuint64_t threshold = 1ull << 20, got = 0;
  CU(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
  CHECK(got == threshold, "release threshold %llu", (unsigned long long)got);
  int reuse = -1;
  CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
  CHECK(reuse == 0 || reuse == 1, "reuse flag %d", reuse);

  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = NULL;
  CU(cuMemPoolCreate(&pool, &props));
  CUdeviceptr p = 0;
  CU(cuMemAllocFromPoolAsync(&p, N * sizeof(unsigned), pool, s));
  CU(fill(ffill, p, 0x5151u, N, s));
  CU(cuMemcpyDtoHAsync(h, p, N * sizeof(unsigned), s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(h, N, 0x5151u), "pool allocation held %#x", h[0]);
  cuuint64_t used = 0;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CHECK(used >= N * sizeof(unsigned), "pool in use %llu", (unsigned long long)used);
  CU(cuMemFreeAsync(p, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemPoolTrimTo(pool, 0));
  CU(cuMemPoolDestroy(pool));
  CU(cuStreamDestroy(s));
  CU(cuMemFreeHost(h));
}

/* ---------- host callbacks ---------- */

struct Probe {
  volatile int ran;
  volatile unsigned seen;        /* pinned[0] when the callback ran */
  volatile unsigned* pinned;
  volatile int order;            /* callbacks bump it: each records its place */
  volatile int place;
  volatile CUresult status;
  CUstream stream;
  volatile CUstream seen_stream;
};

static void CUDA_CB host_fn(void* p) {
  struct Probe* pr = p;
  pr->seen = pr->pinned[0];
  pr->place = ++pr->order;
  usleep(150 * 1000); /* later work on the stream must wait for this */
  pr->ran = 1;
}

static void CUDA_CB stream_cb(CUstream s, CUresult status, void* p) {
  struct Probe* pr = p;
  pr->status = status;
  pr->seen_stream = s;
  pr->place = ++pr->order;
  pr->ran = 1;
}

static void CUDA_CB set_flag(void* p) { *(volatile int*)p = 1; }

static void test_callbacks(CUfunction ffill) {
  CUstream s = NULL;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 256 };
  unsigned* pinned = NULL;
  CU(cuMemAllocHost((void**)&pinned, N * sizeof(unsigned)));
  if (!pinned) return;
  memset(pinned, 0, N * sizeof(unsigned));
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, N * sizeof(unsigned)));

  struct Probe first, second;
  memset(&first, 0, sizeof first);
  memset(&second, 0, sizeof second);
  first.pinned = pinned;
  second.stream = s;
  /* Preceding work: a kernel writes, a copy brings the value into pinned memory. */
  CU(fill(ffill, d, 0x77u, N, s));
  CU(cuMemcpyDtoHAsync(pinned, d, N * sizeof(unsigned), s));
  CU(cuLaunchHostFunc(s, host_fn, &first));
  /* Following work: must not start before the callback returns. */
  CU(fill(ffill, d, 0x88u, N, s));
  CU(cuStreamAddCallback(s, stream_cb, &second, 0));
  double t0 = now_ms();
  CUresult q = cuStreamQuery(s);
  CHECK(q == CUDA_ERROR_NOT_READY || first.ran == 0 || now_ms() - t0 > 100,
        "stream idle while its callback sleeps (query %s)", err_name(q));
  CU(cuStreamSynchronize(s));
  CHECK(first.ran && second.ran, "callbacks ran: %d %d", first.ran, second.ran);
  CHECK(first.seen == 0x77u, "the callback saw %#x, not the value written before it", first.seen);
  CHECK(second.status == CUDA_SUCCESS, "callback status %s", err_name(second.status));
  CHECK(second.seen_stream == s, "callback got another stream");
  unsigned h[N];
  CU(cuMemcpyDtoH(h, d, sizeof h));
  CHECK(all_equal(h, N, 0x88u), "work after the callback wrote %#x", h[0]);

  /* Ordering across two callbacks with a callback-free wait: nobody waits on a reply here, the
   * program only watches a flag the callback sets. */
  volatile int flag = 0;
  CU(cuLaunchHostFunc(s, set_flag, (void*)&flag));
  double until = now_ms() + 10000;
  while (!flag && now_ms() < until) usleep(1000);
  CHECK(flag, "a callback with no thread waiting on the stream never ran");
  CU(cuStreamSynchronize(s));

  /* The legacy default stream takes callbacks too. */
  volatile int flag2 = 0;
  CU(cuLaunchHostFunc(NULL, set_flag, (void*)&flag2));
  CU(cuCtxSynchronize());
  CHECK(flag2, "a callback on the default stream did not run by cuCtxSynchronize");

  CU(cuMemFree(d));
  CU(cuMemFreeHost(pinned));
  CU(cuStreamDestroy(s));
}

/* ---------- refusals ---------- */

static void test_refusals(int through_rgpu) {
  CUdeviceptr d = 0;
  /* Managed memory is mirrored now, no longer refused (tests/e2e/managed_test.c tests it). */
  CUresult rc = cuMemAllocManaged(&d, 4096, CU_MEM_ATTACH_GLOBAL);
  CHECK(rc == CUDA_SUCCESS, "cuMemAllocManaged: %s", err_name(rc));
  if (rc == CUDA_SUCCESS) CU(cuMemFree(d));

  CUdeviceptr dev = 0;
  CU(cuMemAlloc(&dev, 4096));
  CUipcMemHandle ipc;
  rc = cuIpcGetMemHandle(&ipc, dev);
  if (through_rgpu) CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuIpcGetMemHandle: %s", err_name(rc));
  else CHECK(rc == CUDA_SUCCESS, "cuIpcGetMemHandle on the real driver: %s", err_name(rc));
  CU(cuMemFree(dev));

  /* Mapped host memory works through rgpu too (a server copy kept in step; extras_test checks
     that kernels and the host see each other's writes). */
  void* mapped = NULL;
  rc = cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP);
  CHECK(rc == CUDA_SUCCESS, "cuMemHostAlloc(DEVICEMAP): %s", err_name(rc));
  if (rc == CUDA_SUCCESS) CU(cuMemFreeHost(mapped));

  void* pinned = NULL;
  CU(cuMemAllocHost(&pinned, 4096));
  CUdeviceptr dp = 0;
  rc = cuMemHostGetDevicePointer(&dp, pinned, 0);
  if (through_rgpu) CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuMemHostGetDevicePointer: %s", err_name(rc));
  else CHECK(rc == CUDA_SUCCESS, "cuMemHostGetDevicePointer on the real driver: %s", err_name(rc));
  if (pinned) CU(cuMemFreeHost(pinned));

  void* buf = NULL;
  CHECK(posix_memalign(&buf, 4096, 8192) == 0, "posix_memalign");
  rc = cuMemHostRegister(buf, 8192, CU_MEMHOSTREGISTER_DEVICEMAP);
  CHECK(rc == CUDA_SUCCESS, "cuMemHostRegister(DEVICEMAP): %s", err_name(rc));
  if (rc == CUDA_SUCCESS) CU(cuMemHostUnregister(buf));
  free(buf);
  /* A refusal leaves nothing sticky behind. */
  CU(cuCtxSynchronize());
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FATBIN [MORE_FATBINS...] (built from tests/kernels/test_kernels.cu)\n", argv[0]);
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

  CUfunction ffill = NULL;
  CUlibrary keep = NULL;
  for (int i = 1; i < argc; ++i) test_library(argv[i], &ffill, &keep);
  test_library_from_file(argv[1]);
  test_pinned();
  if (ffill) {
    test_stream_ordered(ffill);
    test_callbacks(ffill);
  } else {
    CHECK(0, "no fill kernel: library tests failed");
  }
  test_refusals(through_rgpu);
  if (keep) CU(cuLibraryUnload(keep));
  CU(cuCtxSynchronize());
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "runtime_needs_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("runtime_needs_test: all %d checks passed\n", g_checks);
  return 0;
}
