/* Driver-path micro-benchmarks: the costs a CUDA program pays per driver call, measured the same
 * way against the real driver (mode "local") and through rgpu's shim (mode "rgpu"), so that
 * bench/report.py can set one against the other and against raw TCP (bench/tcp_baseline.c).
 * Plain C against cuda.h, as a user's program would be; which libcuda.so.1 it runs on is decided
 * by the loader (LD_LIBRARY_PATH), and the path actually mapped is written into the JSON so a run
 * can prove which one it measured.
 *
 * Usage: driver_bench IMAGE OUT.json [--quick | --bulk-only BYTES]   (IMAGE: a cubin/fatbin of tests/kernels)
 *   --bulk-only BYTES: only the bulk copies, of a BYTES buffer (bench/torch_bench.py sets the
 *   torch device's copies against these, size for size).
 * Env:   RGPU_BENCH_MODE  copied into the JSON's "mode" ("local", "rgpu", ...)
 *
 * Every number is taken after a warm-up; per-call numbers are medians (and p99) over many timed
 * calls, bandwidths the best of 3. Times are microseconds, bandwidths GB/s with G = 1e9. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#define BENCH_NAME "driver_bench"
#include "bench_cu.h"

typedef struct {
  double median, p99;
} Dist;

static Dist dist(double* v, int n) {
  Dist d;
  d.p99 = bench_quantile(v, n, 0.99);
  d.median = bench_quantile(v, n, 0.50);
  return d;
}

static void* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The libcuda.so* this process actually mapped: the proof of which driver was measured. */
static void mapped_libcuda(char* out, size_t cap) {
  snprintf(out, cap, "?");
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    char* p = strchr(line, '/');
    if (p && strstr(p, "/libcuda.so")) {
      p[strcspn(p, "\n")] = 0;
      snprintf(out, cap, "%s", p);
      break;
    }
  }
  fclose(f);
}

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s < 0x20) continue;
    fputc(*s, f);
  }
  fputc('"', f);
}

typedef struct {
  int quick;
  int launch_n, launch_reps;  /* launch_us: reps of N back-to-back launches + one sync */
  int launch_sync_n;          /* launch_sync_us: timed launch + sync pairs */
  int small_n;                /* small_sync_call_us: timed cuMemGetInfo calls */
  int memcpy8_n;              /* memcpy_8b_us: timed 8-byte copies each way */
  size_t bulk_bytes;          /* htod/dtoh_gbps: pageable buffer size */
  int bulk_reps;
} Plan;

typedef struct {
  double launch_us, launch_best_us;
  Dist launch_sync, small_call, htod8, dtoh8;
  double htod_gbps, dtoh_gbps;
} Results;

static void bench_launch(const Plan* p, CUfunction fn, Results* r) {
  /* Warm-up: first launches pay for module upload, lazy loading, connection buffers. */
  for (int i = 0; i < 500; ++i) CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
  CU(cuStreamSynchronize(NULL));

  double* per = malloc(sizeof(double) * (size_t)p->launch_reps);
  for (int rep = 0; rep < p->launch_reps; ++rep) {
    double t0 = bench_now_us();
    for (int i = 0; i < p->launch_n; ++i) CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CU(cuStreamSynchronize(NULL));
    per[rep] = (bench_now_us() - t0) / p->launch_n;
  }
  r->launch_us = bench_quantile(per, p->launch_reps, 0.5);
  r->launch_best_us = per[0]; /* sorted by bench_quantile() */
  free(per);

  double* t = malloc(sizeof(double) * (size_t)p->launch_sync_n);
  for (int i = 0; i < 200; ++i) {
    CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CU(cuStreamSynchronize(NULL));
  }
  for (int i = 0; i < p->launch_sync_n; ++i) {
    double t0 = bench_now_us();
    CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CU(cuStreamSynchronize(NULL));
    t[i] = bench_now_us() - t0;
  }
  r->launch_sync = dist(t, p->launch_sync_n);
  free(t);
}

