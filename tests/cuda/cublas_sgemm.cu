// cuBLAS GEMMs that run kernels, checked against a CPU reference: cublasSgemm with non-square
// shapes, padded leading dimensions and all four transpose combinations; cublasGemmEx with FP16
// inputs and FP32 output/compute, and with BF16 inputs and output. Everything runs on a
// non-default stream set with cublasSetStream.
//
// Inputs are multiples of 1/4 in [-2, 2], exact in FP16, BF16 and TF32, so every product and every
// partial sum below is exact in FP32 whatever the kernel's order of summation or math mode: the
// FP32 results must match to rounding noise, the BF16 output to its own rounding (2^-8 relative).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CUBLAS(expr) CHECK_STATUS(expr, cublasGetStatusString)

static uint32_t g_seed = 12345;
static float quarter() {  // a multiple of 1/4 in [-2, 2]
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(static_cast<int>((g_seed >> 16) % 17) - 8) / 4.0f;
}

// C (m x n, column-major, ldc) = alpha * op(A) * op(B) + beta * C, in double.
static void reference(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<float>& a, int lda,
                      const std::vector<float>& b, int ldb, float beta, std::vector<float>& c, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        double av = ta ? a[p + static_cast<size_t>(i) * lda] : a[i + static_cast<size_t>(p) * lda];
        double bv = tb ? b[j + static_cast<size_t>(p) * ldb] : b[p + static_cast<size_t>(j) * ldb];
        sum += av * bv;
      }
      float& cv = c[i + static_cast<size_t>(j) * ldc];
      cv = static_cast<float>(alpha * sum + beta * cv);
    }
}

// Largest |got - want| / (1 + |want|) over the m x n block.
static double worst(const std::vector<float>& got, const std::vector<float>& want, int m, int n, int ld) {
  double w = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      size_t x = i + static_cast<size_t>(j) * ld;
      double e = std::fabs(static_cast<double>(got[x]) - want[x]) / (1.0 + std::fabs(want[x]));
      if (!(e <= w)) w = std::isnan(e) ? INFINITY : e;
    }
  return w;
}

