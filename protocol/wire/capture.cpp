// Stream capture on the wire (layout in capture.h).
#include "protocol/wire/capture.h"

namespace rgpu::proto::wire {

void put_capture_info_ask(Writer& w, const CaptureInfoAsk& a) {
  w.put_u64(a.stream);
  w.put_u8(a.want_edges);
}

bool read_capture_info_ask(Reader& r, CaptureInfoAsk* out) {
  out->stream = r.u64();
  out->want_edges = r.u8() != 0;
  return r.ok();
}

void put_capture_info(Writer& w, bool want_edges, const CaptureInfo& v) {
  w.put<int32_t>(v.status);
  w.put_u64(v.id);
  w.put_u64(v.graph);
  w.put_u64(v.nodes.size());
  for (uint64_t n : v.nodes) w.put_u64(n);
  if (want_edges)
    for (size_t i = 0; i < v.nodes.size(); ++i) w.put(i < v.edges.size() ? v.edges[i] : CUgraphEdgeData{});
}

bool read_capture_info(Reader& r, bool want_edges, CaptureInfo* out) {
  out->status = r.get<int32_t>();
  out->id = r.u64();
  out->graph = r.u64();
  uint64_t n = r.u64();
  if (!r.ok() || n > kMaxCaptureDependencies || n > r.left() / 8) return r.fail();
  out->nodes.resize(n);
  for (auto& v : out->nodes) v = r.u64();
  out->edges.clear();
  if (want_edges) {
    if (n > r.left() / sizeof(CUgraphEdgeData)) return r.fail();
    out->edges.resize(n);
    for (auto& e : out->edges) e = r.get<CUgraphEdgeData>();
  }
  return r.ok();
}

void put_begin_capture_to_graph(Writer& w, uint64_t stream, uint64_t graph, const CUgraphNode* deps,
                                const CUgraphEdgeData* edges, size_t n, uint32_t mode) {
  w.put_u64(stream);
  w.put_u64(graph);
  put_node_list(w, deps, edges, n);
  w.put_u32(mode);
}

bool read_begin_capture_to_graph(Reader& r, BeginCaptureToGraph* out) {
  out->stream = r.u64();
  out->graph = r.u64();
  if (!read_node_list(r, &out->deps)) return false;
  out->mode = r.u32();
  return r.ok();
}

void put_update_capture_dependencies(Writer& w, uint64_t stream, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                     size_t n, uint32_t flags) {
  w.put_u64(stream);
  put_node_list(w, deps, edges, n);
  w.put_u32(flags);
}

bool read_update_capture_dependencies(Reader& r, UpdateCaptureDependencies* out) {
  out->stream = r.u64();
  if (!read_node_list(r, &out->deps)) return false;
  out->flags = r.u32();
  return r.ok();
}

}  // namespace rgpu::proto::wire
