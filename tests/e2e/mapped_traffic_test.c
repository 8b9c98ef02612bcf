/* Mapped host memory (DEVICEMAP) at scale: a program that writes a few bytes of a large mapped
 * buffer between copies, as NVIDIA's simpleStreams does with 64 MiB (it did not finish in 30 s
 * through rgpu while each exchange compared, and sent, the whole buffer). The checks here are
 * about contents; tests/e2e/test_mapped_traffic.py reads RGPU_STATS and holds the traffic to
 * what the program wrote.
 *
 * Phases: (1) cuMemHostAlloc'd buffer, a few bytes written, then copied host to device and back
 * (sync and async) each round; (2) the same buffer filled by read(2) from a file (a write by
 * the kernel on the program's behalf) and copied to the device; (3) a cuMemHostRegister'd buffer
 * that already held data when registered. Plain C against cuda.h; runs through rgpu or against
 * the real driver. Usage: mapped_traffic_test [MiB] [rounds]   (default 64, 20) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

/* Reads [off, off + n) of device memory into a small host buffer (not mapped). */
static void expect_device(CUdeviceptr d, size_t off, const unsigned char* want, size_t n, const char* what) {
  unsigned char got[256];
  CU(cuMemcpyDtoH(got, d + off, n));
  CHECK(memcmp(got, want, n) == 0, "%s: device bytes at %zu differ (got %u, want %u)", what, off, got[0], want[0]);
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  size_t size = mib << 20;
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  /* (1) A few bytes per round, copied to the device and back. */
  unsigned char* h = NULL;
  CUdeviceptr d = 0, d2 = 0;
  CU(cuMemHostAlloc((void**)&h, size, CU_MEMHOSTALLOC_DEVICEMAP));
  CU(cuMemAlloc(&d, size));
  CU(cuMemAlloc(&d2, size));
  CU(cuMemsetD8(d2, 0, size));
  if (!h) return 1;
  for (int r = 0; r < rounds; ++r) {
    size_t at = ((size_t)r * 7919 * 4096 + 123) % (size - 8);
    unsigned char v[8];
    for (int i = 0; i < 8; ++i) v[i] = (unsigned char)(r * 8 + i + 1);
    memcpy(h + at, v, sizeof v);
    CU(cuMemcpyHtoD(d, h, size)); /* from mapped memory */
    expect_device(d, at, v, sizeof v, "host to device");
    /* Device to host over bytes the program did not write: they come back unchanged. */
    CU(cuMemcpyDtoH(h, d, size));
    CHECK(memcmp(h + at, v, sizeof v) == 0, "round %d: device to host lost the program's bytes", r);
    /* Async, into the other half of a stream's work: d2 is zero where the program wrote. */
    CU(cuMemcpyDtoHAsync(h + size / 2, d2 + size / 2, size / 2, stream));
    CU(cuStreamSynchronize(stream));
    if (at >= size / 2) memset(h + at, 0, sizeof v); /* what the copy just wrote there */
    CHECK(h[size / 2] == 0 && h[size - 1] == 0, "round %d: async copy into mapped memory: %u %u", r, h[size / 2],
          h[size - 1]);
    CU(cuMemcpyHtoDAsync(d, h, size, stream));
    CU(cuStreamSynchronize(stream));
    unsigned char zero[8] = {0};
    expect_device(d, at, at >= size / 2 ? zero : v, sizeof v, "async host to device");
  }

  /* (2) read(2) into mapped memory: the kernel writes it, not the program's own stores. */
  char path[] = "/tmp/rgpu_mapped_traffic_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp failed");
  if (fd >= 0) {
    unsigned char pattern[256];
    for (int i = 0; i < 256; ++i) pattern[i] = (unsigned char)(255 - i);
    CHECK(write(fd, pattern, sizeof pattern) == (ssize_t)sizeof pattern, "write to %s failed", path);
    lseek(fd, 0, SEEK_SET);
    size_t at = size - 4096 * 3 + 17;
    CHECK(read(fd, h + at, sizeof pattern) == (ssize_t)sizeof pattern, "read into mapped memory failed");
    close(fd);
    unlink(path);
    CU(cuMemcpyHtoD(d, h, size));
    expect_device(d, at, pattern, sizeof pattern, "read(2) into mapped memory");
  }
  CU(cuMemFreeHost(h));

  /* (3) Registered memory that held data before it was registered. */
  size_t reg_size = 4u << 20;
  unsigned char* g = mmap(NULL, reg_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(g != MAP_FAILED, "mmap failed");
  if (g != MAP_FAILED) {
    unsigned char v[4] = {9, 8, 7, 6};
    memcpy(g + 100000, v, sizeof v);
    CU(cuMemHostRegister(g, reg_size, CU_MEMHOSTREGISTER_DEVICEMAP));
    CU(cuMemcpyHtoD(d, g, reg_size));
    expect_device(d, 100000, v, sizeof v, "registered memory's earlier contents");
    g[200000] = 42;
    CU(cuMemcpyHtoD(d, g, reg_size));
    unsigned char w[1] = {42};
    expect_device(d, 200000, w, 1, "registered memory written after registering");
    CU(cuMemHostUnregister(g));
    munmap(g, reg_size);
  }

  CU(cuMemFree(d));
  CU(cuMemFree(d2));
  CU(cuStreamDestroy(stream));
  CU(cuCtxSynchronize());
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "mapped_traffic_test: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("mapped_traffic_test: all %d checks passed\n", g_checks);
  return 0;
}
