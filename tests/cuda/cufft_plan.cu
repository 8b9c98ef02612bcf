// cuFFT planning on the driver under it: cufftPlan1d loads cuFFT's kernels and walks their
// functions (TOOLS_MODULE export table); cufftDestroy. No transform is executed.
#include <cuda_runtime.h>
#include <cufft.h>

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

#define CUFFT(expr) CHECK_STATUS(expr, cufft_text)

int main() {
  cufftHandle plan = 0;
  CUFFT(cufftPlan1d(&plan, 1024, CUFFT_C2C, 1));
  CUFFT(cufftDestroy(plan));
  return finish();
}
