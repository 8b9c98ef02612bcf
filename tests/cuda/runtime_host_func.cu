// Host functions in stream order between asynchronous copies of pinned memory, with no kernels,
// so that it runs on the fake driver in CI as well as on a GPU (host_callback.cu is the version
// with kernels and two streams). A copy from pinned memory reads it when the copy runs in stream
// order, not when it is queued: here each copy to the device reads what the host function before
// it wrote, so a copy that read the buffer early (at the call) or late changes the final value.
#include <cuda_runtime.h>

#include <cstdint>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

// A chain of steps on one stream: copy pinned `in` to the device, copy it back to pinned `out`,
// then a host function (cudaLaunchHostFunc and cudaStreamAddCallback in turn) sets
// in = 3 * out + step. The final value is right only if each host function ran after the copy
// before it and before the copy after it.
struct Chain {
  int64_t* in;
  int64_t* out;
  int step;
  int ran;
  int bad_status;  // stream callbacks given an error
};
static void CUDART_CB chain_step(void* p) {
  auto* c = static_cast<Chain*>(p);
  *c->in = *c->out * 3 + c->step;
  ++c->step;
  ++c->ran;
}
static void CUDART_CB chain_callback(cudaStream_t, cudaError_t status, void* p) {
  if (status != cudaSuccess) ++static_cast<Chain*>(p)->bad_status;
  chain_step(p);
}

static void host_functions() {
  int64_t *pinned = nullptr, *dev = nullptr;
  CUDA(cudaMallocHost(&pinned, 2 * sizeof(int64_t)));
  CUDA(cudaMalloc(&dev, sizeof(int64_t)));
  if (!pinned || !dev) return;
  Chain chain{&pinned[0], &pinned[1], 0, 0, 0};
  pinned[0] = 5;
  pinned[1] = -1;
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int steps = 10;
  for (int i = 0; i < steps; ++i) {
    CUDA(cudaMemcpyAsync(dev, chain.in, sizeof(int64_t), cudaMemcpyHostToDevice, s));
    CUDA(cudaMemcpyAsync(chain.out, dev, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
    if (i % 2 == 0)
      CUDA(cudaLaunchHostFunc(s, chain_step, &chain));
    else
      CUDA(cudaStreamAddCallback(s, chain_callback, &chain, 0));
  }
  CUDA(cudaStreamSynchronize(s));
  int64_t want = 5;
  for (int i = 0; i < steps; ++i) want = want * 3 + i;
  std::printf("%d host functions (cudaLaunchHostFunc, cudaStreamAddCallback in turn) between pinned copies: %d ran, "
              "final value %lld (want %lld)\n",
              steps, chain.ran, static_cast<long long>(pinned[0]), static_cast<long long>(want));
  CHECK(chain.ran == steps, "%d of %d host functions ran", chain.ran, steps);
  CHECK(chain.bad_status == 0, "%d stream callbacks were given an error", chain.bad_status);
  CHECK(pinned[0] == want, "final value %lld, want %lld", static_cast<long long>(pinned[0]), static_cast<long long>(want));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaFree(dev));
  CUDA(cudaFreeHost(pinned));
}

int main() {
  CUDA(cudaSetDevice(0));
  host_functions();
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return finish();
}
