/* A copy between two GPUs timed, as issue 19 asks of two rgpu-servers: `cross_copy_bench [BYTES]`
 * (default 1 GiB) allocates BYTES on device 0 and on device 1, and times cuMemcpyPeer from 0 to 1
 * (the call returns once the copy is done), one warm-up and then 3 timed, each with a fresh
 * pattern in the source, checked at the destination's first and last MiB. Through rgpu with
 * RGPU_SERVER=a,b the devices are on two servers and the bytes go server to server (docs/design.md
 * §6); run on the real driver it is the local peer copy, for reference. Prints one JSON line:
 * bytes, each timed copy's seconds, the best and its GB/s (1e9 bytes a second). Plain C against
 * cuda.h; compiled and run by tests/gpu/multigpu.sh. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kReps = 3 };

#define DIE(...)                              \
  do {                                        \
    fprintf(stderr, "cross_copy_bench: ");    \
    fprintf(stderr, __VA_ARGS__);             \
    fprintf(stderr, "\n");                    \
    exit(1);                                  \
  } while (0)
#define CUX(call)                                                        \
  do {                                                                   \
    CUresult r_ = (call);                                                \
    if (r_ != CUDA_SUCCESS) DIE("%s failed: CUDA error %d", #call, r_); \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The destination's first and last MiB (or all of it, when smaller) hold the 32-bit pattern. */
static void check(CUcontext ctx, CUdeviceptr dst, size_t bytes, uint32_t pattern) {
  size_t span = bytes < (1u << 20) ? bytes : (1u << 20);
  uint32_t* got = malloc(span);
  if (!got) DIE("malloc");
  CUX(cuCtxSetCurrent(ctx));
  size_t at[2] = {0, (bytes - span) & ~(size_t)3};
  for (int k = 0; k < 2; ++k) {
    CUX(cuMemcpyDtoH(got, dst + at[k], span));
    for (size_t i = 0; i < span / 4; ++i)
      if (got[i] != pattern) DIE("byte %zu at the destination is wrong: %08x, not %08x", at[k] + 4 * i, got[i], pattern);
  }
  free(got);
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1ull << 30);
  if (bytes < 4 || bytes % 4) DIE("BYTES must be a positive multiple of 4, not %zu", bytes);
  CUX(cuInit(0));
  int count = 0;
  CUX(cuDeviceGetCount(&count));
  if (count < 2) DIE("%d device(s): a copy between two needs two", count);
  CUcontext ctx[2];
  CUdeviceptr mem[2];
  for (int d = 0; d < 2; ++d) {
    CUdevice dev;
    CUX(cuDeviceGet(&dev, d));
    CUX(cuDevicePrimaryCtxRetain(&ctx[d], dev));
    CUX(cuCtxSetCurrent(ctx[d]));
    CUX(cuMemAlloc(&mem[d], bytes));
  }
  double secs[kReps], best = 1e300;
  for (int rep = -1; rep < kReps; ++rep) {
    uint32_t pattern = 0x5a000000u + (uint32_t)(rep + 1) * 0x010203u;
    CUX(cuCtxSetCurrent(ctx[0]));
    CUX(cuMemsetD32(mem[0], pattern, bytes / 4));
    CUX(cuCtxSynchronize());
    double t0 = now_s();
    CUX(cuMemcpyPeer(mem[1], ctx[1], mem[0], ctx[0], bytes));
    double s = now_s() - t0;
    check(ctx[1], mem[1], bytes, pattern);
    if (rep < 0) continue;  // the warm-up: links dialled, pages touched
    secs[rep] = s;
    if (s < best) best = s;
  }
  printf("{\"bytes\": %zu, \"seconds\": [", bytes);
  for (int i = 0; i < kReps; ++i) printf("%s%.6f", i ? ", " : "", secs[i]);
  printf("], \"best_s\": %.6f, \"gbps\": %.3f}\n", best, bytes / best / 1e9);
  for (int d = 0; d < 2; ++d) {
    CUX(cuCtxSetCurrent(ctx[d]));
    CUX(cuMemFree(mem[d]));
  }
  return 0;
}
