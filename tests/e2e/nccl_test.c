/* A plain NCCL program, built against rgpu's protocol/nccl.h: `nccl_test NRANKS` forks NRANKS
 * ranks (processes, each with its own CUDA connection), rank r on device r % device count, rank 0
 * hands the unique id to the others through pipes. Each rank checks, byte for byte, all-reduce of
 * odd sizes (sum of int32, float, half and bfloat16; max; avg; in place; a pre-multiplied sum),
 * broadcast, reduce, all-gather, reduce-scatter, all-to-all, send/recv in a group (receives posted
 * before sends), the communicator's queries, and that a bad argument is refused at once. Prints
 * "rank R: N checks, F failed" and exits non-zero if any failed. Run through rgpu by
 * tests/e2e/test_nccl.py (fake driver and fake NCCL) and tests/gpu/run.sh (the real ones, and
 * locally against NVIDIA's libraries for comparison). */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "protocol/nccl.h"

#define NC(call)                                                                        \
  do {                                                                                  \
    ncclResult_t nr_ = (call);                                                          \
    CHECK(nr_ == ncclSuccess, "%s returned %d (%s)", #call, (int)nr_, ncclGetLastError(NULL)); \
  } while (0)

static int g_rank, g_nranks;
static ncclComm_t g_comm;
static CUstream g_stream;

static uint16_t to_half(float f) { /* exact for the small integers used here */
  if (f == 0) return 0;
  int e = 0;
  float m = f;
  while (m >= 2) { m /= 2; ++e; }
  while (m < 1) { m *= 2; --e; }
  return (uint16_t)(((e + 15) << 10) | (uint16_t)((m - 1) * 1024));
}
static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16); /* exact for small integers */
}

/* Device buffer with `bytes` from host src. */
static CUdeviceptr upload(const void* src, size_t bytes) {
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, bytes ? bytes : 1));
  if (bytes) CU(cuMemcpyHtoD(d, src, bytes));
  return d;
}

static int same(CUdeviceptr d, const void* want, size_t bytes, const char* what) {
  void* got = malloc(bytes ? bytes : 1);
  CU(cuStreamSynchronize(g_stream));
  if (bytes) CU(cuMemcpyDtoH(got, d, bytes));
  int ok = memcmp(got, want, bytes) == 0;
  CHECK(ok, "rank %d: %s: %zu bytes differ from the expected result", g_rank, what, bytes);
  free(got);
  return ok;
}

/* Rank r's i-th element, small integers so every sum is exact in every type. */
static int value(int r, size_t i) { return (int)((i * 7 + (size_t)r * 3) % 61) - 20; }

static void check_allreduce_sum(size_t n) {
  int32_t* in = malloc(n * 4 + 4);
  int32_t* want = malloc(n * 4 + 4);
  float* fin = malloc(n * 4 + 4);
  float* fwant = malloc(n * 4 + 4);
  uint16_t* hin = malloc(n * 2 + 2);
  uint16_t* hwant = malloc(n * 2 + 2);
  uint16_t* bin = malloc(n * 2 + 2);
  uint16_t* bwant = malloc(n * 2 + 2);
  for (size_t i = 0; i < n; ++i) {
    int s = 0;
    for (int r = 0; r < g_nranks; ++r) s += value(r, i);
    in[i] = value(g_rank, i), want[i] = s;
    fin[i] = (float)value(g_rank, i), fwant[i] = (float)s;
    hin[i] = to_half((float)abs(value(g_rank, i))), bin[i] = to_bf16((float)value(g_rank, i));
    int hs = 0;
    for (int r = 0; r < g_nranks; ++r) hs += abs(value(r, i));
    hwant[i] = to_half((float)hs), bwant[i] = to_bf16((float)s);
  }
  CUdeviceptr a = upload(in, n * 4), b = upload(NULL, 0);
  CU(cuMemAlloc(&b, n * 4 + 1));
  NC(ncclAllReduce((void*)a, (void*)b, n, ncclInt32, ncclSum, g_comm, g_stream));
  char what[64];
  snprintf(what, sizeof what, "all-reduce int32 sum of %zu", n);
  same(b, want, n * 4, what);
  CUdeviceptr fa = upload(fin, n * 4);
  NC(ncclAllReduce((void*)fa, (void*)fa, n, ncclFloat, ncclSum, g_comm, g_stream)); /* in place */
  snprintf(what, sizeof what, "all-reduce float sum in place of %zu", n);
  same(fa, fwant, n * 4, what);
  CUdeviceptr ha = upload(hin, n * 2);
  NC(ncclAllReduce((void*)ha, (void*)ha, n, ncclHalf, ncclSum, g_comm, g_stream));
  snprintf(what, sizeof what, "all-reduce half sum of %zu", n);
  same(ha, hwant, n * 2, what);
  CUdeviceptr ba = upload(bin, n * 2);
  NC(ncclAllReduce((void*)ba, (void*)ba, n, ncclBfloat16, ncclSum, g_comm, g_stream));
  snprintf(what, sizeof what, "all-reduce bfloat16 sum of %zu", n);
  same(ba, bwant, n * 2, what);
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  CU(cuMemFree(fa));
  CU(cuMemFree(ha));
  CU(cuMemFree(ba));
  free(in), free(want), free(fin), free(fwant), free(hin), free(hwant), free(bin), free(bwant);
}

