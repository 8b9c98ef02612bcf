// cuRAND running kernels. Host API: XORWOW and Philox generators, uniform and normal, on a
// non-default stream, with statistics checks (mean, variance, tails) and the same seed giving the
// same numbers in a fresh generator (a different seed giving different ones). Device API
// (curand_kernel.h): XORWOW and Philox states initialised and drawn from in a kernel, the same
// checks on what the kernel produced, twice with the same seed.
//
// Tolerances are many standard errors wide (n = 2^22 draws), so a working generator never fails
// them and a broken path (zeros, garbage, a repeated block) always does.
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_kernel.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

static const char* curand_text(curandStatus_t s) {
  switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "other curandStatus_t";
  }
}

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CURAND(expr) CHECK_STATUS(expr, curand_text)

static const size_t kN = size_t(1) << 22;

struct Stats {
  double mean = 0, stddev = 0, min = INFINITY, max = -INFINITY, below = 0;  // below: fraction < threshold
};
static Stats stats(const std::vector<float>& v, double threshold) {
  Stats s;
  double sum = 0, sum2 = 0, below = 0;
  for (float x : v) {
    sum += x;
    sum2 += static_cast<double>(x) * x;
    below += x < threshold;
    s.min = std::fmin(s.min, x);
    s.max = std::fmax(s.max, x);
  }
  s.mean = sum / v.size();
  s.stddev = std::sqrt(std::fmax(0.0, sum2 / v.size() - s.mean * s.mean));
  s.below = below / v.size();
  return s;
}

// Uniform in (0, 1]: mean 1/2, standard deviation 1/sqrt(12), a quarter below 1/4.
static void check_uniform(const char* what, const std::vector<float>& v) {
  Stats s = stats(v, 0.25);
  std::printf("%s uniform: n %zu, mean %.5f, stddev %.5f, min %.3g, max %.6f, below 1/4 %.5f\n", what, v.size(), s.mean,
              s.stddev, s.min, s.max, s.below);
  CHECK(s.min > 0 && s.max <= 1, "%s uniform: range [%g, %g]", what, s.min, s.max);
  CHECK(std::fabs(s.mean - 0.5) < 0.003, "%s uniform: mean %g", what, s.mean);
  CHECK(std::fabs(s.stddev - std::sqrt(1.0 / 12)) < 0.003, "%s uniform: stddev %g", what, s.stddev);
  CHECK(std::fabs(s.below - 0.25) < 0.003, "%s uniform: fraction below 1/4 %g", what, s.below);
}

// Normal(mean, stddev): 15.87% below mean - stddev.
static void check_normal(const char* what, const std::vector<float>& v, double mean, double stddev) {
  Stats s = stats(v, mean - stddev);
  std::printf("%s normal(%g, %g): n %zu, mean %.5f, stddev %.5f, min %.3f, max %.3f, below mean-stddev %.5f\n", what,
              mean, stddev, v.size(), s.mean, s.stddev, s.min, s.max, s.below);
  CHECK(std::fabs(s.mean - mean) < 0.01 * stddev, "%s normal: mean %g", what, s.mean);
  CHECK(std::fabs(s.stddev - stddev) < 0.01 * stddev, "%s normal: stddev %g", what, s.stddev);
  CHECK(std::fabs(s.below - 0.158655) < 0.003, "%s normal: fraction below mean-stddev %g", what, s.below);
  CHECK(std::isfinite(s.min) && std::isfinite(s.max), "%s normal: non-finite values", what);
}