static void bench_small_call(const Plan* p, Results* r) {
  size_t free_b = 0, total_b = 0;
  for (int i = 0; i < 200; ++i) CU(cuMemGetInfo(&free_b, &total_b));
  double* t = malloc(sizeof(double) * (size_t)p->small_n);
  for (int i = 0; i < p->small_n; ++i) {
    double t0 = bench_now_us();
    CU(cuMemGetInfo(&free_b, &total_b));
    t[i] = bench_now_us() - t0;
  }
  r->small_call = dist(t, p->small_n);
  free(t);
}

static void bench_memcpy_8b(const Plan* p, Results* r) {
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, 8));
  uint64_t h = 0x0123456789abcdefull, back = 0;
  double* t = malloc(sizeof(double) * (size_t)p->memcpy8_n);
  for (int i = 0; i < 200; ++i) CU(cuMemcpyHtoD(d, &h, 8));
  for (int i = 0; i < p->memcpy8_n; ++i) {
    double t0 = bench_now_us();
    CU(cuMemcpyHtoD(d, &h, 8));
    t[i] = bench_now_us() - t0;
  }
  r->htod8 = dist(t, p->memcpy8_n);
  for (int i = 0; i < 200; ++i) CU(cuMemcpyDtoH(&back, d, 8));
  for (int i = 0; i < p->memcpy8_n; ++i) {
    double t0 = bench_now_us();
    CU(cuMemcpyDtoH(&back, d, 8));
    t[i] = bench_now_us() - t0;
  }
  r->dtoh8 = dist(t, p->memcpy8_n);
  if (back != h) {
    fprintf(stderr, "driver_bench: 8-byte round trip read back %llx, wrote %llx\n", (unsigned long long)back,
            (unsigned long long)h);
    exit(1);
  }
  free(t);
  CU(cuMemFree(d));
}

