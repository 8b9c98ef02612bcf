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

#define BENCH_NAME "cross_copy_bench"
#include "bench_clock.h"
#include "bench_cu.h"

/* The destination's first and last MiB (or all of it, when smaller) hold the 32-bit pattern. */
static void check(CUcontext ctx, CUdeviceptr dst, size_t bytes, uint32_t pattern) {
  size_t span = bytes < (1u << 20) ? bytes : (1u << 20);
  uint32_t* got = malloc(span);
  if (!got) BENCH_DIE("malloc");
  CU(cuCtxSetCurrent(ctx));
  size_t at[2] = {0, (bytes - span) & ~(size_t)3};
  for (int k = 0; k < 2; ++k) {
    CU(cuMemcpyDtoH(got, dst + at[k], span));
    for (size_t i = 0; i < span / 4; ++i)
      if (got[i] != pattern) BENCH_DIE("byte %zu at the destination is wrong: %08x, not %08x", at[k] + 4 * i, got[i], pattern);
  }
  free(got);
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1ull << 30);
  if (bytes < 4 || bytes % 4) BENCH_DIE("BYTES must be a positive multiple of 4, not %zu", bytes);
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  if (count < 2) BENCH_DIE("%d device(s): a copy between two needs two", count);
  CUcontext ctx[2];
  CUdeviceptr mem[2];
  for (int d = 0; d < 2; ++d) {
    CUdevice dev;
    CU(cuDeviceGet(&dev, d));
    CU(cuDevicePrimaryCtxRetain(&ctx[d], dev));
    CU(cuCtxSetCurrent(ctx[d]));
    CU(cuMemAlloc(&mem[d], bytes));
  }
  double secs[kReps], best = 1e300;
  for (int rep = -1; rep < kReps; ++rep) {
    uint32_t pattern = 0x5a000000u + (uint32_t)(rep + 1) * 0x010203u;
    CU(cuCtxSetCurrent(ctx[0]));
    CU(cuMemsetD32(mem[0], pattern, bytes / 4));
    CU(cuCtxSynchronize());
    double t0 = bench_now_s();
    CU(cuMemcpyPeer(mem[1], ctx[1], mem[0], ctx[0], bytes));
    double s = bench_now_s() - t0;
    check(ctx[1], mem[1], bytes, pattern);
    if (rep < 0) continue;  // the warm-up: links dialled, pages touched
    secs[rep] = s;
    if (s < best) best = s;
  }
  printf("{\"bytes\": %zu, \"seconds\": [", bytes);
  for (int i = 0; i < kReps; ++i) printf("%s%.6f", i ? ", " : "", secs[i]);
  printf("], \"best_s\": %.6f, \"gbps\": %.3f}\n", best, bytes / best / 1e9);
  for (int d = 0; d < 2; ++d) {
    CU(cuCtxSetCurrent(ctx[d]));
    CU(cuMemFree(mem[d]));
  }
  return 0;
}