// n uniforms (normal = false) or normals(2, 3) from a fresh generator of `type` seeded with `seed`.
static std::vector<float> host_api(curandRngType_t type, unsigned long long seed, bool normal, cudaStream_t s) {
  curandGenerator_t g = nullptr;
  CURAND(curandCreateGenerator(&g, type));
  CURAND(curandSetStream(g, s));
  CURAND(curandSetPseudoRandomGeneratorSeed(g, seed));
  float* d = nullptr;
  CUDA(cudaMalloc(&d, kN * sizeof(float)));
  if (normal)
    CURAND(curandGenerateNormal(g, d, kN, 2.0f, 3.0f));
  else
    CURAND(curandGenerateUniform(g, d, kN));
  std::vector<float> h(kN);
  CUDA(cudaMemcpyAsync(h.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  CURAND(curandDestroyGenerator(g));
  CUDA(cudaFree(d));
  return h;
}

constexpr int kThreads = 256, kBlocks = 64, kPerThread = kN / (kThreads * kBlocks);

// Each thread its own subsequence; uniforms to `u`, normals(0, 1) to `z`, interleaved by thread
// so that a warp's stores are coalesced.
template <class State>
__global__ void draw(unsigned long long seed, float* u, float* z) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
  State state;
  curand_init(seed, tid, 0, &state);
  for (int i = 0; i < kPerThread; ++i) {
    u[i * stride + tid] = curand_uniform(&state);
    z[i * stride + tid] = curand_normal(&state);
  }
}

template <class State>
static void device_api(const char* name, cudaStream_t s) {
  float *u = nullptr, *z = nullptr;
  CUDA(cudaMalloc(&u, kN * sizeof(float)));
  CUDA(cudaMalloc(&z, kN * sizeof(float)));
  std::vector<float> hu(kN), hz(kN), again(kN);
  draw<State><<<kBlocks, kThreads, 0, s>>>(2024, u, z);
  CUDA(cudaGetLastError());
  CUDA(cudaMemcpyAsync(hu.data(), u, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaMemcpyAsync(hz.data(), z, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  std::string what = std::string("device API ") + name;
  check_uniform(what.c_str(), hu);
  check_normal(what.c_str(), hz, 0.0, 1.0);
  CUDA(cudaMemsetAsync(u, 0, kN * sizeof(float), s));
  draw<State><<<kBlocks, kThreads, 0, s>>>(2024, u, z);
  CUDA(cudaGetLastError());
  CUDA(cudaMemcpyAsync(again.data(), u, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  CHECK(std::memcmp(hu.data(), again.data(), kN * sizeof(float)) == 0, "%s: the same seed gave different numbers", what.c_str());
  std::printf("%s: the same seed gave the same %zu uniforms again\n", what.c_str(), kN);
  CUDA(cudaFree(u));
  CUDA(cudaFree(z));
}

int main() {
  int version = 0;
  CURAND(curandGetVersion(&version));
  std::printf("cuRAND version %d\n", version);
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const struct {
    curandRngType_t type;
    const char* name;
  } generators[] = {{CURAND_RNG_PSEUDO_XORWOW, "XORWOW"}, {CURAND_RNG_PSEUDO_PHILOX4_32_10, "Philox4_32_10"}};
  for (const auto& g : generators) {
    std::string what = std::string("host API ") + g.name;
    std::vector<float> u = host_api(g.type, 1234, false, s);
    check_uniform(what.c_str(), u);
    check_normal(what.c_str(), host_api(g.type, 1234, true, s), 2.0, 3.0);
    std::vector<float> again = host_api(g.type, 1234, false, s);
    CHECK(std::memcmp(u.data(), again.data(), kN * sizeof(float)) == 0, "%s: the same seed gave different numbers",
          what.c_str());
    std::vector<float> other = host_api(g.type, 4321, false, s);
    size_t same = 0;
    for (size_t i = 0; i < kN; ++i) same += u[i] == other[i];
    CHECK(same < kN / 1000, "%s: seeds 1234 and 4321 agree in %zu of %zu places", what.c_str(), same, kN);
    std::printf("%s: seed 1234 again gave the same numbers; seed 4321 agrees in %zu of %zu places\n", what.c_str(), same, kN);
  }

  device_api<curandStateXORWOW_t>("XORWOW", s);
  device_api<curandStatePhilox4_32_10_t>("Philox4_32_10", s);

  CUDA(cudaStreamDestroy(s));
  CUDA(cudaGetLastError());
  return finish();
}