static void bench_bulk(const Plan* p, Results* r) {
  size_t n = p->bulk_bytes;
  /* Pageable (malloc) memory, touched first so page faults are not part of the copy. */
  unsigned char* h = malloc(n);
  if (!h) {
    fprintf(stderr, "driver_bench: cannot allocate %zu bytes of host memory\n", n);
    exit(1);
  }
  memset(h, 0x5a, n);
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, n));
  CU(cuMemcpyHtoD(d, h, n)); /* warm-up */
  CU(cuMemcpyDtoH(h, d, n));
  double best_htod = 1e300, best_dtoh = 1e300;
  for (int rep = 0; rep < p->bulk_reps; ++rep) {
    double t0 = bench_now_us();
    CU(cuMemcpyHtoD(d, h, n));
    double t1 = bench_now_us();
    CU(cuMemcpyDtoH(h, d, n));
    double t2 = bench_now_us();
    if (t1 - t0 < best_htod) best_htod = t1 - t0;
    if (t2 - t1 < best_dtoh) best_dtoh = t2 - t1;
  }
  r->htod_gbps = (double)n / (best_htod * 1e3);
  r->dtoh_gbps = (double)n / (best_dtoh * 1e3);
  if (h[n / 2] != 0x5a) {
    fprintf(stderr, "driver_bench: bulk round trip read back %#x, wrote 0x5a\n", h[n / 2]);
    exit(1);
  }
  CU(cuMemFree(d));
  free(h);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: driver_bench IMAGE OUT.json [--quick | --bulk-only BYTES]\n");
    return 2;
  }
  Plan p = {0};
  p.quick = argc > 3 && strcmp(argv[3], "--quick") == 0;
  size_t bulk_only = 0;
  if (argc > 4 && strcmp(argv[3], "--bulk-only") == 0) bulk_only = strtoull(argv[4], NULL, 0);
  if (argc > 3 && strcmp(argv[3], "--bulk-only") == 0 && bulk_only == 0) {
    fprintf(stderr, "driver_bench: --bulk-only needs a size in bytes\n");
    return 2;
  }
  p.launch_n = p.quick ? 2000 : 20000;
  p.launch_reps = 5;
  p.launch_sync_n = p.quick ? 1000 : 5000;
  p.small_n = 2000;
  p.memcpy8_n = p.quick ? 500 : 2000;
  p.bulk_bytes = (p.quick ? 32ull : 256ull) << 20;
  p.bulk_reps = 3;
  if (bulk_only) p.bulk_bytes = bulk_only;
  const char* mode = getenv("RGPU_BENCH_MODE");
  if (!mode || !*mode) mode = "unknown";

  size_t image_len = 0;
  void* image = read_file(argv[1], &image_len);
  if (!image) {
    fprintf(stderr, "driver_bench: cannot read image %s (build target rgpu_test_kernels)\n", argv[1]);
    return 1;
  }

  double t_init = bench_now_us();
  CU(cuInit(0));
  t_init = bench_now_us() - t_init;
  CUdevice dev;
  CUcontext ctx;
  char name[256] = {0};
  int driver_version = 0;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDeviceGetName(name, sizeof name, dev));
  CU(cuDriverGetVersion(&driver_version));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CUfunction empty;
  CU(cuModuleLoadData(&mod, image));
  CU(cuModuleGetFunction(&empty, mod, "rgpu_empty"));
  char libcuda[1024];
  mapped_libcuda(libcuda, sizeof libcuda);

  Results r;
  memset(&r, 0, sizeof r);
  if (!bulk_only) {
    bench_launch(&p, empty, &r);
    bench_small_call(&p, &r);
    bench_memcpy_8b(&p, &r);
  }
  bench_bulk(&p, &r);

  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));

  FILE* f = fopen(argv[2], "w");
  if (!f) {
    fprintf(stderr, "driver_bench: cannot write %s\n", argv[2]);
    return 1;
  }
  fprintf(f, "{\n  \"mode\": ");
  json_str(f, mode);
  fprintf(f, ",\n  \"device\": ");
  json_str(f, name);
  fprintf(f, ",\n  \"driver_version\": %d,\n  \"libcuda\": ", driver_version);
  json_str(f, libcuda);
  fprintf(f,
          ",\n  \"quick\": %s,\n"
          "  \"cuinit_us\": %.1f,\n"
          "  \"launch_us\": %.3f,\n  \"launch_best_us\": %.3f,\n  \"launch_n\": %d,\n"
          "  \"launch_sync_us\": %.2f,\n  \"launch_sync_p99_us\": %.2f,\n"
          "  \"small_sync_call_us\": %.2f,\n  \"small_sync_call_p99_us\": %.2f,\n"
          "  \"htod_gbps\": %.3f,\n  \"dtoh_gbps\": %.3f,\n  \"bulk_bytes\": %zu,\n"
          "  \"memcpy_8b_us\": {\"htod\": %.2f, \"dtoh\": %.2f},\n"
          "  \"memcpy_8b_p99_us\": {\"htod\": %.2f, \"dtoh\": %.2f}\n}\n",
          p.quick ? "true" : "false", t_init, r.launch_us, r.launch_best_us, p.launch_n, r.launch_sync.median,
          r.launch_sync.p99, r.small_call.median, r.small_call.p99, r.htod_gbps, r.dtoh_gbps, p.bulk_bytes,
          r.htod8.median, r.dtoh8.median, r.htod8.p99, r.dtoh8.p99);
  fclose(f);

  printf("driver_bench [%s] %s, driver %d, libcuda %s\n", mode, name, driver_version, libcuda);
  printf("  launch (back to back, %d)  %8.2f us/launch (best rep %.2f)\n", p.launch_n, r.launch_us,
         r.launch_best_us);
  printf("  launch + sync               %8.2f us  p99 %.2f\n", r.launch_sync.median, r.launch_sync.p99);
  printf("  cuMemGetInfo                %8.2f us  p99 %.2f\n", r.small_call.median, r.small_call.p99);
  printf("  memcpy 8 B HtoD / DtoH      %8.2f / %.2f us\n", r.htod8.median, r.dtoh8.median);
  printf("  pageable %zu MiB HtoD / DtoH %6.2f / %.2f GB/s\n", p.bulk_bytes >> 20, r.htod_gbps, r.dtoh_gbps);
  free(image);
  return 0;
}
