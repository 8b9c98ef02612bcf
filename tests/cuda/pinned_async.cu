// Pinned memory, asynchronous copies and the newer launch and allocation paths, each checked:
// - host memory from cudaHostAlloc, cudaMallocHost and cudaHostRegister (pointer attributes, and
//   chunked cudaMemcpyAsync in both directions on two streams ordered by events, with a kernel
//   between, timed with events);
// - the default stream from two host threads (built twice: legacy default stream, and with
//   `--default-stream per-thread` as pinned_async_ptds, where each thread has its own);
// - stream-ordered allocation: cudaMallocAsync/cudaFreeAsync from the device's default pool and
//   cudaMallocFromPoolAsync from a pool of our own (release threshold, reserved memory, trim);
// - a cooperative launch whose kernel synchronizes the whole grid between rounds, sized by the
//   occupancy API (cudaOccupancyMaxActiveBlocksPerMultiprocessor, ...MaxPotentialBlockSize).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

namespace cg = cooperative_groups;

__global__ void transform(const int* in, int* out, int n, int k) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * k + 1;
}

static int expected(int x, int k) { return x * k + 1; }

static void host_memory() {
  const int n = 1 << 20, chunks = 8, chunk = n / chunks;
  const size_t bytes = n * sizeof(int);
  int *alloc = nullptr, *malloc_host = nullptr;
  CUDA(cudaHostAlloc(&alloc, bytes, cudaHostAllocDefault));
  CUDA(cudaMallocHost(&malloc_host, bytes));
  int* registered = static_cast<int*>(std::aligned_alloc(4096, bytes));
  CUDA(cudaHostRegister(registered, bytes, cudaHostRegisterDefault));
  if (!alloc || !malloc_host) return;

  const struct {
    int* p;
    const char* name;
  } kinds[] = {{alloc, "cudaHostAlloc"}, {malloc_host, "cudaMallocHost"}, {registered, "cudaHostRegister"}};
  for (const auto& k : kinds) {
    cudaPointerAttributes attr{};
    CUDA(cudaPointerGetAttributes(&attr, k.p));
    CHECK(attr.type == cudaMemoryTypeHost, "%s memory: pointer type %d", k.name, static_cast<int>(attr.type));
  }
  unsigned int flags = ~0u;
  CUDA(cudaHostGetFlags(&flags, alloc));
  std::printf("cudaHostAlloc flags %#x; pointer attributes say host memory for all three kinds\n", flags);

  int *d_in = nullptr, *d_out = nullptr;
  CUDA(cudaMalloc(&d_in, bytes));
  CUDA(cudaMalloc(&d_out, bytes));
  for (int i = 0; i < n; ++i) alloc[i] = i - n / 2;
  std::memset(malloc_host, 0, bytes);
  std::memset(registered, 0, bytes);

  // Per chunk: copy in on stream A, event; stream B waits, transforms, copies out to
  // cudaMallocHost memory, event; stream A waits and copies the same result to registered memory.
  cudaStream_t a = nullptr, b = nullptr;
  CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr, in_done[chunks], out_done[chunks];
  CUDA(cudaEventCreate(&start));
  CUDA(cudaEventCreate(&stop));
  for (int c = 0; c < chunks; ++c) {
    CUDA(cudaEventCreateWithFlags(&in_done[c], cudaEventDisableTiming));
    CUDA(cudaEventCreateWithFlags(&out_done[c], cudaEventDisableTiming));
  }
  CUDA(cudaEventRecord(start, a));
  for (int c = 0; c < chunks; ++c) {
    const size_t off = static_cast<size_t>(c) * chunk, cb = chunk * sizeof(int);
    CUDA(cudaMemcpyAsync(d_in + off, alloc + off, cb, cudaMemcpyHostToDevice, a));
    CUDA(cudaEventRecord(in_done[c], a));
    CUDA(cudaStreamWaitEvent(b, in_done[c], 0));
    transform<<<64, 256, 0, b>>>(d_in + off, d_out + off, chunk, 3);
    CUDA(cudaGetLastError());
    CUDA(cudaMemcpyAsync(malloc_host + off, d_out + off, cb, cudaMemcpyDeviceToHost, b));
    CUDA(cudaEventRecord(out_done[c], b));
    CUDA(cudaStreamWaitEvent(a, out_done[c], 0));
    CUDA(cudaMemcpyAsync(registered + off, d_out + off, cb, cudaMemcpyDeviceToHost, a));
  }
  CUDA(cudaEventRecord(stop, a));
  CUDA(cudaEventSynchronize(stop));
  CUDA(cudaStreamSynchronize(b));
  float ms = -1;
  CUDA(cudaEventElapsedTime(&ms, start, stop));
  int bad_b = 0, bad_r = 0;
  for (int i = 0; i < n; ++i) {
    bad_b += malloc_host[i] != expected(alloc[i], 3);
    bad_r += registered[i] != expected(alloc[i], 3);
  }
  std::printf("%d chunks, two streams, events: %d of %d right in cudaMallocHost memory, %d in registered memory "
              "(%.3f ms)\n", chunks, n - bad_b, n, n - bad_r, ms);
  CHECK(bad_b == 0 && bad_r == 0, "pinned round trip: %d and %d wrong", bad_b, bad_r);
  CHECK(ms >= 0, "elapsed time %f", ms);

  for (int c = 0; c < chunks; ++c) {
    CUDA(cudaEventDestroy(in_done[c]));
    CUDA(cudaEventDestroy(out_done[c]));
  }
  CUDA(cudaEventDestroy(start));
  CUDA(cudaEventDestroy(stop));
  CUDA(cudaStreamDestroy(a));
  CUDA(cudaStreamDestroy(b));
  CUDA(cudaFree(d_in));
  CUDA(cudaFree(d_out));
  CUDA(cudaFreeHost(alloc));
  CUDA(cudaFreeHost(malloc_host));
  CUDA(cudaHostUnregister(registered));
  std::free(registered);
}

