// cuFFT transforms that run kernels, checked against a direct DFT on the CPU: a batched C2C 1D
// forward transform (non power of two length), the inverse back to the input (scaled by 1/n), and
// an R2C 2D transform, on a non-default stream (cufftSetStream).
#include <cuda_runtime.h>
#include <cufft.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include "check.h"

static const char* cufft_text(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    default: return "other cufftResult";
  }
}

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CUFFT(expr) CHECK_STATUS(expr, cufft_text)

using cd = std::complex<double>;
static const double kPi = 3.14159265358979323846;

static uint32_t g_seed = 99;
static float uniform() {  // in [-1, 1)
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(g_seed >> 8) / 8388608.0f - 1.0f;
}

// Largest |got - want| over the largest |want|: FFT error grows with the whole signal, not with
// each bin, so errors are measured against the spectrum's scale.
static double worst(const std::vector<cufftComplex>& got, const std::vector<cd>& want) {
  double scale = 0, err = 0;
  for (const cd& w : want) scale = std::fmax(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    double e = std::abs(cd(got[i].x, got[i].y) - want[i]);
    if (!(e <= err)) err = std::isnan(e) ? INFINITY : e;
  }
  return err / (scale > 0 ? scale : 1);
}

static void c2c_1d(cudaStream_t s) {
  const int n = 1000, batch = 3;  // 1000 = 2^3 5^3: a mixed-radix plan
  std::vector<cufftComplex> in(static_cast<size_t>(n) * batch);
  for (auto& v : in) v = {uniform(), uniform()};
  std::vector<cd> want(in.size());
  for (int b = 0; b < batch; ++b)
    for (int k = 0; k < n; ++k) {
      cd sum = 0;
      for (int j = 0; j < n; ++j) {
        const cufftComplex& v = in[static_cast<size_t>(b) * n + j];
        sum += cd(v.x, v.y) * std::polar(1.0, -2 * kPi * ((static_cast<int64_t>(j) * k) % n) / n);
      }
      want[static_cast<size_t>(b) * n + k] = sum;
    }

  cufftHandle plan = 0;
  CUFFT(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
  CUFFT(cufftSetStream(plan, s));
  cufftComplex *d_in = nullptr, *d_out = nullptr;
  const size_t bytes = in.size() * sizeof(cufftComplex);
  CUDA(cudaMalloc(&d_in, bytes));
  CUDA(cudaMalloc(&d_out, bytes));
  CUDA(cudaMemcpyAsync(d_in, in.data(), bytes, cudaMemcpyHostToDevice, s));
  CUFFT(cufftExecC2C(plan, d_in, d_out, CUFFT_FORWARD));
  std::vector<cufftComplex> got(in.size());
  CUDA(cudaMemcpyAsync(got.data(), d_out, bytes, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  double w = worst(got, want);
  std::printf("C2C 1D forward, n %d, batch %d: worst error %.3g of the spectrum's scale\n", n, batch, w);
  CHECK(w < 1e-4, "C2C forward error %g", w);

  // Inverse in place on the spectrum: n times the input.
  CUFFT(cufftExecC2C(plan, d_out, d_out, CUFFT_INVERSE));
  CUDA(cudaMemcpyAsync(got.data(), d_out, bytes, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  std::vector<cd> back(in.size());
  for (size_t i = 0; i < in.size(); ++i) back[i] = cd(in[i].x, in[i].y) * static_cast<double>(n);
  w = worst(got, back);
  std::printf("C2C 1D inverse of the forward: worst error %.3g of n * input\n", w);
  CHECK(w < 1e-4, "C2C round trip error %g", w);

  CUFFT(cufftDestroy(plan));
  CUDA(cudaFree(d_in));
  CUDA(cudaFree(d_out));
}

static void r2c_2d(cudaStream_t s) {
  const int nx = 24, ny = 30, nyc = ny / 2 + 1;  // row-major nx x ny in, nx x (ny/2+1) out
  std::vector<float> in(static_cast<size_t>(nx) * ny);
  for (auto& v : in) v = uniform();
  std::vector<cd> want(static_cast<size_t>(nx) * nyc);
  for (int kx = 0; kx < nx; ++kx)
    for (int ky = 0; ky < nyc; ++ky) {
      cd sum = 0;
      for (int x = 0; x < nx; ++x)
        for (int y = 0; y < ny; ++y)
          sum += static_cast<double>(in[static_cast<size_t>(x) * ny + y]) *
                 std::polar(1.0, -2 * kPi * (static_cast<double>((x * kx) % nx) / nx + static_cast<double>((y * ky) % ny) / ny));
      want[static_cast<size_t>(kx) * nyc + ky] = sum;
    }

  cufftHandle plan = 0;
  CUFFT(cufftPlan2d(&plan, nx, ny, CUFFT_R2C));
  CUFFT(cufftSetStream(plan, s));
  float* d_in = nullptr;
  cufftComplex* d_out = nullptr;
  CUDA(cudaMalloc(&d_in, in.size() * sizeof(float)));
  CUDA(cudaMalloc(&d_out, want.size() * sizeof(cufftComplex)));
  CUDA(cudaMemcpyAsync(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  CUFFT(cufftExecR2C(plan, d_in, d_out));
  std::vector<cufftComplex> got(want.size());
  CUDA(cudaMemcpyAsync(got.data(), d_out, got.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  double w = worst(got, want);
  std::printf("R2C 2D %dx%d -> %dx%d: worst error %.3g of the spectrum's scale\n", nx, ny, nx, nyc, w);
  CHECK(w < 1e-4, "R2C 2D error %g", w);
  CUFFT(cufftDestroy(plan));
  CUDA(cudaFree(d_in));
  CUDA(cudaFree(d_out));
}

int main() {
  int version = 0;
  CUFFT(cufftGetVersion(&version));
  std::printf("cuFFT version %d\n", version);
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  c2c_1d(s);
  r2c_2d(s);
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaGetLastError());
  return finish();
}
