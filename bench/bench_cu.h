/* How the plain-C CUDA benchmarks stop at a failed call: a benchmark that goes on after one
 * measures nothing. Each defines BENCH_NAME (its program's name, a string) before including this;
 * BENCH_DIE prints "NAME: what" on stderr and exits 1, CU(call) does so when call fails, naming it,
 * its error and where it is. Header-only, as bench_clock.h. */
#pragma once

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME (the program's name) before including bench_cu.h"
#endif

#define BENCH_DIE(...)                     \
  do {                                     \
    fprintf(stderr, BENCH_NAME ": ");      \
    fprintf(stderr, __VA_ARGS__);          \
    fprintf(stderr, "\n");                 \
    exit(1);                               \
  } while (0)

static inline const char* bench_cu_error(CUresult rc) {
  const char* s = NULL;
  cuGetErrorName(rc, &s);
  return s ? s : "?";
}

#define CU(call)                                                                                    \
  do {                                                                                              \
    CUresult rc_ = (call);                                                                          \
    if (rc_ != CUDA_SUCCESS)                                                                        \
      BENCH_DIE("%s failed: %s (%d) at %s:%d", #call, bench_cu_error(rc_), (int)rc_, __FILE__, __LINE__); \
  } while (0)
