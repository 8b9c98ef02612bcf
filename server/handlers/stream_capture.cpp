// cuStreamGetCaptureInfo_v2/_v3 (wire layout in client/driver/stream_capture.cpp).
#include <cuda.h>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using V2 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**, size_t*);
using V3 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                        const CUgraphEdgeData**, size_t*);

void capture_info(Dispatch& d, V2 v2, V3 v3) {
  uint64_t sid = d.args.u64();
  bool want_edges = d.args.u8() != 0;
  if (!d.args.ok()) return;
  CUstream s;
  if (!d.handles.get(sid, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph g = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t n = 0;
  CUresult rc;
  if (v3) rc = v3(s, &st, &id, &g, &deps, want_edges ? &edges : nullptr, &n);
  else if (v2) rc = v2(s, &st, &id, &g, &deps, &n);
  else rc = CUDA_ERROR_NOT_SUPPORTED;
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  if (!deps) n = 0;
  d.reply.put<int32_t>(st);
  d.reply.put_u64(id);
  d.reply.put_u64(g ? d.handles.id_for(g) : 0);
  d.reply.put_u64(n);
  for (size_t i = 0; i < n; ++i) d.reply.put_u64(d.handles.id_for(deps[i]));
  if (want_edges) {
    for (size_t i = 0; i < n; ++i) d.reply.put(edges ? edges[i] : CUgraphEdgeData{});
  }
}

}  // namespace

void cuStreamGetCaptureInfo_v2(Dispatch& d) { capture_info(d, d.drv.cuStreamGetCaptureInfo_v2, nullptr); }
void cuStreamGetCaptureInfo_v2_ptsz(Dispatch& d) { capture_info(d, d.drv.cuStreamGetCaptureInfo_v2_ptsz, nullptr); }
void cuStreamGetCaptureInfo_v3(Dispatch& d) { capture_info(d, nullptr, d.drv.cuStreamGetCaptureInfo_v3); }
void cuStreamGetCaptureInfo_v3_ptsz(Dispatch& d) { capture_info(d, nullptr, d.drv.cuStreamGetCaptureInfo_v3_ptsz); }

}  // namespace rgpu::server::handlers
