// cuStreamGetCaptureInfo_v2/_v3, cuStreamBeginCaptureToGraph, cuStreamUpdateCaptureDependencies
// (wire layouts in protocol/wire/capture.h).
#include <cuda.h>

#include <vector>

#include "gen/ops.gen.h"
#include "gen/server_handlers.gen.h"
#include "protocol/wire/capture.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using V2 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**, size_t*);
using V3 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                        const CUgraphEdgeData**, size_t*);

namespace wire = proto::wire;

void capture_info(Dispatch& d, V2 v2, V3 v3) {
  wire::CaptureInfoAsk ask;
  if (!wire::read_capture_info_ask(d.args, &ask)) return;
  const bool want_edges = ask.want_edges;
  CUstream s;
  if (!d.handles.get(ask.stream, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
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
  wire::CaptureInfo info;
  info.status = st;
  info.id = id;
  info.graph = g ? d.handles.id_for(g) : 0;
  for (size_t i = 0; i < n; ++i) info.nodes.push_back(d.handles.id_for(deps[i]));
  if (want_edges && edges) info.edges.assign(edges, edges + n);
  wire::put_capture_info(d.reply, want_edges, info);
}

#define DRV(fn, ...) (d.drv.fn ? d.drv.fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

// A NodeList's ids resolved; a node id not bound sets *bad.
std::vector<CUgraphNode> resolve_nodes(Dispatch& d, const wire::NodeList& l, CUresult* bad) {
  std::vector<CUgraphNode> nodes(l.nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!d.handles.get(l.nodes[i], &nodes[i]) && *bad == CUDA_SUCCESS) *bad = CUDA_ERROR_INVALID_HANDLE;
  return nodes;
}

void begin_to_graph(Dispatch& d, bool ptsz) {
  wire::BeginCaptureToGraph req;
  if (!wire::read_begin_capture_to_graph(d.args, &req)) return;
  CUresult bad = CUDA_SUCCESS;
  std::vector<CUgraphNode> nodes = resolve_nodes(d, req.deps, &bad);
  const bool has_edges = req.deps.has_edges;
  const std::vector<CUgraphEdgeData>& edges = req.deps.edges;
  // A mode past the enum's range (0..3, the bits of its largest value) cannot even be held in a
  // CUstreamCaptureMode: answered as the driver answers a bad mode, as the generated handlers of
  // cuStreamBeginCapture do (found by dispatch_fuzz: UBSan's invalid enum load).
  if (req.mode > 3) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  auto mode = static_cast<CUstreamCaptureMode>(req.mode);
  CUstream s = nullptr;
  CUgraph g = nullptr;
  if (!d.handles.get(req.stream, &s) || !d.handles.get(req.graph, &g)) bad = CUDA_ERROR_INVALID_HANDLE;
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  const CUgraphNode* deps = nodes.empty() ? nullptr : nodes.data();
  const CUgraphEdgeData* e = has_edges ? edges.data() : nullptr;
  d.reply.put<int32_t>(ptsz ? DRV(cuStreamBeginCaptureToGraph_ptsz, s, g, deps, e, nodes.size(), mode)
                            : DRV(cuStreamBeginCaptureToGraph, s, g, deps, e, nodes.size(), mode));
}

void update_deps(Dispatch& d) {
  wire::UpdateCaptureDependencies req;
  if (!wire::read_update_capture_dependencies(d.args, &req)) return;
  CUresult bad = CUDA_SUCCESS;
  std::vector<CUgraphNode> nodes = resolve_nodes(d, req.deps, &bad);
  const bool has_edges = req.deps.has_edges;
  const std::vector<CUgraphEdgeData>& edges = req.deps.edges;
  unsigned flags = req.flags;
  bool v2 = d.op == op::cuStreamUpdateCaptureDependencies_v2 || d.op == op::cuStreamUpdateCaptureDependencies_v2_ptsz;
  if (has_edges && !v2) return (void)d.args.fail();
  CUstream s = nullptr;
  if (!d.handles.get(req.stream, &s)) bad = CUDA_ERROR_INVALID_HANDLE;
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  CUgraphNode* deps = nodes.empty() ? nullptr : nodes.data();
  const CUgraphEdgeData* e = has_edges ? edges.data() : nullptr;
  size_t n = nodes.size();
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  switch (d.op) {
    case op::cuStreamUpdateCaptureDependencies: rc = DRV(cuStreamUpdateCaptureDependencies, s, deps, n, flags); break;
    case op::cuStreamUpdateCaptureDependencies_ptsz:
      rc = DRV(cuStreamUpdateCaptureDependencies_ptsz, s, deps, n, flags);
      break;
    case op::cuStreamUpdateCaptureDependencies_v2:
      rc = DRV(cuStreamUpdateCaptureDependencies_v2, s, deps, e, n, flags);
      break;
    case op::cuStreamUpdateCaptureDependencies_v2_ptsz:
      rc = DRV(cuStreamUpdateCaptureDependencies_v2_ptsz, s, deps, e, n, flags);
      break;
    default: break;
  }
  d.reply.put<int32_t>(rc);
}

}  // namespace

void cuStreamBeginCaptureToGraph(Dispatch& d) { begin_to_graph(d, false); }
void cuStreamBeginCaptureToGraph_ptsz(Dispatch& d) { begin_to_graph(d, true); }
void cuStreamUpdateCaptureDependencies(Dispatch& d) { update_deps(d); }
void cuStreamUpdateCaptureDependencies_ptsz(Dispatch& d) { update_deps(d); }
void cuStreamUpdateCaptureDependencies_v2(Dispatch& d) { update_deps(d); }
void cuStreamUpdateCaptureDependencies_v2_ptsz(Dispatch& d) { update_deps(d); }

void cuStreamGetCaptureInfo_v2(Dispatch& d) { capture_info(d, d.drv.cuStreamGetCaptureInfo_v2, nullptr); }
void cuStreamGetCaptureInfo_v2_ptsz(Dispatch& d) { capture_info(d, d.drv.cuStreamGetCaptureInfo_v2_ptsz, nullptr); }
void cuStreamGetCaptureInfo_v3(Dispatch& d) { capture_info(d, nullptr, d.drv.cuStreamGetCaptureInfo_v3); }
void cuStreamGetCaptureInfo_v3_ptsz(Dispatch& d) { capture_info(d, nullptr, d.drv.cuStreamGetCaptureInfo_v3_ptsz); }

}  // namespace rgpu::server::handlers