// Stream 0 from two host threads at once: legacy in the ordinary build, each thread's own stream
// in the per-thread build. Either way each thread's work is ordered on its own default stream.
static void default_stream_threads() {
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
  const bool per_thread = true;
#else
  const bool per_thread = false;
#endif
  unsigned long long ids[2] = {0, 0};
  int bad[2] = {-1, -1};
  auto work = [&](int t) {
    const int n = 1 << 18;
    int *h = nullptr, *d_in = nullptr, *d_out = nullptr;
    CUDA(cudaSetDevice(0));
    CUDA(cudaStreamGetId(0, &ids[t]));
    CUDA(cudaMallocHost(&h, n * sizeof(int)));
    CUDA(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA(cudaMalloc(&d_out, n * sizeof(int)));
    if (!h || !d_in || !d_out) return;
    bad[t] = 0;
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < n; ++i) h[i] = i * (t + 1) + round;
      CUDA(cudaMemcpyAsync(d_in, h, n * sizeof(int), cudaMemcpyHostToDevice, 0));
      transform<<<32, 256>>>(d_in, d_out, n, t + 2);
      CUDA(cudaMemcpyAsync(h, d_out, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
      CUDA(cudaStreamSynchronize(0));
      for (int i = 0; i < n; ++i) bad[t] += h[i] != expected(i * (t + 1) + round, t + 2);
    }
    CUDA(cudaFree(d_in));
    CUDA(cudaFree(d_out));
    CUDA(cudaFreeHost(h));
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  std::printf("default stream (%s) from two threads: stream ids %llu and %llu; %d and %d wrong\n",
              per_thread ? "per-thread" : "legacy", ids[0], ids[1], bad[0], bad[1]);
  CHECK(bad[0] == 0 && bad[1] == 0, "default-stream threads: %d and %d wrong", bad[0], bad[1]);
  if (per_thread)
    CHECK(ids[0] != ids[1], "per-thread default streams of two threads have the same id %llu", ids[0]);
  else
    CHECK(ids[0] == ids[1], "the legacy default stream has ids %llu and %llu in two threads", ids[0], ids[1]);
}

static void stream_ordered_allocation() {
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 1 << 20;
  std::vector<int> h(n), got(n);
  for (int i = 0; i < n; ++i) h[i] = 7 * i - 3;

  // Default pool.
  int *d_in = nullptr, *d_out = nullptr;
  CUDA(cudaMallocAsync(&d_in, n * sizeof(int), s));
  CUDA(cudaMemcpyAsync(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));

  // Our own pool.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  CUDA(cudaMemPoolCreate(&pool, &props));
  unsigned long long threshold = 64ull << 20;
  CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&d_out), n * sizeof(int), pool, s));
  transform<<<128, 256, 0, s>>>(d_in, d_out, n, -2);
  CUDA(cudaGetLastError());
  CUDA(cudaMemcpyAsync(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA(cudaFreeAsync(d_in, s));
  CUDA(cudaStreamSynchronize(s));
  unsigned long long reserved = 0, used = 0;
  CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  CUDA(cudaFreeAsync(d_out, s));
  CUDA(cudaStreamSynchronize(s));
  unsigned long long used_after = ~0ull;
  CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used_after));
  CUDA(cudaMemPoolTrimTo(pool, 0));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += got[i] != expected(h[i], -2);
  std::printf("cudaMallocAsync (default pool) and cudaMallocFromPoolAsync (own pool: %llu bytes reserved, %llu used, "
              "%llu after cudaFreeAsync): %d of %d right\n", reserved, used, used_after, n - bad, n);
  CHECK(bad == 0, "stream-ordered allocation: %d wrong", bad);
  CHECK(used >= n * sizeof(int) && reserved >= used, "pool reserved %llu, used %llu", reserved, used);
  CHECK(used_after == 0, "pool still uses %llu bytes after cudaFreeAsync", used_after);
  CUDA(cudaMemPoolDestroy(pool));
  CUDA(cudaStreamDestroy(s));
}

