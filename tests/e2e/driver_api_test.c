/* The end-to-end driver-API program: one body, run through rgpu (shim -> server -> fake or real
 * driver) and directly against the real driver on the GPU machine. Plain C against cuda.h, as a
 * user's program would be. Usage: driver_api_test IMAGE   (a cubin/fatbin with tests/kernels)
 *
 * Asynchronous errors: rgpu reports the failure of a call that returns nothing (cuMemFree,
 * launches) at the next call that waits, as the real driver does for work that fails on the
 * device. Checks of such failures therefore accept the error from the call or from the next
 * synchronize (expect_error_now_or_at_sync). */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static void expect_error_now_or_at_sync(CUresult now, const char* what) {
  CUresult later = cuCtxSynchronize();
  CHECK(now != CUDA_SUCCESS || later != CUDA_SUCCESS, "%s was accepted (call: %s, next sync: %s)", what,
        err_name(now), err_name(later));
  /* The sticky state must not outlive the report. */
  CU(cuCtxSynchronize());
}

static void test_device_queries(CUdevice* dev) {
  int version = 0, count = 0;
  CU(cuDriverGetVersion(&version));
  CHECK(version >= 12000, "driver version %d", version);
  CU(cuDeviceGetCount(&count));
  CHECK(count >= 1, "device count %d", count);
  CU(cuDeviceGet(dev, 0));
  CHECK(cuDeviceGet(dev, count) == CUDA_ERROR_INVALID_DEVICE, "device %d past the end accepted", count);
  CU(cuDeviceGet(dev, 0));
  char name[256] = {0};
  CU(cuDeviceGetName(name, sizeof name, *dev));
  CHECK(strlen(name) > 0, "empty device name");
  CUuuid uuid;
  memset(&uuid, 0, sizeof uuid);
  CU(cuDeviceGetUuid(&uuid, *dev));
  int nonzero = 0;
  for (int i = 0; i < 16; ++i) nonzero |= uuid.bytes[i];
  CHECK(nonzero, "all-zero UUID");
  size_t total = 0;
  CU(cuDeviceTotalMem(&total, *dev));
  CHECK(total > (1ull << 30), "total memory %zu", total);
  int major = 0, minor = 0, sms = 0, warp = 0, threads = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev));
  CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *dev));
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, *dev));
  CU(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, *dev));
  CU(cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, *dev));
  CHECK(major >= 7 && sms > 0 && warp == 32 && threads >= 1024, "attributes cc %d.%d sms %d warp %d threads %d",
        major, minor, sms, warp, threads);
  int bogus = 0;
  CHECK(cuDeviceGetAttribute(&bogus, (CUdevice_attribute)100000, *dev) == CUDA_ERROR_INVALID_VALUE,
        "an attribute past the end was accepted");
  char bus[32] = {0};
  CU(cuDeviceGetPCIBusId(bus, sizeof bus, *dev));
  CHECK(strchr(bus, ':') != NULL, "PCI bus id '%s'", bus);
  printf("device 0: %s, cc %d.%d, %d SMs, %zu MiB, %s, driver %d\n", name, major, minor, sms, total >> 20, bus,
         version);
}

static void test_contexts(CUdevice dev, CUcontext* primary) {
  CU(cuDevicePrimaryCtxRetain(primary, dev));
  CU(cuCtxSetCurrent(*primary));
  CUcontext cur = NULL;
  CU(cuCtxGetCurrent(&cur));
  CHECK(cur == *primary, "current context is not the primary one");
  CUdevice d = -1;
  CU(cuCtxGetDevice(&d));
  CHECK(d == dev, "context device %d", d);
  unsigned flags = 0;
  int active = 0;
  CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  CHECK(active == 1, "primary context not active");

  CUcontext own = NULL;
  CU(cuCtxCreate(&own, NULL, 0, dev));
  CU(cuCtxGetCurrent(&cur));
  CHECK(cur == own && own != *primary, "a created context is not current");
  CUcontext popped = NULL;
  CU(cuCtxPopCurrent(&popped));
  CHECK(popped == own, "popped the wrong context");
  CU(cuCtxPushCurrent(own));
  CU(cuCtxPopCurrent(&popped));
  CU(cuCtxDestroy(own));
  CU(cuCtxSetCurrent(*primary));
  CU(cuCtxSynchronize());
}

