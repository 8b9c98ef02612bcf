/* What the plain-C benchmarks (driver_bench, device_pair_bench, tcp_baseline, tests/gpu's
 * cross_copy_bench and nccl_bench) share: a monotonic clock and nearest-rank quantiles.
 * Header-only: each benchmark is one C file. */
#pragma once

#include <stdlib.h>
#include <time.h>

static inline double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline double bench_now_s(void) { return bench_now_us() / 1e6; }

static inline int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts v in place; q in [0, 1], nearest-rank. */
static inline double bench_quantile(double* v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  int i = (int)(q * n + 0.5) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return v[i];
}
