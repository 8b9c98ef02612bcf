/* The small synchronous call (cuMemGetInfo, as driver_bench's small_sync_call_us) on two devices
 * of one program, in alternating rounds: with RGPU_SERVER=a,b the two devices are two servers' (one
 * plain TCP, one TLS: bench/pair_small_call.sh), so that both sides run in the same process, on the
 * same client threads, a few milliseconds apart. Between processes the same call's median moved
 * by up to 30% on the H200 host (where the scheduler put client and server), more than TLS adds.
 *
 * Usage: device_pair_bench OUT.json [ROUNDS [CALLS]]   (default 21 rounds of 2,000 calls a device)
 * Writes each round's median per device and their ratio (device 1 over device 0), and the medians
 * of those. The first side of a round alternates, so neither always runs right after the other. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#define BENCH_NAME "device_pair_bench"
#include "bench_cu.h"

/* The median of `calls` timed cuMemGetInfo calls in context c. */
static double small_call_us(CUcontext c, double* t, int calls) {
  size_t free_b, total_b;
  CU(cuCtxSetCurrent(c));
  for (int i = 0; i < 50; ++i) CU(cuMemGetInfo(&free_b, &total_b));  // warm, after the switch
  for (int i = 0; i < calls; ++i) {
    double t0 = bench_now_us();
    CU(cuMemGetInfo(&free_b, &total_b));
    t[i] = bench_now_us() - t0;
  }
  return bench_quantile(t, calls, 0.5);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: device_pair_bench OUT.json [ROUNDS [CALLS]]\n");
    return 2;
  }
  const int rounds = argc > 2 ? atoi(argv[2]) : 21, calls = argc > 3 ? atoi(argv[3]) : 2000;
  if (rounds < 1 || calls < 1) {
    fprintf(stderr, "device_pair_bench: ROUNDS and CALLS are numbers of 1 or more\n");
    return 2;
  }
  CU(cuInit(0));
  int n = 0;
  CU(cuDeviceGetCount(&n));
  if (n < 2) {
    fprintf(stderr, "device_pair_bench: needs two devices (RGPU_SERVER=a,b), sees %d\n", n);
    return 1;
  }
  CUcontext ctx[2];
  for (int d = 0; d < 2; ++d) {
    CUdevice dev;
    CU(cuDeviceGet(&dev, d));
    CU(cuDevicePrimaryCtxRetain(&ctx[d], dev));
  }
  double* t = malloc(sizeof(double) * (size_t)calls);
  double* us[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};
  double* ratio = malloc(sizeof(double) * (size_t)rounds);
  FILE* f = fopen(argv[1], "w");
  if (!t || !us[0] || !us[1] || !ratio || !f) {
    fprintf(stderr, "device_pair_bench: cannot write %s or allocate\n", argv[1]);
    return 1;
  }
  fprintf(f, "{\n  \"calls_per_round\": %d,\n  \"rounds\": [", calls);
  for (int r = 0; r < rounds; ++r) {
    const int first = r % 2;
    us[first][r] = small_call_us(ctx[first], t, calls);
    us[1 - first][r] = small_call_us(ctx[1 - first], t, calls);
    ratio[r] = us[1][r] / us[0][r];
    fprintf(f, "%s\n    {\"device0_us\": %.3f, \"device1_us\": %.3f, \"device1_over_device0\": %.4f}", r ? "," : "",
            us[0][r], us[1][r], ratio[r]);
  }
  const double m0 = bench_quantile(us[0], rounds, 0.5), m1 = bench_quantile(us[1], rounds, 0.5);
  const double mr = bench_quantile(ratio, rounds, 0.5);
  fprintf(f, "\n  ],\n  \"device0_us\": %.3f,\n  \"device1_us\": %.3f,\n  \"device1_over_device0\": %.4f\n}\n", m0, m1,
          mr);
  fclose(f);
  printf("small call over %d rounds: device 0 %.2f us, device 1 %.2f us, device 1 / device 0 %.3f (median of rounds)\n",
         rounds, m0, m1, mr);
  return 0;
}