template <class T>
static T* to_device(const std::vector<T>& h, cudaStream_t s) {
  T* d = nullptr;
  CUDA(cudaMalloc(&d, h.size() * sizeof(T)));
  CUDA(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  return d;
}

template <class T>
static std::vector<T> to_host(const T* d, size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  CUDA(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  return h;
}

static void sgemm_case(cublasHandle_t h, cudaStream_t s, bool ta, bool tb) {
  const int m = 37, n = 23, k = 41;
  const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 5;
  const float alpha = 1.5f, beta = -0.5f;
  std::vector<float> a(static_cast<size_t>(lda) * (ta ? m : k)), b(static_cast<size_t>(ldb) * (tb ? k : n)),
      c(static_cast<size_t>(ldc) * n);
  for (auto& v : a) v = quarter();
  for (auto& v : b) v = quarter();
  for (auto& v : c) v = quarter();
  float *da = to_device(a, s), *db = to_device(b, s), *dc = to_device(c, s);
  CUBLAS(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, da, lda, db,
                     ldb, &beta, dc, ldc));
  std::vector<float> got = to_host(dc, c.size(), s);
  reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double w = worst(got, c, m, n, ldc);
  std::printf("cublasSgemm %c%c %dx%dx%d (lda %d ldb %d ldc %d): worst relative error %.3g\n", ta ? 'T' : 'N',
              tb ? 'T' : 'N', m, n, k, lda, ldb, ldc, w);
  CHECK(w < 1e-5, "sgemm %c%c error %g", ta ? 'T' : 'N', tb ? 'T' : 'N', w);
  // Padding rows of C below m are not part of the result and must be untouched.
  bool padding_kept = true;
  for (int j = 0; j < n; ++j)
    for (int i = m; i < ldc; ++i) padding_kept &= got[i + static_cast<size_t>(j) * ldc] == c[i + static_cast<size_t>(j) * ldc];
  CHECK(padding_kept, "sgemm wrote outside the m x n block of C");
  CUDA(cudaFree(da));
  CUDA(cudaFree(db));
  CUDA(cudaFree(dc));
}

// FP16 A (transposed) and B, FP32 C, FP32 compute.
static void gemm_ex_fp16(cublasHandle_t h, cudaStream_t s) {
  const int m = 64, n = 48, k = 80, lda = k, ldb = k, ldc = m;
  const float alpha = 1.0f, beta = 0.25f;
  std::vector<float> a(static_cast<size_t>(lda) * m), b(static_cast<size_t>(ldb) * n), c(static_cast<size_t>(ldc) * n);
  for (auto& v : a) v = quarter();
  for (auto& v : b) v = quarter();
  for (auto& v : c) v = quarter();
  std::vector<__half> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = __float2half(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bh[i] = __float2half(b[i]);
  __half *da = to_device(ah, s), *db = to_device(bh, s);
  float* dc = to_device(c, s);
  CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, lda, db, CUDA_R_16F, ldb, &beta, dc,
                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  std::vector<float> got = to_host(dc, c.size(), s);
  reference(true, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double w = worst(got, c, m, n, ldc);
  std::printf("cublasGemmEx FP16 in, FP32 out/compute, TN %dx%dx%d: worst relative error %.3g\n", m, n, k, w);
  CHECK(w < 1e-5, "GemmEx FP16 error %g", w);
  CUDA(cudaFree(da));
  CUDA(cudaFree(db));
  CUDA(cudaFree(dc));
}

// BF16 A, B and C, FP32 compute.
static void gemm_ex_bf16(cublasHandle_t h, cudaStream_t s) {
  const int m = 96, n = 40, k = 72, lda = m, ldb = n, ldc = m;
  const float alpha = 0.5f, beta = 1.0f;
  std::vector<float> a(static_cast<size_t>(lda) * k), b(static_cast<size_t>(ldb) * k), c(static_cast<size_t>(ldc) * n);
  for (auto& v : a) v = quarter();
  for (auto& v : b) v = quarter();
  for (auto& v : c) v = quarter();
  std::vector<__nv_bfloat16> ab(a.size()), bb(b.size()), cb(c.size());
  for (size_t i = 0; i < a.size(); ++i) ab[i] = __float2bfloat16(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bb[i] = __float2bfloat16(b[i]);
  for (size_t i = 0; i < c.size(); ++i) cb[i] = __float2bfloat16(c[i]);
  __nv_bfloat16 *da = to_device(ab, s), *db = to_device(bb, s), *dc = to_device(cb, s);
  CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, da, CUDA_R_16BF, lda, db, CUDA_R_16BF, ldb, &beta,
                      dc, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  std::vector<__nv_bfloat16> gotb = to_host(dc, cb.size(), s);
  std::vector<float> got(gotb.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = __bfloat162float(gotb[i]);
  reference(false, true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double w = worst(got, c, m, n, ldc);
  std::printf("cublasGemmEx BF16 in/out, FP32 compute, NT %dx%dx%d: worst relative error %.3g\n", m, n, k, w);
  CHECK(w < 1.0 / 128, "GemmEx BF16 error %g", w);
  CUDA(cudaFree(da));
  CUDA(cudaFree(db));
  CUDA(cudaFree(dc));
}

int main() {
  cublasHandle_t h = nullptr;
  CUBLAS(cublasCreate(&h));
  CHECK(h != nullptr, "no handle");
  if (!h) return finish();
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUBLAS(cublasSetStream(h, s));
  cudaStream_t got_stream = nullptr;
  CUBLAS(cublasGetStream(h, &got_stream));
  CHECK(got_stream == s, "cublasGetStream gave %p, set %p", static_cast<void*>(got_stream), static_cast<void*>(s));

  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) sgemm_case(h, s, ta, tb);
  gemm_ex_fp16(h, s);
  gemm_ex_bf16(h, s);

  CUDA(cudaStreamSynchronize(s));
  CUBLAS(cublasDestroy(h));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaGetLastError());
  return finish();
}
