// CUDA graphs. By stream capture: memset, kernels, a device-to-device copy and a copy into pinned
// host memory, instantiated and launched 10 times (each launch adds to an accumulator, so every
// launch must run exactly once), then updated in place with cudaGraphExecUpdate from a capture
// with a different kernel argument and launched again. Built explicitly: a memset node, kernel
// nodes and a device-to-device memcpy node with dependencies, launched, then a kernel node's
// arguments changed with cudaGraphExecKernelNodeSetParams and launched again.
#include <cuda_runtime.h>

#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

__global__ void add(int* a, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += v;
}

__global__ void axpy(const int* x, int* y, int k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += k * x[i];
}

constexpr int kN = 5000, kThreads = 128, kBlocks = (kN + kThreads - 1) / kThreads;
constexpr size_t kBytes = kN * sizeof(int);

struct Buffers {
  int *src, *ones, *copy, *acc, *snapshot;  // snapshot: device memory, copied out after the launches
  int* host;                                // pinned host memory
};

// Per launch: acc += k * src + 1, and snapshot = acc. (The graph copies device to device: a copy
// into host memory captured in a graph cannot run through rgpu, where the graph runs on another
// machine; rgpu refuses it with a message naming the call, client/driver/stream_capture.cpp.)
static cudaGraph_t capture(cudaStream_t s, const Buffers& b, int k) {
  cudaGraph_t graph = nullptr;
  CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusActive, "stream capture status %d", static_cast<int>(status));
  CUDA(cudaMemsetAsync(b.ones, 0, kBytes, s));
  add<<<kBlocks, kThreads, 0, s>>>(b.ones, 1, kN);
  CUDA(cudaMemcpyAsync(b.copy, b.src, kBytes, cudaMemcpyDeviceToDevice, s));
  axpy<<<kBlocks, kThreads, 0, s>>>(b.copy, b.acc, k, kN);
  axpy<<<kBlocks, kThreads, 0, s>>>(b.ones, b.acc, 1, kN);
  CUDA(cudaMemcpyAsync(b.snapshot, b.acc, kBytes, cudaMemcpyDeviceToDevice, s));
  CUDA(cudaStreamEndCapture(s, &graph));
  CHECK(graph != nullptr, "capture gave no graph");
  return graph;
}

static int count_bad(const int* got, const std::vector<int>& want) {
  int bad = 0;
  for (int i = 0; i < kN; ++i) bad += got[i] != want[i];
  return bad;
}

