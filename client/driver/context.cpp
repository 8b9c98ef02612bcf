// Contexts. The exported entry points keep the client's record of contexts and of each thread's
// context stack (client/contexts.h) and forward the calls that change driver state through their
// generated marshallers (gen/client_forward.gen.h); queries of that state are answered locally.
//
// cuCtxCreate_v4, the version cuda.h 13 maps cuCtxCreate to, has a parameter struct that holds
// pointers, so it travels as the call it is equivalent to: cuCtxCreate_v3 with affinity
// parameters, cuCtxCreate_v2 without. CIG (graphics interop) contexts cannot work remotely.
#include <cuda.h>

#include <mutex>
#include <unordered_map>

#include "client/call.h"
#include "client/contexts.h"
#include "client/dark_api/dark_api.h"
#include "client/driver/cached_answers.h"
#include "client/runtime.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace ctxs = rgpu::client::contexts;

namespace {

// Each device's primary context handle, as retained: what a reset ends. The driver keeps the
// handle across a reset (probed on driver 580), but not what hangs off it: context-local storage
// and the export tables' per-context answers (client/dark_api/dark_api.h on_context_destroyed).
std::mutex g_primary_mu;
auto& g_primary = *new std::unordered_map<CUdevice, CUcontext>();

// Each device's primary context state as this process made it (cuDevicePrimaryCtxGetState):
// the server session is this process's alone and starts with every primary context inactive
// and flags 0, and every call that changes the state passes through here, so the answer is
// known without asking. The CUDA runtime asks it before almost every call (1,450 times per
// training step in the PyTorch profile): a round trip each would cost more than the step.
struct PrimaryState {
  unsigned flags = 0;
  int retained = 0;  // cuDevicePrimaryCtxRetain minus Release; 0 after a reset
};
auto& g_primary_state = *new std::unordered_map<CUdevice, PrimaryState>();

CUresult primary_reset(CUresult rc, CUdevice dev) {
  if (rc != CUDA_SUCCESS) return rc;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_primary_mu);
    if (auto it = g_primary.find(dev); it != g_primary.end()) ctx = it->second;
    g_primary_state[dev].retained = 0;
  }
  if (ctx) rgpu::client::dark::on_context_destroyed(ctx);
  rgpu::client::forget_cached_answers();
  return rc;
}

CUresult primary_release(CUresult rc, CUdevice dev) {
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_primary_mu);
  int& n = g_primary_state[dev].retained;
  if (n > 0) --n;
  return rc;
}

CUresult primary_set_flags(CUresult rc, CUdevice dev, unsigned flags) {
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_primary_mu);
  g_primary_state[dev].flags = flags;
  return rc;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  CUresult rc = rgpu_fwd_cuCtxCreate_v2(pctx, flags, dev);
  if (rc == CUDA_SUCCESS) {
    ctxs::learn(*pctx, dev);
    ctxs::push(*pctx);
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags,
                                            CUdevice dev) {
  CUresult rc = rgpu_fwd_cuCtxCreate_v3(pctx, params, n, flags, dev);
  if (rc == CUDA_SUCCESS) {
    ctxs::learn(*pctx, dev);
    ctxs::push(*pctx);
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                            CUdevice dev) {
  if (params && params->cigParams) {
    rgpu::client::trace_call("cuCtxCreate_v4");
    rgpu::log::error("cuCtxCreate_v4: CIG contexts share a graphics API's state on the GPU host; rgpu cannot "
                     "create them (CUDA_ERROR_NOT_SUPPORTED)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (params && params->numExecAffinityParams > 0)
    return cuCtxCreate_v3(pctx, params->execAffinityParams, params->numExecAffinityParams, flags, dev);
  return cuCtxCreate_v2(pctx, flags, dev);
}

// The pre-3.2 name has the _v2 signature.
RGPU_EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  CUresult rc = rgpu_fwd_cuCtxDestroy_v2(ctx);
  if (rc == CUDA_SUCCESS) {
    ctxs::forget(ctx);
    rgpu::client::dark::on_context_destroyed(ctx);
    rgpu::client::forget_cached_answers();
  }
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

// A context the client knows (or none) is made current one-way: nothing can go wrong that the
// client did not check, and PyTorch sets it on each new thread (a round trip each before).
RGPU_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  CUdevice dev = 0;
  if (rgpu::client::connection() && (!ctx || ctxs::device_of(ctx, &dev))) {
    rgpu::client::trace_call("cuCtxSetCurrent");
    rgpu::client::Call c(rgpu::op::cuCtxSetCurrent, rgpu::client::kOneWay);
    c.via(ctx);
    c.checked();
    c.args().put_u64(rgpu::client::handle_id(ctx));
    CUresult rc = c.invoke();
    if (rc == CUDA_SUCCESS) ctxs::set_current(ctx);
    return rc;
  }
  CUresult rc = rgpu_fwd_cuCtxSetCurrent(ctx);
  if (rc == CUDA_SUCCESS) ctxs::set_current(ctx);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  CUresult rc = rgpu_fwd_cuCtxPushCurrent_v2(ctx);
  if (rc == CUDA_SUCCESS) ctxs::push(ctx);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

RGPU_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  CUresult rc = rgpu_fwd_cuCtxPopCurrent_v2(pctx);
  if (rc == CUDA_SUCCESS) ctxs::pop();
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

RGPU_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  rgpu::client::trace_call("cuCtxGetCurrent");
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = ctxs::current();
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  rgpu::client::trace_call("cuCtxGetDevice_v2");
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = ctxs::current();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctxs::device_of(ctx, device)) return CUDA_SUCCESS;
  return rgpu_fwd_cuCtxGetDevice_v2(device, ctx);  // a context the client has not seen made
}

RGPU_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) { return cuCtxGetDevice_v2(device, nullptr); }

RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  // A primary context this process holds already: its handle does not change, so a further
  // retain (PyTorch's start-up made 10) only counts on the server, one-way.
  if (pctx && rgpu::client::server_device(dev) >= 0) {
    std::lock_guard<std::mutex> lock(g_primary_mu);
    auto it = g_primary.find(dev);
    if (it != g_primary.end() && g_primary_state[dev].retained > 0) {
      rgpu::client::trace_call("cuDevicePrimaryCtxRetain");
      rgpu::client::Call c(rgpu::op::cuDevicePrimaryCtxRetain, rgpu::client::kOneWay);
      c.via_device(dev);
      c.args().put_u8(1);
      c.args().put<CUdevice>(rgpu::client::server_device(dev));
      if (CUresult rc = c.invoke()) return rc;
      ++g_primary_state[dev].retained;
      *pctx = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = rgpu_fwd_cuDevicePrimaryCtxRetain(pctx, dev);
  if (rc == CUDA_SUCCESS) {
    ctxs::learn(*pctx, dev);
    std::lock_guard<std::mutex> lock(g_primary_mu);
    g_primary[dev] = *pctx;
    ++g_primary_state[dev].retained;
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  rgpu::client::trace_call("cuDevicePrimaryCtxGetState");
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  if (rgpu::client::server_device(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_primary_mu);
  const PrimaryState& st = g_primary_state[dev];
  *flags = st.flags;
  *active = st.retained > 0;
  return CUDA_SUCCESS;
}

// A release that leaves the context retained only counts on the server: one-way, as a retain of
// a held context (cudart releases at exit; each was a round trip). The last one waits: it
// destroys the context. True, with the call's result in *rc, when the release was such a one.
static bool counted_release(uint16_t op, CUdevice dev, CUresult* rc) {
  const int server_dev = rgpu::client::server_device(dev);
  if (server_dev < 0) return false;
  std::lock_guard<std::mutex> lock(g_primary_mu);
  auto it = g_primary_state.find(dev);
  if (it == g_primary_state.end() || it->second.retained <= 1) return false;
  rgpu::client::trace_call(rgpu::op::name(op));
  rgpu::client::Call c(op, rgpu::client::kOneWay);
  c.via_device(dev);
  c.args().put<CUdevice>(server_dev);
  *rc = c.invoke();
  if (*rc == CUDA_SUCCESS) --it->second.retained;
  return true;
}

RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult rc; counted_release(rgpu::op::cuDevicePrimaryCtxRelease_v2, dev, &rc)) return rc;
  return primary_release(rgpu_fwd_cuDevicePrimaryCtxRelease_v2(dev), dev);
}
RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  if (CUresult rc; counted_release(rgpu::op::cuDevicePrimaryCtxRelease, dev, &rc)) return rc;
  return primary_release(rgpu_fwd_cuDevicePrimaryCtxRelease(dev), dev);
}
RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return primary_set_flags(rgpu_fwd_cuDevicePrimaryCtxSetFlags_v2(dev, flags), dev, flags);
}
RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return primary_set_flags(rgpu_fwd_cuDevicePrimaryCtxSetFlags(dev, flags), dev, flags);
}

RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return primary_reset(rgpu_fwd_cuDevicePrimaryCtxReset_v2(dev), dev);
}

RGPU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  return primary_reset(rgpu_fwd_cuDevicePrimaryCtxReset(dev), dev);
}

// A context of another server (RGPU_SERVER=a,b) is no peer of the current one: its memory is
// on another machine.
RGPU_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  if (rgpu::client::several_servers() && peerContext &&
      rgpu::client::handle_server(rgpu::client::handle_id(peerContext)) != rgpu::client::current_server()) {
    rgpu::client::trace_call("cuCtxEnablePeerAccess");
    return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  }
  return rgpu_fwd_cuCtxEnablePeerAccess(peerContext, Flags);
}

}  // extern "C"
