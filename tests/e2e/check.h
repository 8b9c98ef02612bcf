/* Shared by the self-checking C test programs of tests/e2e: CHECK and CU count checks and
 * failures (a failed check prints FAIL file:line and the reason, and the run goes on), plus the
 * small helpers each program needs. Header-only; each program is one translation unit. */
#ifndef RGPU_TESTS_E2E_CHECK_H
#define RGPU_TESTS_E2E_CHECK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int g_checks, g_failures;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    ++g_checks;                                           \
    if (!(cond)) {                                        \
      ++g_failures;                                       \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
    }                                                     \
  } while (0)

static inline const char* err_name(CUresult rc) {
  const char* s = NULL;
  cuGetErrorName(rc, &s);
  return s ? s : "?";
}

#define CU(call)                                                                       \
  do {                                                                                 \
    CUresult rc_ = (call);                                                             \
    CHECK(rc_ == CUDA_SUCCESS, "%s returned %s (%d)", #call, err_name(rc_), (int)rc_); \
  } while (0)

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The whole file, NUL-terminated (PTX images are text), or NULL. */
static inline void* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = (char*)malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
  buf[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

#endif