// rounds x: next[i] = cur[(i + shift) % n] + 1, the whole grid synchronizing between rounds, so
// every value reads one written by another block in the round before.
__global__ void rotate_rounds(int* a, int* b, int n, int shift, int rounds) {
  cg::grid_group grid = cg::this_grid();
  int *cur = a, *next = b;
  for (int r = 0; r < rounds; ++r) {
    for (int i = grid.thread_rank(); i < n; i += grid.size()) next[i] = cur[(i + shift) % n] + 1;
    grid.sync();
    int* t = cur;
    cur = next;
    next = t;
  }
}

static void cooperative_launch() {
  int supported = 0, sms = 0;
  CUDA(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, 0));
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(supported == 1, "cooperative launch not supported");
  const int threads = 256;
  int per_sm = 0, min_grid = 0, best_block = 0;
  CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rotate_rounds, threads, 0));
  CUDA(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, rotate_rounds, 0, 0));
  cudaFuncAttributes fa{};
  CUDA(cudaFuncGetAttributes(&fa, rotate_rounds));
  std::printf("occupancy: %d blocks of %d threads per SM, %d SMs; best block size %d (min grid %d); %d registers, "
              "max %d threads per block\n", per_sm, threads, sms, best_block, min_grid, fa.numRegs, fa.maxThreadsPerBlock);
  CHECK(per_sm >= 1, "occupancy %d blocks per SM", per_sm);
  CHECK(best_block >= 32 && best_block <= 1024 && min_grid >= sms, "best block %d, min grid %d", best_block, min_grid);
  if (!supported || per_sm < 1 || sms < 1) return;

  const int blocks = per_sm * sms, n = blocks * threads * 2 + 77, shift = threads * 5 + 3, rounds = 6;
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  int *a = nullptr, *b = nullptr;
  CUDA(cudaMalloc(&a, n * sizeof(int)));
  CUDA(cudaMalloc(&b, n * sizeof(int)));
  CUDA(cudaMemcpy(a, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreate(&s));
  int nn = n, sh = shift, rr = rounds;
  void* args[] = {&a, &b, &nn, &sh, &rr};
  CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(rotate_rounds), dim3(blocks), dim3(threads), args, 0, s));
  CUDA(cudaStreamSynchronize(s));
  std::vector<int> got(n);
  CUDA(cudaMemcpy(got.data(), rounds % 2 ? b : a, n * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += got[i] != static_cast<int>((i + static_cast<long long>(shift) * rounds) % n) + rounds;
  std::printf("cooperative launch: %d blocks x %d threads, %d grid-synchronized rounds over %d values: %d wrong\n",
              blocks, threads, rounds, n, bad);
  CHECK(bad == 0, "cooperative kernel: %d wrong", bad);
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaFree(a));
  CUDA(cudaFree(b));
}

int main() {
  CUDA(cudaSetDevice(0));
  host_memory();
  default_stream_threads();
  stream_ordered_allocation();
  cooperative_launch();
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return finish();
}