static void captured(cudaStream_t s) {
  Buffers b{};
  CUDA(cudaMalloc(&b.src, kBytes));
  CUDA(cudaMalloc(&b.ones, kBytes));
  CUDA(cudaMalloc(&b.copy, kBytes));
  CUDA(cudaMalloc(&b.acc, kBytes));
  CUDA(cudaMalloc(&b.snapshot, kBytes));
  CUDA(cudaMallocHost(&b.host, kBytes));
  if (!b.src || !b.ones || !b.copy || !b.acc || !b.snapshot || !b.host) return;
  std::vector<int> src(kN), acc(kN);
  for (int i = 0; i < kN; ++i) {
    src[i] = i % 1000 - 500;
    acc[i] = i;
  }
  CUDA(cudaMemcpyAsync(b.src, src.data(), kBytes, cudaMemcpyHostToDevice, s));
  CUDA(cudaMemcpyAsync(b.acc, acc.data(), kBytes, cudaMemcpyHostToDevice, s));
  CUDA(cudaStreamSynchronize(s));

  const int k1 = 3, k2 = -2;
  cudaGraph_t g1 = capture(s, b, k1);
  size_t nodes = 0;
  CUDA(cudaGraphGetNodes(g1, nullptr, &nodes));
  std::printf("captured graph: %zu nodes\n", nodes);
  CHECK(nodes == 6, "captured graph has %zu nodes, 6 captured", nodes);
  cudaGraphExec_t exec = nullptr;
  CUDA(cudaGraphInstantiate(&exec, g1, 0));
  for (int l = 0; l < 10; ++l) CUDA(cudaGraphLaunch(exec, s));
  CUDA(cudaMemcpyAsync(b.host, b.snapshot, kBytes, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) acc[i] += 10 * (k1 * src[i] + 1);
  int bad = count_bad(b.host, acc);
  std::printf("10 launches of the captured graph: %d of %d right\n", kN - bad, kN);
  CHECK(bad == 0, "after 10 launches %d values wrong (first: got %d want %d)", bad, b.host[0], acc[0]);

  cudaGraph_t g2 = capture(s, b, k2);
  cudaGraphExecUpdateResultInfo info{};
  CUDA(cudaGraphExecUpdate(exec, g2, &info));
  CHECK(info.result == cudaGraphExecUpdateSuccess, "cudaGraphExecUpdate result %d", static_cast<int>(info.result));
  for (int l = 0; l < 3; ++l) CUDA(cudaGraphLaunch(exec, s));
  CUDA(cudaMemcpyAsync(b.host, b.snapshot, kBytes, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) acc[i] += 3 * (k2 * src[i] + 1);
  bad = count_bad(b.host, acc);
  std::printf("3 launches after cudaGraphExecUpdate (k %d -> %d): %d of %d right\n", k1, k2, kN - bad, kN);
  CHECK(bad == 0, "after the update %d values wrong", bad);

  CUDA(cudaGraphExecDestroy(exec));
  CUDA(cudaGraphDestroy(g1));
  CUDA(cudaGraphDestroy(g2));
  CUDA(cudaFree(b.src));
  CUDA(cudaFree(b.ones));
  CUDA(cudaFree(b.copy));
  CUDA(cudaFree(b.acc));
  CUDA(cudaFree(b.snapshot));
  CUDA(cudaFreeHost(b.host));
}

// memset a = 7 -> kernel a += v -> memcpy b = a (device to device) -> kernel b += 100.
static void explicit_graph(cudaStream_t s) {
  int *a = nullptr, *b = nullptr;
  CUDA(cudaMalloc(&a, kBytes));
  CUDA(cudaMalloc(&b, kBytes));
  cudaGraph_t graph = nullptr;
  CUDA(cudaGraphCreate(&graph, 0));

  cudaMemsetParams ms{};
  ms.dst = a;
  ms.value = 7;
  ms.elementSize = sizeof(int);
  ms.width = kN;
  ms.height = 1;
  cudaGraphNode_t memset_node = nullptr, add_node = nullptr, copy_node = nullptr, add_b_node = nullptr;
  CUDA(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &ms));

  int v = 5, n = kN;
  void* add_args[] = {&a, &v, &n};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(add);
  kp.gridDim = dim3(kBlocks);
  kp.blockDim = dim3(kThreads);
  kp.sharedMemBytes = 0;
  kp.kernelParams = add_args;
  kp.extra = nullptr;
  CUDA(cudaGraphAddKernelNode(&add_node, graph, &memset_node, 1, &kp));

  cudaMemcpy3DParms cp{};
  cp.srcPtr = make_cudaPitchedPtr(a, kBytes, kN, 1);
  cp.dstPtr = make_cudaPitchedPtr(b, kBytes, kN, 1);
  cp.extent = make_cudaExtent(kBytes, 1, 1);
  cp.kind = cudaMemcpyDeviceToDevice;
  CUDA(cudaGraphAddMemcpyNode(&copy_node, graph, &add_node, 1, &cp));

  int hundred = 100;
  void* add_b_args[] = {&b, &hundred, &n};
  cudaKernelNodeParams kb = kp;
  kb.kernelParams = add_b_args;
  CUDA(cudaGraphAddKernelNode(&add_b_node, graph, &copy_node, 1, &kb));

  size_t nodes = 0, edges = 0;
  CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  CHECK(nodes == 4 && edges == 3, "explicit graph: %zu nodes, %zu edges (want 4, 3)", nodes, edges);

  cudaGraphExec_t exec = nullptr;
  CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<int> ha(kN), hb(kN);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // a += 6 instead of 5, in the instantiated graph only
      v = 6;
      CUDA(cudaGraphExecKernelNodeSetParams(exec, add_node, &kp));
    }
    CUDA(cudaGraphLaunch(exec, s));
    CUDA(cudaMemcpyAsync(ha.data(), a, kBytes, cudaMemcpyDeviceToHost, s));
    CUDA(cudaMemcpyAsync(hb.data(), b, kBytes, cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    const int want_a = 7 + v, want_b = want_a + 100;
    int bad = 0;
    for (int i = 0; i < kN; ++i) bad += ha[i] != want_a || hb[i] != want_b;
    std::printf("explicit graph (memset, kernel, memcpy D2D, kernel)%s: a = %d, b = %d; %d of %d right\n",
                round ? " after cudaGraphExecKernelNodeSetParams" : "", ha[0], hb[0], kN - bad, kN);
    CHECK(bad == 0, "explicit graph round %d: %d wrong (a[0] %d want %d, b[0] %d want %d)", round, bad, ha[0], want_a,
          hb[0], want_b);
  }
  CUDA(cudaGraphExecDestroy(exec));
  CUDA(cudaGraphDestroy(graph));
  CUDA(cudaFree(a));
  CUDA(cudaFree(b));
}

int main() {
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  captured(s);
  explicit_graph(s);
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaGetLastError());
  return finish();
}
