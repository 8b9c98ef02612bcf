// The CUDA runtime starting on the driver under it: device count and properties, a device
// allocation with a round trip of data, events. No kernels (the fake driver runs only the kernels
// it knows), so this is the runtime's own start-up path: export tables, cuGetProcAddress, the
// primary context, module registration of the runtime's own code.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

int main() {
  int count = -1;
  CUDA(cudaGetDeviceCount(&count));
  CHECK(count >= 1, "cudaGetDeviceCount gave %d", count);
  if (count < 1) return finish();

  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof prop);
  CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s, %d SMs, compute capability %d.%d, %zu MiB\n", prop.name, prop.multiProcessorCount,
              prop.major, prop.minor, prop.totalGlobalMem >> 20);
  CHECK(prop.name[0] != '\0', "empty device name");
  CHECK(prop.multiProcessorCount > 0, "SM count %d", prop.multiProcessorCount);
  CHECK(prop.major >= 3 && prop.major < 20, "compute capability major %d", prop.major);
  CHECK(prop.totalGlobalMem > 0, "no global memory");
  // The same numbers through the attribute API.
  int sms = 0, major = 0;
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK(sms == prop.multiProcessorCount, "attribute SM count %d vs property %d", sms, prop.multiProcessorCount);
  CHECK(major == prop.major, "attribute major %d vs property %d", major, prop.major);

  CUDA(cudaSetDevice(0));
  const size_t n = 1 << 20;
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
  void* d = nullptr;
  CUDA(cudaMalloc(&d, n));
  CHECK(d != nullptr, "cudaMalloc gave NULL");
  CUDA(cudaMemcpy(d, in.data(), n, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(static_cast<char*>(d) + n / 2, 0x5a, 16));
  CUDA(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 16; ++i) in[n / 2 + i] = 0x5a;
  CHECK(in == out, "data came back different");

  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA(cudaEventCreate(&start));
  CUDA(cudaEventCreate(&stop));
  CUDA(cudaEventRecord(start, 0));
  CUDA(cudaMemcpyAsync(d, in.data(), n, cudaMemcpyHostToDevice, 0));
  CUDA(cudaEventRecord(stop, 0));
  CUDA(cudaEventSynchronize(stop));
  CUDA(cudaEventQuery(stop));
  float ms = -1;
  CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0, "elapsed time %f", ms);
  CUDA(cudaEventDestroy(start));
  CUDA(cudaEventDestroy(stop));
  CUDA(cudaFree(d));
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return finish();
}
