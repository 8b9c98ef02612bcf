// cuStreamGetCaptureInfo_v2/_v3 (and _ptsz): cuBLAS asks before every launch whether its stream
// is being captured into a graph. The driver returns pointers to arrays it owns (the capture's
// current dependency nodes and edge data), valid until the next call on the thread; here those
// arrays live in thread-local storage on the client.
//
// Wire: u64 stream, u8 want_edges. Reply: CUresult, i32 status, u64 id, u64 graph id,
//   u64 n, n × u64 node ids, then (want_edges) n × CUgraphEdgeData.
#include <cuda.h>

#include <vector>

#include "client/call.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

constexpr uint64_t kMaxDependencies = 1 << 16;

CUresult capture_info(uint16_t op, const char* name, CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  rgpu::client::trace_call(name);
  thread_local std::vector<CUgraphNode> t_nodes;
  thread_local std::vector<CUgraphEdgeData> t_edges;
  rgpu::client::Call c(op, rgpu::client::kWaits);
  c.args().put_u64(rgpu::client::handle_id(stream));
  c.args().put_u8(edges != nullptr);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  rgpu::Reader& r = c.reply();
  int32_t st = r.get<int32_t>();
  uint64_t capture_id = r.u64();
  uint64_t graph_id = r.u64();
  uint64_t n = r.u64();
  if (!r.ok() || n > kMaxDependencies) return CUDA_ERROR_UNKNOWN;
  t_nodes.resize(n);
  for (auto& node : t_nodes) node = rgpu::client::handle_from<CUgraphNode>(r.u64());
  if (edges) {
    t_edges.resize(n);
    for (auto& e : t_edges) e = r.get<CUgraphEdgeData>();
  }
  if (!r.ok()) return CUDA_ERROR_UNKNOWN;
  if (status) *status = static_cast<CUstreamCaptureStatus>(st);
  if (id) *id = capture_id;
  if (graph) *graph = rgpu::client::handle_from<CUgraph>(graph_id);
  if (deps) *deps = n ? t_nodes.data() : nullptr;
  if (edges) *edges = n ? t_edges.data() : nullptr;
  if (count) *count = n;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                       CUgraph* g, const CUgraphNode** deps, size_t* n) {
  return capture_info(rgpu::op::cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo_v2", s, st, id, g, deps, nullptr, n);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                            CUgraph* g, const CUgraphNode** deps, size_t* n) {
  return capture_info(rgpu::op::cuStreamGetCaptureInfo_v2_ptsz, "cuStreamGetCaptureInfo_v2_ptsz", s, st, id, g, deps,
                      nullptr, n);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                       CUgraph* g, const CUgraphNode** deps,
                                                       const CUgraphEdgeData** edges, size_t* n) {
  return capture_info(rgpu::op::cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo_v3", s, st, id, g, deps, edges, n);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                            CUgraph* g, const CUgraphNode** deps,
                                                            const CUgraphEdgeData** edges, size_t* n) {
  return capture_info(rgpu::op::cuStreamGetCaptureInfo_v3_ptsz, "cuStreamGetCaptureInfo_v3_ptsz", s, st, id, g, deps,
                      edges, n);
}

}  // extern "C"
