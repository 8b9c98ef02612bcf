// Host implementations of the test kernels in tests/kernels/test_kernels.cu, found by name.
// Each reads its arguments at the offsets the image's layout gives (checked against the
// signatures by common/cuda_image_test) and touches device memory only through device_span, so
// a bad pointer argument is refused with CUDA_ERROR_ILLEGAL_ADDRESS before anything is written.
// Each does what the device code does with the same launch dimensions (one element per thread
// where the kernel indexes by thread, grid-stride where it strides).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "fakecuda/internal.h"

namespace fake {
namespace {

template <class T>
T arg(const uint8_t* params, size_t offset) {
  T v;
  std::memcpy(&v, params + offset, sizeof(T));
  return v;
}

// Elements a kernel indexed by blockIdx.x * blockDim.x + threadIdx.x touches for bound n.
size_t one_per_thread(const LaunchDims& d, long long n) {
  if (n <= 0) return 0;
  return size_t(std::min<unsigned long long>((unsigned long long)n, (unsigned long long)d.grid[0] * d.block[0]));
}

template <class T>
T* span_of(CUdeviceptr p, size_t count, Span* hold) {
  if (count > SIZE_MAX / sizeof(T) || !device_span(p, count * sizeof(T), hold)) return nullptr;
  return reinterpret_cast<T*>(hold->host);
}

// (const float* a, const float* b, float* c, int n)
CUresult vec_add(const LaunchDims& d, const uint8_t* prm) {
  size_t n = one_per_thread(d, arg<int>(prm, 24));
  if (n == 0) return CUDA_SUCCESS;
  Span ha, hb, hc;
  const float* a = span_of<float>(arg<CUdeviceptr>(prm, 0), n, &ha);
  const float* b = span_of<float>(arg<CUdeviceptr>(prm, 8), n, &hb);
  float* c = span_of<float>(arg<CUdeviceptr>(prm, 16), n, &hc);
  if (!a || !b || !c) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  return CUDA_SUCCESS;
}

// (unsigned* p, unsigned value, unsigned long long n), grid-stride
CUresult fill_u32(const LaunchDims& d, const uint8_t* prm) {
  unsigned long long n = arg<unsigned long long>(prm, 16);
  if (n == 0) return CUDA_SUCCESS;
  Span hp;
  uint32_t* p = span_of<uint32_t>(arg<CUdeviceptr>(prm, 0), size_t(n), &hp);
  if (!p) return CUDA_ERROR_ILLEGAL_ADDRESS;
  std::fill(p, p + n, arg<uint32_t>(prm, 8));
  return CUDA_SUCCESS;
}

// (float* x, Affine{float scale @8, double shift @16, int flag @24}, int n @32)
CUresult affine(const LaunchDims& d, const uint8_t* prm) {
  size_t n = one_per_thread(d, arg<int>(prm, 32));
  if (n == 0) return CUDA_SUCCESS;
  float scale = arg<float>(prm, 8);
  double shift = arg<double>(prm, 16);
  int flag = arg<int>(prm, 24);
  Span hx;
  float* x = span_of<float>(arg<CUdeviceptr>(prm, 0), n, &hx);
  if (!x) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (size_t i = 0; i < n; ++i) x[i] = float(double(x[i] * scale) + shift + (flag ? 1.0 : 0.0));
  return CUDA_SUCCESS;
}

// (long long ms)
CUresult spin(const LaunchDims&, const uint8_t* prm) {
  long long ms = arg<long long>(prm, 0);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return CUDA_SUCCESS;
}

CUresult empty(const LaunchDims&, const uint8_t*) { return CUDA_SUCCESS; }

// (int v): device printf prints once per thread.
CUresult print(const LaunchDims& d, const uint8_t* prm) {
  unsigned long long threads = 1;
  for (int i = 0; i < 3; ++i) threads *= (unsigned long long)d.grid[i] * d.block[i];
  int v = arg<int>(prm, 0);
  for (unsigned long long t = 0; t < threads; ++t) std::printf("rgpu_printf: %d\n", v);
  std::fflush(stdout);
  return CUDA_SUCCESS;
}

// (BigParams{unsigned v[2048]} @0, unsigned* out @8192, int n @8200): out[i] = v[i] + n
CUresult big_params(const LaunchDims& d, const uint8_t* prm) {
  size_t n = std::min<size_t>(one_per_thread(d, arg<int>(prm, 8200)), 2048);
  if (n == 0) return CUDA_SUCCESS;
  Span ho;
  uint32_t* out = span_of<uint32_t>(arg<CUdeviceptr>(prm, 8192), n, &ho);
  if (!out) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (size_t i = 0; i < n; ++i) out[i] = arg<uint32_t>(prm, 4 * i) + uint32_t(arg<int>(prm, 8200));
  return CUDA_SUCCESS;
}

struct Entry {
  const char* name;
  HostKernel fn;
};
constexpr Entry kKernels[] = {
    {"rgpu_vec_add", vec_add}, {"rgpu_fill_u32", fill_u32}, {"rgpu_affine", affine},
    {"rgpu_spin", spin},       {"rgpu_empty", empty},       {"rgpu_printf", print},
    {"rgpu_big_params", big_params},
};

}  // namespace

HostKernel find_host_kernel(const std::string& name) {
  for (const Entry& e : kKernels)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace fake