static void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static void test_memory(void) {
  const size_t sizes[] = {1, 3, 4097, (1u << 20) + 13, (37u << 20) + 1};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
    size_t n = sizes[k];
    unsigned char* src = malloc(n);
    unsigned char* back = malloc(n);
    fill_pattern(src, n, (unsigned)k);
    memset(back, 0xEE, n);
    CUdeviceptr d = 0, d2 = 0;
    CU(cuMemAlloc(&d, n));
    CU(cuMemAlloc(&d2, n));
    CU(cuMemcpyHtoD(d, src, n));
    CU(cuMemcpyDtoD(d2, d, n));
    CU(cuMemcpyDtoH(back, d2, n));
    CHECK(memcmp(src, back, n) == 0, "round trip of %zu bytes differs", n);
    CU(cuMemsetD8(d, 0x5A, n));
    CU(cuMemcpyDtoH(back, d, n));
    int ok = 1;
    for (size_t i = 0; i < n; ++i) ok &= back[i] == 0x5A;
    CHECK(ok, "memsetD8 of %zu bytes", n);
    CU(cuMemFree(d));
    CU(cuMemFree(d2));
    free(src);
    free(back);
  }
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, 4096));
  CU(cuMemsetD32(d, 0xCAFEF00Du, 1024));
  unsigned words[1024];
  CU(cuMemcpyDtoH(words, d, sizeof words));
  CHECK(words[0] == 0xCAFEF00Du && words[1023] == 0xCAFEF00Du, "memsetD32 got %x", words[0]);
  size_t free_b = 0, total_b = 0;
  CU(cuMemGetInfo(&free_b, &total_b));
  CHECK(free_b > 0 && free_b <= total_b, "mem info %zu / %zu", free_b, total_b);

  /* Bad pointers are refused, never written through. */
  unsigned char byte = 1;
  CHECK(cuMemcpyHtoD((CUdeviceptr)0x10, &byte, 1) != CUDA_SUCCESS, "copy to a bad device pointer accepted");
  CU(cuCtxSynchronize());
  unsigned char far[64];
  CHECK(cuMemcpyDtoH(far, d + (1ull << 40), sizeof far) != CUDA_SUCCESS, "copy from unmapped device memory accepted");
  CU(cuCtxSynchronize());
  expect_error_now_or_at_sync(cuMemFree((CUdeviceptr)0x10), "cuMemFree of a bad pointer");
  CU(cuMemFree(d));
}

static void test_streams_events(void) {
  const size_t n = 1 << 20;
  CUstream s1, s2;
  CUevent start, stop, mid;
  CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&s2, 0));
  CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&mid, CU_EVENT_DISABLE_TIMING));
  unsigned char* src = malloc(n);
  unsigned char* back = malloc(n);
  fill_pattern(src, n, 99);
  CUdeviceptr d;
  CU(cuMemAlloc(&d, n));
  CU(cuEventRecord(start, s1));
  CU(cuMemcpyHtoDAsync(d, src, n, s1));
  CU(cuMemsetD8Async(d, 0x11, 16, s1));
  CU(cuEventRecord(mid, s1));
  CU(cuStreamWaitEvent(s2, mid, 0));
  CU(cuMemcpyDtoHAsync(back, d, n, s2));
  CU(cuEventRecord(stop, s2));
  CU(cuEventSynchronize(stop));
  CU(cuStreamSynchronize(s2));
  CHECK(back[0] == 0x11 && back[15] == 0x11 && memcmp(back + 16, src + 16, n - 16) == 0,
        "stream-ordered copy, memset, copy back differ");
  CU(cuEventQuery(stop));
  CU(cuStreamQuery(s1));
  /* cuBLAS asks this before every launch. */
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const CUgraphNode* deps = (const CUgraphNode*)1;
  size_t ndeps = 99;
  CU(cuStreamGetCaptureInfo(s1, &capturing, NULL, NULL, &deps, NULL, &ndeps));
  /* The dependency outputs are only meaningful while capturing (the real driver leaves them). */
  CHECK(capturing == CU_STREAM_CAPTURE_STATUS_NONE, "capture info: status %d", (int)capturing);
  float ms = -1;
  CU(cuEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0, "elapsed time %f", ms);
  CU(cuMemFree(d));
  CU(cuEventDestroy(start));
  CU(cuEventDestroy(stop));
  CU(cuEventDestroy(mid));
  CU(cuStreamDestroy(s1));
  CU(cuStreamDestroy(s2));
  free(src);
  free(back);
}

