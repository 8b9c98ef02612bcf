/* A driver-API program that moves enough data, in enough kinds of call, for a test to break its
 * connection many times (tests/e2e/test_reconnect.py, through rgpu-faultproxy): allocations,
 * synchronous and asynchronous uploads of odd sizes, launches waited for and one-way, downloads,
 * every result checked byte for byte. It prints one line of totals that an uncut run and a cut run
 * must print alike. With PAUSE_FILE it waits after the first round until that file exists, so a
 * test can break the connection while nothing is in flight and at the moment it chooses.
 *   reconnect_test IMAGE ROUNDS [PAUSE_FILE] */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static uint32_t g_rng = 12345;
static uint32_t next_u32(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return g_rng;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s IMAGE ROUNDS [PAUSE_FILE]\n", argv[0]);
    return 2;
  }
  const char* pause_file = argc == 4 ? argv[3] : NULL;
  int rounds = atoi(argv[2]);
  size_t len = 0;
  void* image = read_file(argv[1], &len);
  CHECK(image != NULL, "cannot read %s", argv[1]);
  if (!image) return 1;
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CUfunction add, fill;
  CU(cuModuleLoadData(&mod, image));
  CU(cuModuleGetFunction(&add, mod, "rgpu_vec_add"));
  CU(cuModuleGetFunction(&fill, mod, "rgpu_fill_u32"));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  /* Device memory that lives through every round (and through a pause, a suspension or a move
   * of the session: tests/e2e/test_suspend.py), checked at the end. */
  const size_t kept_words = 1 << 18;
  CUdeviceptr kept;
  CU(cuMemAlloc(&kept, kept_words * 4));
  CU(cuMemsetD32(kept, 0x5eed5eedu, kept_words));

  uint64_t bytes = 0, checksum = 0;
  for (int r = 0; r < rounds; ++r) {
    int n = 1000 + (int)(next_u32() % 250000u);
    size_t size = (size_t)n * sizeof(float);
    float* a = malloc(size);
    float* b = malloc(size);
    float* c = malloc(size);
    unsigned* u = malloc(size);
    for (int i = 0; i < n; ++i) {
      a[i] = (float)(next_u32() % 1000);
      b[i] = (float)(next_u32() % 1000) * 0.5f;
    }
    CUdeviceptr da, db, dc, du;
    CU(cuMemAlloc(&da, size));
    CU(cuMemAlloc(&db, size));
    CU(cuMemAlloc(&dc, size));
    CU(cuMemAlloc(&du, size));
    CU(cuMemcpyHtoD(da, a, size));
    CU(cuMemcpyHtoDAsync(db, b, size, stream));
    CU(cuStreamSynchronize(stream));
    void* params[] = {&da, &db, &dc, &n};
    CU(cuLaunchKernel(add, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    /* One-way launches on the stream: queued, never waited for one by one. */
    unsigned value = (unsigned)r * 2654435761u;
    unsigned long long count = (unsigned long long)n;
    void* fparams[] = {&du, &value, &count};
    for (int k = 0; k < 8; ++k) CU(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, stream, fparams, NULL));
    CU(cuMemcpyDtoH(c, dc, size));
    CU(cuMemcpyDtoHAsync(u, du, size, stream));
    CU(cuStreamSynchronize(stream));
    int ok = 1, uok = 1;
    for (int i = 0; i < n; ++i) ok &= c[i] == a[i] + b[i];
    for (int i = 0; i < n; ++i) uok &= u[i] == value;
    CHECK(ok, "round %d: vec_add of %d floats differs (c[1]=%f)", r, n, c[1]);
    CHECK(uok, "round %d: fill of %d words differs (u[1]=%u)", r, n, u[1]);
    for (int i = 0; i < n; i += 97) checksum = checksum * 31 + (uint64_t)c[i] + u[i];
    bytes += 4 * size;
    CU(cuMemFree(da));
    CU(cuMemFree(db));
    CU(cuMemFree(dc));
    CU(cuMemFree(du));
    free(a);
    free(b);
    free(c);
    free(u);
    if (r == 0 && pause_file) {
      /* Up to 120 s; the test's own timeout is the real bound. */
      for (int i = 0; i < 6000 && access(pause_file, F_OK) != 0; ++i) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
      }
      CHECK(access(pause_file, F_OK) == 0, "%s never appeared", pause_file);
    }
  }
  uint32_t* back = malloc(kept_words * 4);
  CU(cuMemcpyDtoH(back, kept, kept_words * 4));
  size_t differ = 0;
  for (size_t i = 0; i < kept_words; ++i) differ += back[i] != 0x5eed5eedu;
  CHECK(differ == 0, "%zu of %zu words of the memory kept through the run changed", differ, kept_words);
  free(back);
  CU(cuMemFree(kept));
  CU(cuStreamDestroy(stream));
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("rounds %d bytes %llu checksum %llu\n", rounds, (unsigned long long)bytes, (unsigned long long)checksum);
  if (g_failures) {
    fprintf(stderr, "reconnect_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  return 0;
}
