// Asynchronous copies with pinned memory through the CUDA runtime, with no kernels, so that it
// runs on the fake driver in CI as well as on a GPU: cudaHostAlloc, cudaMallocHost and
// cudaHostRegister buffers; chunked cudaMemcpyAsync host-to-device, device-to-device and
// device-to-host on two streams ordered by events, with cudaMemsetAsync between; events timed and
// queried; cudaMallocAsync/cudaFreeAsync from the default pool and from a pool of our own.
// Host functions between copies: runtime_host_func.cu.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

// Two streams: per chunk, A copies the chunk in from cudaHostAlloc memory and records an event; B
// waits, overwrites the chunk's first 64 bytes with the chunk number (memset), copies it device to
// device and out to cudaMallocHost memory and records an event; A waits and copies the same device
// data out to registered memory.
static void two_streams() {
  const int chunks = 8;
  const size_t chunk = 256 << 10, bytes = chunks * chunk;
  unsigned char *in = nullptr, *out = nullptr;
  CUDA(cudaHostAlloc(&in, bytes, cudaHostAllocDefault));
  CUDA(cudaMallocHost(&out, bytes));
  auto* registered = static_cast<unsigned char*>(std::aligned_alloc(4096, bytes));
  CUDA(cudaHostRegister(registered, bytes, cudaHostRegisterDefault));
  unsigned char *d_in = nullptr, *d_out = nullptr;
  CUDA(cudaMalloc(&d_in, bytes));
  CUDA(cudaMalloc(&d_out, bytes));
  if (!in || !out || !d_in || !d_out) return;
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + i / 4096);
  std::memset(out, 0, bytes);
  std::memset(registered, 0, bytes);
  std::vector<unsigned char> want(in, in + bytes);
  for (int c = 0; c < chunks; ++c) std::memset(&want[c * chunk], 0x40 + c, 64);

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
    const size_t off = c * chunk;
    CUDA(cudaMemcpyAsync(d_in + off, in + off, chunk, cudaMemcpyHostToDevice, a));
    CUDA(cudaEventRecord(in_done[c], a));
    CUDA(cudaStreamWaitEvent(b, in_done[c], 0));
    CUDA(cudaMemsetAsync(d_in + off, 0x40 + c, 64, b));
    CUDA(cudaMemcpyAsync(d_out + off, d_in + off, chunk, cudaMemcpyDeviceToDevice, b));
    CUDA(cudaMemcpyAsync(out + off, d_out + off, chunk, cudaMemcpyDeviceToHost, b));
    CUDA(cudaEventRecord(out_done[c], b));
    CUDA(cudaStreamWaitEvent(a, out_done[c], 0));
    CUDA(cudaMemcpyAsync(registered + off, d_out + off, chunk, cudaMemcpyDeviceToHost, a));
  }
  CUDA(cudaEventRecord(stop, a));
  CUDA(cudaEventSynchronize(stop));
  CUDA(cudaEventQuery(stop));
  CUDA(cudaStreamSynchronize(b));
  CUDA(cudaStreamQuery(a));
  CUDA(cudaStreamQuery(b));
  float ms = -1;
  CUDA(cudaEventElapsedTime(&ms, start, stop));
  const bool out_ok = std::memcmp(out, want.data(), bytes) == 0;
  const bool registered_ok = std::memcmp(registered, want.data(), bytes) == 0;
  std::printf("%d chunks of %zu KiB over two streams and events (%.3f ms): cudaMallocHost copy %s, registered copy %s\n",
              chunks, chunk >> 10, ms, out_ok ? "right" : "WRONG", registered_ok ? "right" : "WRONG");
  CHECK(out_ok, "data copied to cudaMallocHost memory differs");
  CHECK(registered_ok, "data copied to registered memory differs");
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
  CUDA(cudaFreeHost(in));
  CUDA(cudaFreeHost(out));
  CUDA(cudaHostUnregister(registered));
  std::free(registered);
}

static void stream_ordered_allocation() {
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t bytes = 1 << 20;
  unsigned char *h = nullptr, *back = nullptr;
  CUDA(cudaMallocHost(&h, bytes));
  CUDA(cudaMallocHost(&back, bytes));
  if (!h || !back) return;
  for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>(i * 13 + 1);
  std::memset(back, 0, bytes);

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  CUDA(cudaMemPoolCreate(&pool, &props));
  unsigned char *a = nullptr, *b = nullptr;
  CUDA(cudaMallocAsync(reinterpret_cast<void**>(&a), bytes, s));
  CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&b), bytes, pool, s));
  CUDA(cudaMemcpyAsync(a, h, bytes, cudaMemcpyHostToDevice, s));
  CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
  CUDA(cudaFreeAsync(a, s));
  CUDA(cudaMemcpyAsync(back, b, bytes, cudaMemcpyDeviceToHost, s));
  CUDA(cudaFreeAsync(b, s));
  CUDA(cudaStreamSynchronize(s));
  const bool ok = std::memcmp(h, back, bytes) == 0;
  std::printf("cudaMallocAsync (default pool) -> cudaMallocFromPoolAsync (own pool) round trip: %s\n",
              ok ? "right" : "WRONG");
  CHECK(ok, "stream-ordered allocation round trip differs");
  CUDA(cudaMemPoolDestroy(pool));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaFreeHost(h));
  CUDA(cudaFreeHost(back));
}

int main() {
  CUDA(cudaSetDevice(0));
  two_streams();
  stream_ordered_allocation();
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return finish();
}
