/* Device printf through rgpu: a kernel prints, the program synchronizes and prints a marker.
   What the kernel printed must be on this process's stdout, between the program's own lines
   before and after the synchronize, as with a local GPU. test_printf.py checks the order; the
   same program runs on the real driver in tests/gpu/run.sh.
   usage: printf_test FATBIN (tests/kernels/test_kernels.cu, kernel rgpu_printf) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FATBIN\n", argv[0]);
    return 2;
  }
  size_t len = 0;
  void* image = read_file(argv[1], &len);
  CHECK(image != NULL, "cannot read %s", argv[1]);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod = NULL;
  CUfunction f = NULL;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  if (image) CU(cuModuleLoadData(&mod, image));
  if (mod) CU(cuModuleGetFunction(&f, mod, "rgpu_printf"));
  printf("printf_test: before the kernel\n");
  for (int round = 1; round <= 2 && f; ++round) {
    int v = 40 + round;
    void* args[] = {&v};
    CU(cuLaunchKernel(f, 1, 1, 1, 3, 1, 1, 0, NULL, args, NULL));
    CU(cuCtxSynchronize());
    printf("printf_test: after synchronize %d\n", round);
  }
  fflush(stdout);
  if (g_failures) {
    fprintf(stderr, "printf_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  return 0;
}
