/* A kernel with more than 4 KiB of parameters (CUDA 12.1+ allows 32764 bytes), as NVIDIA's
 * LargeKernelParameter sample launches one: rgpu_big_params (tests/kernels/test_kernels.cu) takes
 * an 8 KiB struct, a pointer after it and an int, and writes out[i] = v[i] + n. Through rgpu its
 * layout once went unread (nvcc describes such kernels in another .nv.info record), the arguments
 * travelled as zeros and the kernel faulted, reported at the next copy (issue 3).
 *
 * One body, run through rgpu (shim -> server -> fake or real driver) and directly against the
 * real driver on the GPU machine. Plain C against cuda.h.
 * Usage: large_params_test IMAGE   (a cubin/fatbin/PTX with tests/kernels) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N 2048

typedef struct {
  unsigned v[N];
} BigParams;

/* The layout the CUDA ABI gives rgpu_big_params(BigParams p, unsigned* out, int n). */
enum { kOutOffset = 8192, kNOffset = 8200, kParamBytes = 8204 };

static void expect_output(CUdeviceptr out, const BigParams* p, int n, const char* how) {
  static unsigned host[N];
  memset(host, 0, sizeof host);
  /* The copy after the launch is where a bad parameter buffer showed (an illegal address). */
  CUresult rc = cuMemcpyDtoH(host, out, sizeof host);
  CHECK(rc == CUDA_SUCCESS, "%s: the copy after the launch returned %s", how, err_name(rc));
  int wrong = 0;
  for (int i = 0; i < N; ++i) {
    unsigned want = i < n ? p->v[i] + (unsigned)n : 0u;
    if (host[i] != want && wrong++ < 4) CHECK(0, "%s: out[%d] = %u, want %u", how, i, host[i], want);
  }
  CHECK(wrong == 0, "%s: %d elements wrong", how, wrong);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s IMAGE   (an image built from tests/kernels/test_kernels.cu)\n", argv[0]);
    return 2;
  }
  CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed: %s\n", err_name(rc));
    return 1;
  }
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  size_t len = 0;
  void* image = read_file(argv[1], &len);
  CHECK(image != NULL, "cannot read %s", argv[1]);
  CUmodule mod = NULL;
  CUfunction f = NULL;
  if (image) CU(cuModuleLoadData(&mod, image));
  free(image);
  if (mod) CU(cuModuleGetFunction(&f, mod, "rgpu_big_params"));
  if (!f) {
    fprintf(stderr, "large_params_test: no rgpu_big_params in %s\n", argv[1]);
    return 1;
  }

  /* The layout as the driver (or rgpu) reports it. */
  size_t want_off[3] = {0, kOutOffset, kNOffset}, want_size[3] = {sizeof(BigParams), 8, 4};
  for (size_t i = 0; i < 3; ++i) {
    size_t off = 0, size = 0;
    CU(cuFuncGetParamInfo(f, i, &off, &size));
    CHECK(off == want_off[i] && size == want_size[i], "parameter %zu at %zu, %zu bytes; want %zu, %zu bytes", i, off,
          size, want_off[i], want_size[i]);
  }

  static BigParams p;
  for (int i = 0; i < N; ++i) p.v[i] = 0x10000u + (unsigned)i * 3u;
  CUdeviceptr out = 0;
  CU(cuMemAlloc(&out, sizeof(unsigned) * N));

  /* kernelParams: one pointer per parameter. */
  int n = N;
  CU(cuMemsetD8(out, 0, sizeof(unsigned) * N));
  void* params[] = {&p, &out, &n};
  CU(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  expect_output(out, &p, n, "kernelParams");

  /* The same through cuLaunchKernelEx, with a different n (the last parameter, past 8 KiB). */
  n = 1000;
  CU(cuMemsetD8(out, 0, sizeof(unsigned) * N));
  CUlaunchConfig config;
  memset(&config, 0, sizeof config);
  config.gridDimX = N / 256;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 256;
  config.blockDimY = config.blockDimZ = 1;
  CU(cuLaunchKernelEx(&config, f, params, NULL));
  expect_output(out, &p, n, "cuLaunchKernelEx");

  /* extra: the caller's own packed buffer. */
  static unsigned char packed[kParamBytes];
  n = 77;
  memcpy(packed, &p, sizeof p);
  memcpy(packed + kOutOffset, &out, sizeof out);
  memcpy(packed + kNOffset, &n, sizeof n);
  size_t packed_size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  CU(cuMemsetD8(out, 0, sizeof(unsigned) * N));
  CU(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
  expect_output(out, &p, n, "extra");

  CU(cuCtxSynchronize());
  CU(cuMemFree(out));
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "large_params_test: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("large_params_test: all %d checks passed\n", g_checks);
  return 0;
}
