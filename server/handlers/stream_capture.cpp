// cuStreamGetCaptureInfo_v2/_v3, cuStreamBeginCaptureToGraph, cuStreamUpdateCaptureDependencies
// (wire layouts in client/driver/stream_capture.cpp).
#include <cuda.h>

#include <vector>

#include "gen/ops.gen.h"
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

constexpr uint64_t kMaxNodes = 1 << 20;

#define DRV(fn, ...) (d.drv.fn ? d.drv.fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

// u64 n, n × u64 node, u8 has_edges, (has_edges) n × CUgraphEdgeData. False: the payload is
// malformed (already failed); *bad: a node id not bound.
bool read_nodes(Dispatch& d, std::vector<CUgraphNode>* nodes, std::vector<CUgraphEdgeData>* edges, bool* has_edges,
                CUresult* bad) {
  uint64_t n = d.args.u64();
  if (!d.args.ok() || n > kMaxNodes || n > d.args.left() / 8) return d.args.fail(), false;
  std::vector<uint64_t> ids(n);
  for (auto& v : ids) v = d.args.u64();
  *has_edges = d.args.u8() != 0;
  edges->resize(*has_edges ? n : 0);
  for (auto& e : *edges) e = d.args.get<CUgraphEdgeData>();
  if (!d.args.ok()) return false;
  nodes->resize(n);
  for (size_t i = 0; i < n; ++i)
    if (!d.handles.get(ids[i], &(*nodes)[i]) && *bad == CUDA_SUCCESS) *bad = CUDA_ERROR_INVALID_HANDLE;
  return true;
}

// Wire: u64 stream, u64 graph, Nodes, u32 mode. Reply: CUresult.
void begin_to_graph(Dispatch& d, bool ptsz) {
  uint64_t sid = d.args.u64(), gid = d.args.u64();
  std::vector<CUgraphNode> nodes;
  std::vector<CUgraphEdgeData> edges;
  bool has_edges = false;
  CUresult bad = CUDA_SUCCESS;
  if (!read_nodes(d, &nodes, &edges, &has_edges, &bad)) return;
  auto mode = static_cast<CUstreamCaptureMode>(d.args.u32());
  if (!d.args.ok()) return;
  CUstream s = nullptr;
  CUgraph g = nullptr;
  if (!d.handles.get(sid, &s) || !d.handles.get(gid, &g)) bad = CUDA_ERROR_INVALID_HANDLE;
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  const CUgraphNode* deps = nodes.empty() ? nullptr : nodes.data();
  const CUgraphEdgeData* e = has_edges ? edges.data() : nullptr;
  d.reply.put<int32_t>(ptsz ? DRV(cuStreamBeginCaptureToGraph_ptsz, s, g, deps, e, nodes.size(), mode)
                            : DRV(cuStreamBeginCaptureToGraph, s, g, deps, e, nodes.size(), mode));
}

// Wire: u64 stream, Nodes, u32 flags. Reply: CUresult.
void update_deps(Dispatch& d) {
  uint64_t sid = d.args.u64();
  std::vector<CUgraphNode> nodes;
  std::vector<CUgraphEdgeData> edges;
  bool has_edges = false;
  CUresult bad = CUDA_SUCCESS;
  if (!read_nodes(d, &nodes, &edges, &has_edges, &bad)) return;
  unsigned flags = d.args.u32();
  if (!d.args.ok()) return;
  bool v2 = d.op == op::cuStreamUpdateCaptureDependencies_v2 || d.op == op::cuStreamUpdateCaptureDependencies_v2_ptsz;
  if (has_edges && !v2) return (void)d.args.fail();
  CUstream s = nullptr;
  if (!d.handles.get(sid, &s)) bad = CUDA_ERROR_INVALID_HANDLE;
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