static void check_others(void) {
  const size_t n = 1001;
  int32_t in[1001], want[1001];
  /* Max. */
  for (size_t i = 0; i < n; ++i) {
    int m = value(0, i);
    for (int r = 1; r < g_nranks; ++r) m = value(r, i) > m ? value(r, i) : m;
    in[i] = value(g_rank, i), want[i] = m;
  }
  CUdeviceptr a = upload(in, sizeof in);
  NC(ncclAllReduce((void*)a, (void*)a, n, ncclInt32, ncclMax, g_comm, g_stream));
  same(a, want, sizeof in, "all-reduce int32 max");
  /* Avg of floats: the sum is an integer, its half exact. */
  float f[1001], fw[1001];
  for (size_t i = 0; i < n; ++i) {
    int s = 0;
    for (int r = 0; r < g_nranks; ++r) s += value(r, i);
    f[i] = (float)value(g_rank, i), fw[i] = (float)s / (float)g_nranks;
  }
  CUdeviceptr fa = upload(f, sizeof f);
  NC(ncclAllReduce((void*)fa, (void*)fa, n, ncclFloat, ncclAvg, g_comm, g_stream));
  if (g_nranks == 1 || g_nranks == 2 || g_nranks == 4) same(fa, fw, sizeof f, "all-reduce float avg");
  /* A pre-multiplied sum (x * 2 summed), scalar from the host. */
  float two = 2.0f;
  ncclRedOp_t premul;
  NC(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat, ncclScalarHostImmediate, g_comm));
  for (size_t i = 0; i < n; ++i) {
    int s = 0;
    for (int r = 0; r < g_nranks; ++r) s += value(r, i);
    f[i] = (float)value(g_rank, i), fw[i] = 2.0f * (float)s;
  }
  CUdeviceptr pa = upload(f, sizeof f);
  NC(ncclAllReduce((void*)pa, (void*)pa, n, ncclFloat, premul, g_comm, g_stream));
  same(pa, fw, sizeof f, "all-reduce pre-multiplied sum");
  NC(ncclRedOpDestroy(premul, g_comm));
  /* Broadcast of 12345 bytes from the last rank. */
  const size_t nb = 12345;
  unsigned char* bytes = malloc(nb);
  unsigned char* bwant = malloc(nb);
  const int root = g_nranks - 1;
  for (size_t i = 0; i < nb; ++i) bytes[i] = (unsigned char)(i * 13 + g_rank), bwant[i] = (unsigned char)(i * 13 + root);
  CUdeviceptr bb = upload(bytes, nb);
  NC(ncclBroadcast((void*)bb, (void*)bb, nb, ncclUint8, root, g_comm, g_stream));
  same(bb, bwant, nb, "broadcast of 12345 bytes");
  /* Reduce to rank 0. */
  CUdeviceptr ra = upload(in, sizeof in), rb = upload(in, sizeof in);
  NC(ncclReduce((void*)ra, (void*)rb, n, ncclInt32, ncclMax, 0, g_comm, g_stream));
  if (g_rank == 0) same(rb, want, sizeof in, "reduce int32 max to rank 0");
  /* All-gather of 1001 int32 per rank. */
  int32_t* all = malloc(sizeof in * (size_t)g_nranks);
  for (int r = 0; r < g_nranks; ++r)
    for (size_t i = 0; i < n; ++i) all[(size_t)r * n + i] = value(r, i);
  CUdeviceptr ga = upload(in, sizeof in), gb = 0;
  CU(cuMemAlloc(&gb, sizeof in * (size_t)g_nranks));
  NC(ncclAllGather((void*)ga, (void*)gb, n, ncclInt32, g_comm, g_stream));
  same(gb, all, sizeof in * (size_t)g_nranks, "all-gather of 1001 int32");
  /* Reduce-scatter: rank r's chunk p is value(r, p * n + i); rank p gets the sums of chunk p. */
  int32_t* scat = malloc(sizeof in * (size_t)g_nranks);
  for (size_t i = 0; i < n * (size_t)g_nranks; ++i) scat[i] = value(g_rank, i);
  for (size_t i = 0; i < n; ++i) {
    int s = 0;
    for (int r = 0; r < g_nranks; ++r) s += value(r, (size_t)g_rank * n + i);
    want[i] = s;
  }
  CUdeviceptr sa = upload(scat, sizeof in * (size_t)g_nranks), sb = 0;
  CU(cuMemAlloc(&sb, sizeof in));
  NC(ncclReduceScatter((void*)sa, (void*)sb, n, ncclInt32, ncclSum, g_comm, g_stream));
  same(sb, want, sizeof in, "reduce-scatter of 1001 int32");
  /* All-to-all: chunk p of rank r goes to rank p, at position r. */
  for (int r = 0; r < g_nranks; ++r)
    for (size_t i = 0; i < n; ++i) all[(size_t)r * n + i] = value(r, (size_t)g_rank * n + i);
  NC(ncclAlltoAll((void*)sa, (void*)gb, n, ncclInt32, g_comm, g_stream));
  same(gb, all, sizeof in * (size_t)g_nranks, "all-to-all of 1001 int32 per rank");
  /* Send/recv in a group, receive posted first: a ring of 77777 bytes. */
  const size_t nr = 77777;
  const int next = (g_rank + 1) % g_nranks, prev = (g_rank + g_nranks - 1) % g_nranks;
  unsigned char* ring = malloc(nr);
  unsigned char* rwant = malloc(nr);
  for (size_t i = 0; i < nr; ++i) ring[i] = (unsigned char)(i * 31 + g_rank), rwant[i] = (unsigned char)(i * 31 + prev);
  CUdeviceptr sbuf = upload(ring, nr), rbuf = 0;
  CU(cuMemAlloc(&rbuf, nr));
  NC(ncclGroupStart());
  NC(ncclRecv((void*)rbuf, nr, ncclUint8, prev, g_comm, g_stream));
  NC(ncclSend((void*)sbuf, nr, ncclUint8, next, g_comm, g_stream));
  NC(ncclGroupEnd());
  same(rbuf, rwant, nr, "send/recv ring of 77777 bytes in a group");
  /* Refused at once: a data type out of range, a root out of range. */
  ncclResult_t bad = ncclAllReduce((void*)a, (void*)a, n, (ncclDataType_t)99, ncclSum, g_comm, g_stream);
  CHECK(bad == ncclInvalidArgument, "rank %d: a bad data type gave %d, not ncclInvalidArgument", g_rank, bad);
  bad = ncclBroadcast((void*)a, (void*)a, n, ncclInt32, g_nranks, g_comm, g_stream);
  CHECK(bad == ncclInvalidArgument, "rank %d: a bad root gave %d, not ncclInvalidArgument", g_rank, bad);
  ncclResult_t async = ncclInternalError;
  NC(ncclCommGetAsyncError(g_comm, &async));
  CHECK(async == ncclSuccess, "rank %d: async error %d", g_rank, async);
  CU(cuStreamSynchronize(g_stream));
  CUdeviceptr bufs[] = {a, fa, pa, bb, ra, rb, ga, gb, sa, sb, sbuf, rbuf};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) CU(cuMemFree(bufs[i]));
  free(bytes), free(bwant), free(all), free(scat), free(ring), free(rwant);
}

