/* Calls the driver from an exit handler registered before the driver library was loaded, as the
 * static CUDA runtime does: it registers its teardown, then dlopen()s libcuda.so.1, so at exit
 * the library's own static destructors run first and the teardown's driver calls come after
 * them. (Found with NVIDIA's samples on the H200: the shim's state was destroyed by then and
 * cuLibraryUnload crashed.) What counts is that nothing crashes or hangs: the real driver has torn
 * itself down by then and answers CUDA_ERROR_DEINITIALIZED (and no error strings), rgpu's shim
 * still serves the calls; each call's answer is printed, and either is accepted.
 * Usage: exit_teardown_test IMAGE */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static CUlibrary g_lib;
static CUmodule g_mod;
static void* g_pinned;

#define FN(name) static __typeof__(&name) p_##name;
FN(cuInit) FN(cuDeviceGet) FN(cuDevicePrimaryCtxRetain) FN(cuCtxSetCurrent) FN(cuModuleLoadData)
FN(cuLibraryLoadData) FN(cuLibraryGetKernel) FN(cuMemAllocHost) FN(cuCtxGetCurrent) FN(cuDeviceGetAttribute)
FN(cuModuleUnload) FN(cuLibraryUnload) FN(cuMemFreeHost) FN(cuCtxSynchronize) FN(cuGetErrorString)

static void teardown(void) {
  /* Reuse and scribble over memory freed before this point, so state destroyed too early is
   * garbage now rather than intact by luck. */
  for (int i = 0; i < 4096; ++i) {
    size_t sz = 16 + (size_t)(i % 16) * 16;
    unsigned char* p = malloc(sz);
    for (size_t j = 0; j < sz; ++j) p[j] = 0xA5;
  }
  CUcontext cur = NULL;
  int v = 0, bad = 0;
  CUresult rc[6];
  rc[0] = p_cuCtxGetCurrent(&cur);
  rc[1] = p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0);
  if (rc[1] == CUDA_SUCCESS && v != 32) bad = 1;
  rc[2] = p_cuModuleUnload(g_mod);
  rc[3] = p_cuLibraryUnload(g_lib);
  rc[4] = p_cuMemFreeHost(g_pinned);
  rc[5] = p_cuCtxSynchronize();
  const char* what[] = {"cuCtxGetCurrent", "cuDeviceGetAttribute", "cuModuleUnload", "cuLibraryUnload",
                        "cuMemFreeHost", "cuCtxSynchronize"};
  for (int i = 0; i < 6; ++i) {
    printf("teardown: %s -> %d\n", what[i], (int)rc[i]);
    if (rc[i] != CUDA_SUCCESS && rc[i] != CUDA_ERROR_DEINITIALIZED) bad = 1;
  }
  const char* s = NULL;
  CUresult src = p_cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s);
  if (src != CUDA_SUCCESS && src != CUDA_ERROR_DEINITIALIZED) bad = 1;
  printf("teardown after main: %s (%s)\n", bad ? "FAILED" : "ok", s ? s : "no error string");
  fflush(stdout);
  if (bad) _exit(1);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  atexit(teardown);  /* before the driver is loaded, as static cudart does */
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return 3;
/* The symbol's name after cuda.h's macros (cuMemAllocHost is cuMemAllocHost_v2): dlsym of the
   bare name finds the legacy 32-bit-size entry point, which the real driver answers with
   CUDA_ERROR_INVALID_CONTEXT. */
#define SYMBOL_NAME(name) #name
#define SYMBOL(name) SYMBOL_NAME(name)
#define LOAD(name) if (!(p_##name = (__typeof__(&name))dlsym(lib, SYMBOL(name)))) return 3;
  LOAD(cuInit) LOAD(cuDeviceGet) LOAD(cuDevicePrimaryCtxRetain) LOAD(cuCtxSetCurrent) LOAD(cuModuleLoadData)
  LOAD(cuLibraryLoadData) LOAD(cuLibraryGetKernel) LOAD(cuMemAllocHost) LOAD(cuCtxGetCurrent)
  LOAD(cuDeviceGetAttribute) LOAD(cuModuleUnload) LOAD(cuLibraryUnload) LOAD(cuMemFreeHost) LOAD(cuCtxSynchronize)
  LOAD(cuGetErrorString)
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  static char image[1 << 20];
  size_t n = fread(image, 1, sizeof image - 1, f);
  fclose(f);
  image[n] = 0;
  if (n == sizeof image - 1) {
    fprintf(stderr, "exit_teardown_test: %s is larger than the %zu bytes read\n", argv[1], n);
    return 2;
  }
  CUdevice dev;
  CUcontext ctx;
  CUkernel k;
  /* Each step says which call failed and how, so a failure on one driver is found from its log. */
#define STEP(call) do { CUresult r_ = (call); if (r_) { \
    fprintf(stderr, "exit_teardown_test: %s -> %d\n", #call, (int)r_); return 1; } } while (0)
  STEP(p_cuInit(0));
  STEP(p_cuDeviceGet(&dev, 0));
  STEP(p_cuDevicePrimaryCtxRetain(&ctx, dev));
  STEP(p_cuCtxSetCurrent(ctx));
  STEP(p_cuModuleLoadData(&g_mod, image));
  STEP(p_cuLibraryLoadData(&g_lib, image, NULL, NULL, 0, NULL, NULL, 0));
  STEP(p_cuLibraryGetKernel(&k, g_lib, "rgpu_vec_add"));
  STEP(p_cuLibraryGetKernel(&k, g_lib, "rgpu_fill_u32"));
  STEP(p_cuLibraryGetKernel(&k, g_lib, "rgpu_affine"));
  STEP(p_cuLibraryGetKernel(&k, g_lib, "rgpu_empty"));
  STEP(p_cuLibraryGetKernel(&k, g_lib, "rgpu_spin"));
  STEP(p_cuMemAllocHost(&g_pinned, 4096));
  printf("main done\n");
  return 0;
}
