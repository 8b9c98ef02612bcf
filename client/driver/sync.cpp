// Synchronizing calls: forwarded, and when they succeed, the async device-to-host copies issued
// before them are waited for too (client/driver/memory.cpp). On this thread the copies' data
// already came before the reply; this covers copies issued by other threads.
#include <cuda.h>

#include "client/host_memory.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"

namespace {

CUresult landed(CUresult rc) {
  if (rc == CUDA_SUCCESS) rgpu::client::wait_async_copies();
  return rc;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuCtxSynchronize() { return landed(rgpu_fwd_cuCtxSynchronize()); }
RGPU_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return landed(rgpu_fwd_cuCtxSynchronize_v2(ctx)); }
RGPU_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream s) { return landed(rgpu_fwd_cuStreamSynchronize(s)); }
RGPU_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s) { return landed(rgpu_fwd_cuStreamSynchronize_ptsz(s)); }
RGPU_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent e) { return landed(rgpu_fwd_cuEventSynchronize(e)); }
RGPU_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream s) { return landed(rgpu_fwd_cuStreamQuery(s)); }
RGPU_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream s) { return landed(rgpu_fwd_cuStreamQuery_ptsz(s)); }
RGPU_EXPORT CUresult CUDAAPI cuEventQuery(CUevent e) { return landed(rgpu_fwd_cuEventQuery(e)); }

}  // extern "C"
