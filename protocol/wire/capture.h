// Stream capture on the wire: cuStreamGetCaptureInfo_v2/_v3, cuStreamBeginCaptureToGraph and
// cuStreamUpdateCaptureDependencies(_v2), each with _ptsz. Used by client/driver/stream_capture.cpp
// and server/handlers/stream_capture.cpp. Nodes and graphs travel as client ids.
//
// Layout:
//  cuStreamGetCaptureInfo_v2/_v3: u64 stream, u8 want_edges. Reply: CUresult, i32 status,
//    u64 capture id, u64 graph id, u64 n (at most kMaxCaptureDependencies), n × u64 node ids,
//    then (want_edges) n × CUgraphEdgeData. The driver returns arrays it owns; the client keeps
//    them in thread-local storage, valid until the thread's next call, as the driver's are.
//  cuStreamBeginCaptureToGraph: u64 stream, u64 graph, NodeList (protocol/wire/graph.h),
//    u32 mode. Reply: CUresult.
//  cuStreamUpdateCaptureDependencies(_v2): u64 stream, NodeList (edges only for _v2), u32 flags.
//    Reply: CUresult.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/graph.h"

namespace rgpu::proto::wire {

inline constexpr uint64_t kMaxCaptureDependencies = 1 << 16;

struct CaptureInfoAsk {
  uint64_t stream = 0;
  bool want_edges = false;
};
void put_capture_info_ask(Writer& w, const CaptureInfoAsk& a);
bool read_capture_info_ask(Reader& r, CaptureInfoAsk* out);

struct CaptureInfo {
  int32_t status = 0;  // CUstreamCaptureStatus
  uint64_t id = 0, graph = 0;
  std::vector<uint64_t> nodes;
  std::vector<CUgraphEdgeData> edges;  // as many as nodes, when asked
};
// The reader refuses more than kMaxCaptureDependencies nodes (the client answers CUDA_ERROR_UNKNOWN).
void put_capture_info(Writer& w, bool want_edges, const CaptureInfo& v);
bool read_capture_info(Reader& r, bool want_edges, CaptureInfo* out);

void put_begin_capture_to_graph(Writer& w, uint64_t stream, uint64_t graph, const CUgraphNode* deps,
                                const CUgraphEdgeData* edges, size_t n, uint32_t mode);
struct BeginCaptureToGraph {
  uint64_t stream = 0, graph = 0;
  NodeList deps;
  uint32_t mode = 0;
};
bool read_begin_capture_to_graph(Reader& r, BeginCaptureToGraph* out);

void put_update_capture_dependencies(Writer& w, uint64_t stream, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                     size_t n, uint32_t flags);
struct UpdateCaptureDependencies {
  uint64_t stream = 0;
  NodeList deps;
  uint32_t flags = 0;
};
bool read_update_capture_dependencies(Reader& r, UpdateCaptureDependencies* out);

}  // namespace rgpu::proto::wire
