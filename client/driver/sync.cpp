// Synchronizing calls: forwarded, and when they succeed, the async device-to-host copies issued
// before them are waited for too (client/driver/memory.cpp). On this thread the copies' data
// already came before the reply; this covers copies issued by other threads, to the server the
// synchronizing call went to (the server of its handle, else of the current context).
// A stream or context synchronize that follows only work the program cannot observe (copies to
// the device, memsets, loads: client/device_work.h) is sent one-way instead of waited for.
#include <cuda.h>

#include "client/call.h"
#include "client/contexts.h"
#include "client/device_work.h"
#include "client/driver/host_memory.h"
#include "client/runtime.h"
#include "common/env.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

namespace work = rgpu::client::device_work;

// handle: what the synchronizing call named (nullptr: the current context), whose server it went to.
CUresult landed(CUresult rc, const void* handle) {
  if (rc == CUDA_SUCCESS) rgpu::client::wait_async_copies(rgpu::client::server_of(handle));
  return rc;
}

// Whether a synchronize of stream (kAnyStream: the context) can go one-way.
bool one_way(uint64_t stream) {
  return rgpu::env::get().oneway_sync && rgpu::client::batching() && rgpu::client::connection() &&
         !work::must_wait(stream);
}

CUresult send_one_way(uint16_t op, bool has_arg, uint64_t arg) {
  rgpu::client::trace_call(rgpu::op::name(op));
  rgpu::client::Call c(op, rgpu::client::kOneWay);
  c.checked();  // nothing left to hear about: the work before it could not fail on the server
  if (has_arg) c.args().put_u64(arg);
  return c.invoke();
}

template <class Fwd>
CUresult stream_sync(uint16_t op, CUstream s, Fwd fwd) {
  const uint64_t id = rgpu::client::handle_id(s);
  if (one_way(id)) return send_one_way(op, true, id);
  CUresult rc = fwd(s);
  if (rc == CUDA_SUCCESS) work::synced(op, id);
  return landed(rc, s);
}

template <class Fwd>
CUresult ctx_sync(uint16_t op, bool has_arg, uint64_t arg, Fwd fwd) {
  if (one_way(work::kAnyStream)) return send_one_way(op, has_arg, arg);
  CUresult rc = fwd();
  const auto ctx = reinterpret_cast<CUcontext>(arg);  // the context's id; 0 (the current one) without one
  if (rc == CUDA_SUCCESS) work::synced(op, work::kAnyStream, ctx);
  return landed(rc, ctx);
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuCtxSynchronize() {
  // No context current on this thread (client/contexts.h knows the stack): the driver's answer
  // ("thread ctx synchronize" on the H200), which a one-way synchronize would have lost.
  if (rgpu::client::connection() && !rgpu::client::contexts::current()) {
    rgpu::client::trace_call("cuCtxSynchronize");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return ctx_sync(rgpu::op::cuCtxSynchronize, false, 0, [] { return rgpu_fwd_cuCtxSynchronize(); });
}
RGPU_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  return ctx_sync(rgpu::op::cuCtxSynchronize_v2, true, rgpu::client::handle_id(ctx),
                  [ctx] { return rgpu_fwd_cuCtxSynchronize_v2(ctx); });
}
RGPU_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  return stream_sync(rgpu::op::cuStreamSynchronize, s, rgpu_fwd_cuStreamSynchronize);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s) {
  return stream_sync(rgpu::op::cuStreamSynchronize_ptsz, s, rgpu_fwd_cuStreamSynchronize_ptsz);
}
RGPU_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent e) { return landed(rgpu_fwd_cuEventSynchronize(e), e); }
RGPU_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream s) { return landed(rgpu_fwd_cuStreamQuery(s), s); }
RGPU_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream s) { return landed(rgpu_fwd_cuStreamQuery_ptsz(s), s); }
RGPU_EXPORT CUresult CUDAAPI cuEventQuery(CUevent e) { return landed(rgpu_fwd_cuEventQuery(e), e); }

}  // extern "C"