static int run_rank(int rank, int nranks, int id_in, const int* id_out) {
  g_rank = rank;
  g_nranks = nranks;
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  if (count < 1) return 1;
  const int dev = rank % count;
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CU(cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING));
  int version = 0;
  NC(ncclGetVersion(&version));
  CHECK(version >= 22800, "rank %d: NCCL version %d", rank, version);
  ncclUniqueId id;
  if (rank == 0) {
    NC(ncclGetUniqueId(&id));
    for (int r = 1; r < nranks; ++r) CHECK(write(id_out[r], &id, sizeof id) == sizeof id, "write id");
  } else {
    CHECK(read(id_in, &id, sizeof id) == sizeof id, "read id");
  }
  NC(ncclCommInitRank(&g_comm, nranks, id, rank));
  int n = -1, me = -1, d = -1;
  NC(ncclCommCount(g_comm, &n));
  NC(ncclCommUserRank(g_comm, &me));
  NC(ncclCommCuDevice(g_comm, &d));
  CHECK(n == nranks && me == rank && d == dev, "rank %d: comm says %d ranks, rank %d, device %d", rank, n, me, d);
  size_t sizes[] = {1, 7, 1001, 65537, 1000003};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) check_allreduce_sum(sizes[i]);
  check_others();
  NC(ncclCommDestroy(g_comm));
  CU(cuStreamDestroy(g_stream));
  printf("rank %d: %d checks, %d failed (device %d, NCCL %d)\n", rank, g_checks, g_failures, dev, version);
  fflush(stdout);
  return g_failures ? 1 : 0;
}

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 1 || nranks > 16) {
    fprintf(stderr, "usage: nccl_test NRANKS (1..16)\n");
    return 2;
  }
  int pipes[16][2];
  int out[16] = {0};
  for (int r = 1; r < nranks; ++r) {
    if (pipe(pipes[r]) != 0) return 2;
    out[r] = pipes[r][1];
  }
  for (int r = 1; r < nranks; ++r) {
    if (fork() == 0) exit(run_rank(r, nranks, pipes[r][0], NULL)); /* exit: the shim says goodbye */
  }
  int rc = run_rank(0, nranks, -1, out);
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