struct Affine {
  float scale;
  double shift;
  int flag;
};

static void test_modules_and_launches(const char* image_path, CUmodule* out_module) {
  size_t len = 0;
  void* image = read_file(image_path, &len);
  CHECK(image != NULL, "cannot read %s", image_path);
  if (!image) return;
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image));
  *out_module = mod;
  CUfunction add, affine, missing;
  CU(cuModuleGetFunction(&add, mod, "rgpu_vec_add"));
  CU(cuModuleGetFunction(&affine, mod, "rgpu_affine"));
  CHECK(cuModuleGetFunction(&missing, mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND, "unknown kernel found");

  enum { N = 1000 };
  float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i;
  }
  CUdeviceptr da, db, dc;
  CU(cuMemAlloc(&da, sizeof a));
  CU(cuMemAlloc(&db, sizeof b));
  CU(cuMemAlloc(&dc, sizeof c));
  CU(cuMemcpyHtoD(da, a, sizeof a));
  CU(cuMemcpyHtoD(db, b, sizeof b));
  int n = N;
  void* params[] = {&da, &db, &dc, &n};
  CU(cuLaunchKernel(add, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
  CU(cuMemcpyDtoH(c, dc, sizeof c));
  int ok = 1;
  for (int i = 0; i < N; ++i) ok &= c[i] == 1.5f * (float)i;
  CHECK(ok, "vec_add via kernelParams: c[10]=%f", c[10]);

  /* A struct parameter with internal padding (tests/kernels: offsets 0, 8, 32). */
  struct Affine p = {2.0f, 0.25, 1};
  void* aparams[] = {&dc, &p, &n};
  CU(cuLaunchKernel(affine, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, aparams, NULL));
  CU(cuMemcpyDtoH(c, dc, sizeof c));
  ok = 1;
  for (int i = 0; i < N; ++i) ok &= c[i] == 1.5f * (float)i * 2.0f + 0.25f + 1.0f;
  CHECK(ok, "affine with a struct parameter: c[10]=%f", c[10]);

  /* The same add through `extra`, and through cuLaunchKernelEx. */
  struct {
    CUdeviceptr a, b, c;
    int n;
  } packed = {da, db, dc, N};
  size_t packed_size = 28;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  CU(cuMemsetD8(dc, 0, sizeof c));
  CU(cuLaunchKernel(add, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
  CU(cuMemcpyDtoH(c, dc, sizeof c));
  CHECK(c[N - 1] == 1.5f * (float)(N - 1), "vec_add via extra: c[last]=%f", c[N - 1]);

  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = (N + 127) / 128;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  CU(cuMemsetD8(dc, 0, sizeof c));
  CU(cuLaunchKernelEx(&cfg, add, params, NULL));
  CU(cuMemcpyDtoH(c, dc, sizeof c));
  CHECK(c[7] == 1.5f * 7.0f, "vec_add via cuLaunchKernelEx: c[7]=%f", c[7]);

  size_t off = 0, size = 0;
  CU(cuFuncGetParamInfo(affine, 2, &off, &size));
  CHECK(off == 32 && size == 4, "param info of affine #2: offset %zu size %zu", off, size);

  /* Wrong arguments are refused: both argument forms at once (the driver's documented rule). */
  expect_error_now_or_at_sync(cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, NULL, params, extra),
                              "a launch with both kernelParams and extra");
  /* An `extra` buffer shorter than the kernel's parameters: the real driver reads past it (seen on
   * the H200: accepted), rgpu refuses it before it leaves the client. */
  if (getenv("RGPU_SERVER")) {
    size_t short_size = 12;
    void* bad_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &short_size,
                         CU_LAUNCH_PARAM_END};
    expect_error_now_or_at_sync(cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, bad_extra),
                                "a launch through rgpu with a too-short argument buffer");
  }
  /* ... and a block larger than the device allows. */
  expect_error_now_or_at_sync(cuLaunchKernel(add, 1, 1, 1, 4096, 1, 1, 0, NULL, params, NULL),
                              "a launch with 4096 threads per block");

  CU(cuMemFree(da));
  CU(cuMemFree(db));
  CU(cuMemFree(dc));
  free(image);
}

