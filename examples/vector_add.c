/* The demo: adds two vectors of a million floats on the GPU through the CUDA driver API, as any
 * CUDA program would, and prints where it ran and whether the result is right. Run it through
 * rgpu with LD_LIBRARY_PATH=<rgpu>/build/lib RGPU_SERVER=host:9713 (scripts/demo.sh does).
 * Usage: vector_add IMAGE   (build/tests/kernels/test_kernels.fatbin) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                   \
  do {                                                             \
    CUresult rc_ = (call);                                         \
    if (rc_ != CUDA_SUCCESS) {                                     \
      const char* s_ = "?";                                        \
      cuGetErrorString(rc_, &s_);                                  \
      fprintf(stderr, "vector_add: %s failed: %s\n", #call, s_);   \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    fprintf(stderr, "vector_add: cannot open %s\n", argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* image = malloc((size_t)len + 1);
  size_t got = fread(image, 1, (size_t)len, f);
  fclose(f);
  image[got] = 0;

  enum { N = 1 << 20 };
  float* a = malloc(N * sizeof(float));
  float* b = malloc(N * sizeof(float));
  float* c = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i;
    b[i] = 2.0f * (float)i;
  }
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction add;
  CUdeviceptr da, db, dc;
  char name[128];
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDeviceGetName(name, sizeof name, dev));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuModuleLoadData(&mod, image));
  CU(cuModuleGetFunction(&add, mod, "rgpu_vec_add"));
  CU(cuMemAlloc(&da, N * sizeof(float)));
  CU(cuMemAlloc(&db, N * sizeof(float)));
  CU(cuMemAlloc(&dc, N * sizeof(float)));
  CU(cuMemcpyHtoD(da, a, N * sizeof(float)));
  CU(cuMemcpyHtoD(db, b, N * sizeof(float)));
  int n = N;
  void* params[] = {&da, &db, &dc, &n};
  CU(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  CU(cuMemcpyDtoH(c, dc, N * sizeof(float)));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += c[i] != 3.0f * (float)i;
  printf("vector_add: %d elements on %s: %s (c[12345] = %.1f)\n", N, name, wrong ? "WRONG" : "correct", c[12345]);
  CU(cuMemFree(da));
  CU(cuMemFree(db));
  CU(cuMemFree(dc));
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  return wrong ? 1 : 0;
}
