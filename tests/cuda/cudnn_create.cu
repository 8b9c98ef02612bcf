// cuDNN starting on the driver under it: cudnnCreate (which brings up cuBLASLt's state) and
// cudnnDestroy.
#include <cuda_runtime.h>
#include <cudnn.h>

#include "check.h"

#define CUDNN(expr) CHECK_STATUS(expr, cudnnGetErrorString)

int main() {
  std::printf("cuDNN version %zu\n", cudnnGetVersion());
  cudnnHandle_t h = nullptr;
  CUDNN(cudnnCreate(&h));
  CHECK(h != nullptr, "no handle");
  if (h) CUDNN(cudnnDestroy(h));
  return finish();
}