/* Two threads: one blocked in a synchronize behind a long kernel, the other still served. */
struct SpinArgs {
  CUcontext ctx;
  CUfunction spin;
  volatile int launched;
  double sync_returned_ms;
};

static void* spinner(void* arg) {
  struct SpinArgs* s = arg;
  CU(cuCtxSetCurrent(s->ctx));
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  long long ms = 1500;
  void* params[] = {&ms};
  CU(cuLaunchKernel(s->spin, 1, 1, 1, 1, 1, 1, 0, st, params, NULL));
  CU(cuStreamQuery(st) == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  __sync_synchronize();
  s->launched = 1;
  CU(cuStreamSynchronize(st));
  s->sync_returned_ms = now_ms();
  CU(cuStreamDestroy(st));
  return NULL;
}

static void test_two_threads(CUcontext ctx, CUmodule mod) {
  struct SpinArgs s;
  memset(&s, 0, sizeof s);
  s.ctx = ctx;
  CU(cuModuleGetFunction(&s.spin, mod, "rgpu_spin"));
  CUdeviceptr d;
  CU(cuMemAlloc(&d, 4096));
  pthread_t t;
  pthread_create(&t, NULL, spinner, &s);
  while (!s.launched) {
  }
  double start = now_ms();
  CUstream mine;
  CU(cuStreamCreate(&mine, CU_STREAM_NON_BLOCKING));
  unsigned char buf[4096];
  for (int i = 0; i < 50; ++i) {
    size_t f, tot;
    CU(cuMemGetInfo(&f, &tot));
    memset(buf, i, sizeof buf);
    CU(cuMemcpyHtoDAsync(d, buf, sizeof buf, mine));
    memset(buf, 0, sizeof buf);
    CU(cuMemcpyDtoHAsync(buf, d, sizeof buf, mine));
    CU(cuStreamSynchronize(mine));
    CHECK(buf[4095] == (unsigned char)i, "copy %d on the second thread", i);
  }
  double done = now_ms();
  pthread_join(t, NULL);
  /* What is asserted is the order, not a duration: the second thread's 150 calls all returned
     while the first thread was still blocked in its synchronize. (A 1000 ms bound on them failed
     on 2-core machines under a load of 20, with 1014 to 2869 ms.) */
  CHECK(s.sync_returned_ms > done, "the second thread's calls waited for the first thread's synchronize");
  printf("two threads: second thread's 150 calls took %.1f ms while the first waited %.0f ms more\n", done - start,
         s.sync_returned_ms - done);
  CU(cuStreamDestroy(mine));
  CU(cuMemFree(d));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s IMAGE (a cubin or fatbin built from tests/kernels/test_kernels.cu)\n", argv[0]);
    return 2;
  }
  CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed: %s\n", err_name(rc));
    return 1;
  }
  CUdevice dev;
  CUcontext primary;
  CUmodule mod = NULL;
  test_device_queries(&dev);
  test_contexts(dev, &primary);
  test_memory();
  test_streams_events();
  test_modules_and_launches(argv[1], &mod);
  if (mod) test_two_threads(primary, mod);
  if (mod) CU(cuModuleUnload(mod));
  CU(cuCtxSynchronize());
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "driver_api_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("driver_api_test: all %d checks passed\n", g_checks);
  return 0;
}
