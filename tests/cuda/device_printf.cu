// Device-side printf: a kernel prints one known line per thread, the host synchronizes and then
// prints a marker line. The program cannot read its own stdout, so it checks only its CUDA calls;
// tests/cuda/check_printf.sh runs it and checks that every expected line appears exactly once
// and before the marker (the driver flushes the device's printf buffer at the synchronize).
// The expected lines are kBlocks x kThreads of
//   rgpu-printf block B thread T value B*1000+T*7+3
// and check_printf.sh generates the same set: change both together.
#include <cuda_runtime.h>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

constexpr int kBlocks = 3, kThreads = 4;

__global__ void print_lines() {
  const int b = blockIdx.x, t = threadIdx.x;
  printf("rgpu-printf block %d thread %d value %d\n", b, t, b * 1000 + t * 7 + 3);
}

int main() {
  std::printf("rgpu-printf host: launching %d blocks of %d threads\n", kBlocks, kThreads);
  std::fflush(stdout);  // so this line precedes the device's lines even when stdout is a pipe
  print_lines<<<kBlocks, kThreads>>>();
  CUDA(cudaGetLastError());
  CUDA(cudaDeviceSynchronize());
  std::fflush(stdout);
  std::printf("rgpu-printf host marker after cudaDeviceSynchronize\n");
  std::fflush(stdout);
  return finish();
}
