// cuCtxCreate_v4, the version cuda.h 13 maps cuCtxCreate to. Its parameter struct holds
// pointers, so it travels as the call it is equivalent to: cuCtxCreate_v3 with affinity
// parameters, cuCtxCreate_v2 without. CIG (graphics interop) contexts cannot work remotely.
#include <cuda.h>

#include "client/call.h"
#include "common/log.h"
#include "gen/export.gen.h"

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                            CUdevice dev) {
  rgpu::client::trace_call("cuCtxCreate_v4");
  if (params && params->cigParams) {
    rgpu::log::error("cuCtxCreate_v4: CIG contexts share a graphics API's state on the GPU host; rgpu cannot "
                     "create them (CUDA_ERROR_NOT_SUPPORTED)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (params && params->numExecAffinityParams > 0)
    return cuCtxCreate_v3(pctx, params->execAffinityParams, params->numExecAffinityParams, flags, dev);
  return cuCtxCreate_v2(pctx, flags, dev);
}

}  // extern "C"
