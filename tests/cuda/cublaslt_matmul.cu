// cuBLASLt matmuls that run kernels, checked against a CPU reference: FP32 and BF16 (FP32
// compute), each with the bias epilogue, algorithms from cublasLtMatmulAlgoGetHeuristic with a
// workspace, on a non-default stream. Every algorithm the heuristic returns (up to 4) is run and
// checked, so more than one kernel family goes through the driver.
//
// Inputs are multiples of 1/4 in [-2, 2] (exact in BF16 and TF32), so FP32 results are exact up to
// rounding noise whatever the algorithm; the BF16 output is checked to its own rounding.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CUBLAS(expr) CHECK_STATUS(expr, cublasLtGetStatusString)

static uint32_t g_seed = 777;
static float quarter() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(static_cast<int>((g_seed >> 16) % 17) - 8) / 4.0f;
}

static float to_float(float v) { return v; }
static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> static T from_float(float v);
template <> float from_float<float>(float v) { return v; }
template <> __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// D = alpha * A^T * B + beta * C + bias (per row of D), A stored k x m, B k x n, C and D m x n,
// all column-major. T is the type of A, B, C, D and the bias; compute and scale are FP32.
template <class T>
static void matmul_case(cublasLtHandle_t lt, cudaStream_t s, cudaDataType_t type, const char* name, double tolerance) {
  const int m = 72, n = 56, k = 64;
  const float alpha = 0.75f, beta = -1.0f;
  std::vector<float> a(static_cast<size_t>(k) * m), b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n), bias(m);
  for (auto& v : a) v = quarter();
  for (auto& v : b) v = quarter();
  for (auto& v : c) v = quarter();
  for (auto& v : bias) v = quarter();
  std::vector<double> want(c.size());
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += static_cast<double>(a[p + static_cast<size_t>(i) * k]) * b[p + static_cast<size_t>(j) * k];
      want[i + static_cast<size_t>(j) * m] = alpha * sum + beta * c[i + static_cast<size_t>(j) * m] + bias[i];
    }

  auto upload = [&](const std::vector<float>& h) {
    std::vector<T> t(h.size());
    for (size_t i = 0; i < h.size(); ++i) t[i] = from_float<T>(h[i]);
    T* d = nullptr;
    CUDA(cudaMalloc(&d, t.size() * sizeof(T)));
    CUDA(cudaMemcpy(d, t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  T *da = upload(a), *db = upload(b), *dc = upload(c), *dbias = upload(bias), *dd = nullptr;
  CUDA(cudaMalloc(&dd, c.size() * sizeof(T)));

  cublasLtMatmulDesc_t op = nullptr;
  CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  const void* bias_ptr = dbias;
  CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
  int32_t bias_type = type;
  CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));

  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  CUBLAS(cublasLtMatrixLayoutCreate(&la, type, k, m, k));
  CUBLAS(cublasLtMatrixLayoutCreate(&lb, type, k, n, k));
  CUBLAS(cublasLtMatrixLayoutCreate(&lc, type, m, n, m));
  CUBLAS(cublasLtMatrixLayoutCreate(&ld, type, m, n, m));

  const uint64_t workspace_size = 32u << 20;
  void* workspace = nullptr;
  CUDA(cudaMalloc(&workspace, workspace_size));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size,
                                              sizeof workspace_size));
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int returned = 0;
  CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 4, results, &returned));
  std::printf("%s: heuristic returned %d algorithms\n", name, returned);
  CHECK(returned >= 1, "%s: no algorithm", name);

  for (int r = 0; r < returned; ++r) {
    CHECK(results[r].state == CUBLAS_STATUS_SUCCESS, "%s: algorithm %d state %d", name, r, results[r].state);
    CHECK(results[r].workspaceSize <= workspace_size, "%s: algorithm %d wants %zu bytes of workspace", name, r,
          results[r].workspaceSize);
    CUDA(cudaMemsetAsync(dd, 0xff, c.size() * sizeof(T), s));  // NaNs: a result not written shows
    CUBLAS(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dc, lc, dd, ld, &results[r].algo, workspace,
                          workspace_size, s));
    std::vector<T> got(c.size());
    CUDA(cudaMemcpyAsync(got.data(), dd, got.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    double w = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      double e = std::fabs(to_float(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
      if (!(e <= w)) w = std::isnan(e) ? INFINITY : e;
    }
    std::printf("%s: algorithm %d (workspace %zu, waves %.2f): D = alpha*A^T*B + beta*C + bias, %dx%dx%d, worst relative "
                "error %.3g\n",
                name, r, results[r].workspaceSize, results[r].wavesCount, m, n, k, w);
    CHECK(w < tolerance, "%s: algorithm %d error %g (tolerance %g)", name, r, w, tolerance);
  }

  CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  CUBLAS(cublasLtMatrixLayoutDestroy(la));
  CUBLAS(cublasLtMatrixLayoutDestroy(lb));
  CUBLAS(cublasLtMatrixLayoutDestroy(lc));
  CUBLAS(cublasLtMatrixLayoutDestroy(ld));
  CUBLAS(cublasLtMatmulDescDestroy(op));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd),
                  static_cast<void*>(dbias), workspace})
    CUDA(cudaFree(p));
}

int main() {
  cublasLtHandle_t lt = nullptr;
  CUBLAS(cublasLtCreate(&lt));
  CHECK(lt != nullptr, "no handle");
  if (!lt) return finish();
  std::printf("cuBLASLt version %zu\n", cublasLtGetVersion());
  cudaStream_t s = nullptr;
  CUDA(cudaStreamCreate(&s));
  matmul_case<float>(lt, s, CUDA_R_32F, "FP32", 1e-5);
  matmul_case<__nv_bfloat16>(lt, s, CUDA_R_16BF, "BF16", 1.0 / 128);
  CUBLAS(cublasLtDestroy(lt));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaGetLastError());
  return finish();
}
