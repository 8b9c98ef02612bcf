/* All-reduce bandwidth, as NVIDIA's nccl-tests measure it: `nccl_bench NRANKS [MAX_BYTES]` forks
 * NRANKS ranks (rank r on device r % device count; the unique id goes through pipes), and for
 * sizes from 8 bytes up to MAX_BYTES (default 1 GiB), doubling, times ITERS out-of-place float-sum
 * all-reduces after a warm-up, by the wall clock around the loop and a stream synchronize. Rank 0
 * prints one JSON object per size: bytes, time per all-reduce (us), algorithm bandwidth
 * (bytes / time, GB/s) and bus bandwidth (algbw * 2 (n - 1) / n, GB/s: what each link carries in a
 * ring; 0 with one rank). Built against rgpu's protocol/nccl.h; run by tests/gpu/nccl.sh locally
 * (NVIDIA's libraries) and through rgpu. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/nccl.h"

#define BENCH_NAME "nccl_bench"
#include "bench_clock.h"
#include "bench_cu.h"
#define NCX(call)                                                                                   \
  do {                                                                                              \
    ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess) BENCH_DIE("%s failed: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

static int run_rank(int rank, int nranks, size_t max_bytes, int id_in, const int* id_out) {
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, rank % count));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ncclUniqueId id;
  if (rank == 0) {
    NCX(ncclGetUniqueId(&id));
    for (int r = 1; r < nranks; ++r)
      if (write(id_out[r], &id, sizeof id) != sizeof id) BENCH_DIE("cannot pass the unique id");
  } else if (read(id_in, &id, sizeof id) != sizeof id) {
    BENCH_DIE("cannot read the unique id");
  }
  ncclComm_t comm;
  NCX(ncclCommInitRank(&comm, nranks, id, rank));
  CUdeviceptr send, recv;
  CU(cuMemAlloc(&send, max_bytes));
  CU(cuMemAlloc(&recv, max_bytes));
  CU(cuMemsetD32(send, 0x3f800000u, max_bytes / 4)); /* 1.0f */
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
    const size_t n = bytes / 4;
    const int iters = bytes <= (1u << 20) ? 50 : bytes <= (64u << 20) ? 20 : 5;
    for (int i = 0; i < 3; ++i) NCX(ncclAllReduce((void*)send, (void*)recv, n, ncclFloat, ncclSum, comm, stream));
    CU(cuStreamSynchronize(stream));
    const double t0 = bench_now_s();
    for (int i = 0; i < iters; ++i) NCX(ncclAllReduce((void*)send, (void*)recv, n, ncclFloat, ncclSum, comm, stream));
    CU(cuStreamSynchronize(stream));
    const double t = (bench_now_s() - t0) / iters;
    float first = 0;
    CU(cuMemcpyDtoH(&first, recv, sizeof first));
    if (first != (float)nranks) BENCH_DIE("all-reduce of %zu bytes gave %g, not %d", bytes, first, nranks);
    if (rank == 0) {
      const double algbw = bytes / t / 1e9;
      printf("{\"bytes\": %zu, \"us\": %.2f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"ranks\": %d}\n", bytes, t * 1e6,
             algbw, algbw * 2.0 * (nranks - 1) / nranks, nranks);
      fflush(stdout);
    }
  }
  NCX(ncclCommDestroy(comm));
  CU(cuMemFree(send));
  CU(cuMemFree(recv));
  return 0;
}

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  const size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)1 << 30;
  if (nranks < 1 || nranks > 16 || max_bytes < 8) BENCH_DIE("usage: nccl_bench NRANKS (1..16) [MAX_BYTES]");
  int pipes[16][2], out[16] = {0};
  for (int r = 1; r < nranks; ++r) {
    if (pipe(pipes[r]) != 0) BENCH_DIE("pipe");
    out[r] = pipes[r][1];
  }
  for (int r = 1; r < nranks; ++r)
    if (fork() == 0) exit(run_rank(r, nranks, max_bytes, pipes[r][0], NULL));
  int rc = run_rank(0, nranks, max_bytes, -1, out);
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
