// cuMemsetD16* and cuMemsetD32* (1D and 2D, every form): one-way, so a destination or pitch the
// driver refuses at once is refused here, before anything is sent (client/driver/argument_checks.h);
// the rest goes to the server's driver as generated (rgpu_fwd_*). The 8-bit forms stay generated:
// they have no alignment to check.
#include <cuda.h>

#include "client/driver/argument_checks.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

namespace checks = rgpu::client::checks;

// The driver checks the context before the arguments: without one the server answers.
bool has_context() {
  checks::DeviceLimits unused;
  return checks::current_device_limits(&unused);
}

CUresult check_1d(uint16_t op, CUdeviceptr dst, unsigned elem, size_t n) {
  if (!has_context()) return CUDA_SUCCESS;
  CUresult rc = checks::memset_destination(dst, elem, n);
  return rc == CUDA_SUCCESS ? rc : checks::refused(op, rc);
}

CUresult check_2d(uint16_t op, CUdeviceptr dst, size_t pitch, unsigned elem, size_t w, size_t h) {
  if (!has_context()) return CUDA_SUCCESS;
  CUresult rc = checks::memset_2d(dst, pitch, elem, w, h);
  return rc == CUDA_SUCCESS ? rc : checks::refused(op, rc);
}

}  // namespace

#define RGPU_MEMSET_1D(NAME, ELEM, PTR, VAL, COUNT, ...)                                          \
  RGPU_EXPORT CUresult CUDAAPI NAME(PTR dst, VAL v, COUNT n __VA_OPT__(, ) __VA_ARGS__) {          \
    if (CUresult rc = check_1d(rgpu::op::NAME, dst, ELEM, n)) return rc;                           \
    return rgpu_fwd_##NAME(dst, v, n RGPU_MEMSET_STREAM(__VA_ARGS__));                             \
  }
#define RGPU_MEMSET_2D(NAME, ELEM, PTR, PITCH, VAL, SIZE, ...)                                        \
  RGPU_EXPORT CUresult CUDAAPI NAME(PTR dst, PITCH pitch, VAL v, SIZE w, SIZE h __VA_OPT__(, ) __VA_ARGS__) { \
    if (CUresult rc = check_2d(rgpu::op::NAME, dst, pitch, ELEM, w, h)) return rc;                    \
    return rgpu_fwd_##NAME(dst, pitch, v, w, h RGPU_MEMSET_STREAM(__VA_ARGS__));                       \
  }
#define RGPU_MEMSET_STREAM(...) __VA_OPT__(, s)

extern "C" {

RGPU_MEMSET_1D(cuMemsetD16, 2, CUdeviceptr_v1, unsigned short, unsigned int)
RGPU_MEMSET_1D(cuMemsetD16_v2, 2, CUdeviceptr, unsigned short, size_t)
RGPU_MEMSET_1D(cuMemsetD16_v2_ptds, 2, CUdeviceptr, unsigned short, size_t)
RGPU_MEMSET_1D(cuMemsetD16Async, 2, CUdeviceptr, unsigned short, size_t, CUstream s)
RGPU_MEMSET_1D(cuMemsetD16Async_ptsz, 2, CUdeviceptr, unsigned short, size_t, CUstream s)
RGPU_MEMSET_1D(cuMemsetD32, 4, CUdeviceptr_v1, unsigned int, unsigned int)
RGPU_MEMSET_1D(cuMemsetD32_v2, 4, CUdeviceptr, unsigned int, size_t)
RGPU_MEMSET_1D(cuMemsetD32_v2_ptds, 4, CUdeviceptr, unsigned int, size_t)
RGPU_MEMSET_1D(cuMemsetD32Async, 4, CUdeviceptr, unsigned int, size_t, CUstream s)
RGPU_MEMSET_1D(cuMemsetD32Async_ptsz, 4, CUdeviceptr, unsigned int, size_t, CUstream s)

RGPU_MEMSET_2D(cuMemsetD2D16, 2, CUdeviceptr_v1, unsigned int, unsigned short, unsigned int)
RGPU_MEMSET_2D(cuMemsetD2D16_v2, 2, CUdeviceptr, size_t, unsigned short, size_t)
RGPU_MEMSET_2D(cuMemsetD2D16_v2_ptds, 2, CUdeviceptr, size_t, unsigned short, size_t)
RGPU_MEMSET_2D(cuMemsetD2D16Async, 2, CUdeviceptr, size_t, unsigned short, size_t, CUstream s)
RGPU_MEMSET_2D(cuMemsetD2D16Async_ptsz, 2, CUdeviceptr, size_t, unsigned short, size_t, CUstream s)
RGPU_MEMSET_2D(cuMemsetD2D32, 4, CUdeviceptr_v1, unsigned int, unsigned int, unsigned int)
RGPU_MEMSET_2D(cuMemsetD2D32_v2, 4, CUdeviceptr, size_t, unsigned int, size_t)
RGPU_MEMSET_2D(cuMemsetD2D32_v2_ptds, 4, CUdeviceptr, size_t, unsigned int, size_t)
RGPU_MEMSET_2D(cuMemsetD2D32Async, 4, CUdeviceptr, size_t, unsigned int, size_t, CUstream s)
RGPU_MEMSET_2D(cuMemsetD2D32Async_ptsz, 4, CUdeviceptr, size_t, unsigned int, size_t, CUstream s)

}  // extern "C"
