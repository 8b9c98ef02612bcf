// Host callbacks (wire layouts in protocol/wire/stream.h; the protocol in
// protocol/messages.h, kOpCallback). The real stream gets a host function of ours that asks the
// client to run the user's function and holds the stream until the client says it has returned.
#include <cuda.h>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/stream.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

struct Pending {
  ClientCallbacks* callbacks;
  uint64_t id;
  bool once = true;  // false: captured into a graph, runs at every launch (never freed)
};

void CUDA_CB host_fn(void* p) {
  auto* c = static_cast<Pending*>(p);
  c->callbacks->run(c->id, CUDA_SUCCESS);
  if (c->once) delete c;
}

// A host function queued on a capturing stream becomes a graph host node: the client keeps its
// id for every launch of the graph (client/driver/host_callback.cpp), and so must we.
bool capturing(Dispatch& d, CUstream s, bool ptsz) {
  auto fn = ptsz ? d.drv.cuStreamIsCapturing_ptsz : d.drv.cuStreamIsCapturing;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  return fn && fn(s, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

void CUDA_CB stream_fn(CUstream, CUresult status, void* p) {
  auto* c = static_cast<Pending*>(p);
  c->callbacks->run(c->id, status);
  delete c;
}

using LaunchHostFn = CUresult (*)(CUstream, CUhostFn, void*);
using AddCallbackFn = CUresult (*)(CUstream, CUstreamCallback, void*, unsigned int);

// Reads the call; queues the callback; tells the client when it is not.
void add(Dispatch& d, LaunchHostFn launch_fn, AddCallbackFn add_fn, bool with_flags, bool ptsz) {
  proto::wire::HostCallback req;
  if (!proto::wire::read_host_callback(d.args, with_flags, &req)) return;
  const uint64_t stream_id = req.stream, id = req.id;
  const unsigned flags = req.flags;
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  CUstream stream = nullptr;
  if (!d.handles.get(stream_id, &stream)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if (d.callbacks && (with_flags ? add_fn != nullptr : launch_fn != nullptr)) {
    auto* p = new Pending{d.callbacks, id};
    if (!with_flags && capturing(d, stream, ptsz)) p->once = false;
    rc = with_flags ? add_fn(stream, stream_fn, p, flags) : launch_fn(stream, host_fn, p);
    if (rc != CUDA_SUCCESS) delete p;
  }
  if (rc != CUDA_SUCCESS && d.callbacks) d.callbacks->drop(id, rc);
  d.reply.put<int32_t>(rc);
}

}  // namespace

void cuLaunchHostFunc(Dispatch& d) { add(d, d.drv.cuLaunchHostFunc, nullptr, false, false); }
void cuLaunchHostFunc_ptsz(Dispatch& d) { add(d, d.drv.cuLaunchHostFunc_ptsz, nullptr, false, true); }
void cuStreamAddCallback(Dispatch& d) { add(d, nullptr, d.drv.cuStreamAddCallback, true, false); }
void cuStreamAddCallback_ptsz(Dispatch& d) { add(d, nullptr, d.drv.cuStreamAddCallback_ptsz, true, true); }

}  // namespace rgpu::server::handlers
