// cuBLAS starting on the driver under it: cublasCreate runs the CUDA 13 integrity check
// (INTEGRITY_CHECK export table) and loads cuBLAS's modules; no GEMM (the fake driver does not
// run cuBLAS kernels).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CUBLAS(expr) CHECK_STATUS(expr, cublasGetStatusString)

int main() {
  cublasHandle_t h = nullptr;
  CUBLAS(cublasCreate(&h));
  CHECK(h != nullptr, "no handle");
  if (h) {
    int version = 0;
    CUBLAS(cublasGetVersion(h, &version));
    std::printf("cuBLAS version %d\n", version);
    cudaStream_t s = nullptr;
    CUDA(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream(h, s));
    CUBLAS(cublasDestroy(h));
    CUDA(cudaStreamDestroy(s));
  }
  return finish();
}
