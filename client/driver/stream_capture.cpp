// Stream capture state. cuBLAS asks before every launch whether its stream is being captured into
// a graph (cuStreamGetCaptureInfo), PyTorch asks cuStreamIsCapturing before many operations: a
// round trip each would cost more than the launches. The client sees every capture begin and end,
// so while no capture is open anywhere in this process the answer is known here: not capturing.
// While one is open (any stream; other streams can join a capture through events), the question
// goes to the server.
//
// cuStreamGetCaptureInfo_v2/_v3 (and _ptsz), forwarded: The driver returns pointers to arrays it owns (the capture's
// current dependency nodes and edge data), valid until the next call on the thread; here those
// arrays live in thread-local storage on the client.
//
// Wire layouts: protocol/wire/capture.h.
//
// Async copies between device memory and this process's memory on a capturing stream (issued by
// client/driver/memory.cpp) are captured as device-to-device copies against a staging buffer or
// mapped memory (capture_host_copy, client/driver/stream_capture.h). Known limits, as for a memcpy
// node's staged host side (client/driver/graph.cpp): the host bytes of a captured host-to-device
// copy are read when cuGraphLaunch is called, not when the copy runs in the graph, so a host node
// earlier in the same graph that writes them is not seen; a captured device-to-host copy's bytes
// land after the whole graph has run, so a host node later in the same graph (a
// cuLaunchHostFunc captured after the copy) sees the previous launch's bytes.
#include <cuda.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/call.h"
#include "client/driver/stream_capture.h"
#include "client/mapped_memory.h"
#include "client/runtime.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/capture.h"

namespace {

// Streams whose capture began and has not ended (stream id → captures begun). Leaked on purpose:
// the runtime may end captures from its own exit handlers.
std::mutex& open_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<uint64_t, int>& open_captures() {
  static auto* m = new std::unordered_map<uint64_t, int>;
  return *m;
}
// Read without the lock on the fast path: a capture that begins on another thread concurrently
// cannot affect a stream this thread is asking about unless the two threads synchronise anyway.
std::atomic<int> g_open{0};

void capture_began(CUstream s, CUresult rc) {
  if (rc != CUDA_SUCCESS) return;
  std::lock_guard lk(open_mu());
  ++open_captures()[rgpu::client::handle_id(s)];
  ++g_open;
}

// A capture ends with cuStreamEndCapture whatever it returns, unless the stream was not capturing.
void capture_ended(CUstream s, CUresult rc) {
  if (rc == CUDA_ERROR_ILLEGAL_STATE || rc == CUDA_ERROR_INVALID_HANDLE || rc == CUDA_ERROR_NOT_INITIALIZED ||
      rc == CUDA_ERROR_DEVICE_UNAVAILABLE)
    return;
  std::lock_guard lk(open_mu());
  auto it = open_captures().find(rgpu::client::handle_id(s));
  if (it == open_captures().end()) return;
  if (--it->second == 0) open_captures().erase(it);
  --g_open;
}

bool none_open() { return g_open.load(std::memory_order_acquire) == 0; }

namespace wire = rgpu::proto::wire;
using wire::kMaxCaptureDependencies;

CUresult capture_info(uint16_t op, const char* name, CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  rgpu::client::trace_call(name);
  if (none_open()) {
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (count) *count = 0;
    if (deps) *deps = nullptr;
    if (edges) *edges = nullptr;
    return CUDA_SUCCESS;
  }
  thread_local std::vector<CUgraphNode> t_nodes;
  thread_local std::vector<CUgraphEdgeData> t_edges;
  rgpu::client::Call c(op, rgpu::client::kWaits);
  wire::put_capture_info_ask(c.args(), {rgpu::client::handle_id(stream), edges != nullptr});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  wire::CaptureInfo got;
  if (!wire::read_capture_info(c.reply(), edges != nullptr, &got)) return CUDA_ERROR_UNKNOWN;
  int32_t st = got.status;
  uint64_t capture_id = got.id;
  uint64_t graph_id = got.graph;
  size_t n = got.nodes.size();
  t_nodes.resize(n);
  for (size_t i = 0; i < n; ++i) t_nodes[i] = rgpu::client::handle_from<CUgraphNode>(got.nodes[i]);
  if (edges) t_edges = got.edges;
  if (status) *status = static_cast<CUstreamCaptureStatus>(st);
  if (id) *id = capture_id;
  if (graph) *graph = rgpu::client::handle_from<CUgraph>(graph_id);
  if (deps) *deps = n ? t_nodes.data() : nullptr;
  if (edges) *edges = n ? t_edges.data() : nullptr;
  if (count) *count = n;
  return CUDA_SUCCESS;
}

CUresult check_nodes(const CUgraphNode* deps, size_t n) {
  return (n && !deps) || n > kMaxCaptureDependencies ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult begin_to_graph(uint16_t op, const char* name, CUstream stream, CUgraph graph, const CUgraphNode* deps,
                        const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  rgpu::client::trace_call(name);
  rgpu::client::Call c(op, rgpu::client::kWaits);
  if (CUresult rc = check_nodes(deps, n)) return rc;
  wire::put_begin_capture_to_graph(c.args(), rgpu::client::handle_id(stream), rgpu::client::handle_id(graph), deps,
                                   edges, n, static_cast<uint32_t>(mode));
  return c.invoke();
}

CUresult update_deps(uint16_t op, const char* name, CUstream stream, const CUgraphNode* deps,
                     const CUgraphEdgeData* edges, size_t n, unsigned flags) {
  if (none_open()) {
    rgpu::client::trace_call(name);
    return CUDA_ERROR_ILLEGAL_STATE;  // the driver's answer for a stream that is not capturing
  }
  rgpu::client::trace_call(name);
  rgpu::client::Call c(op, rgpu::client::kWaits);
  if (CUresult rc = check_nodes(deps, n)) return rc;
  wire::put_update_capture_dependencies(c.args(), rgpu::client::handle_id(stream), deps, edges, n, flags);
  return c.invoke();
}

}  // namespace

namespace rgpu::client {

bool stream_is_capturing(CUstream stream) {
  if (none_open()) return false;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (rgpu_fwd_cuStreamIsCapturing(stream, &st) != CUDA_SUCCESS) return false;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult capture_host_copy(const char* call, CUstream stream, bool ptsz, CUdeviceptr device, void* host, size_t n,
                           bool to_device, bool* captured) {
  *captured = false;
  if (none_open() || n == 0) return CUDA_SUCCESS;
  auto info = ptsz ? cuStreamGetCaptureInfo_v2_ptsz : cuStreamGetCaptureInfo_v2;
  auto dtod = ptsz ? cuMemcpyDtoDAsync_v2_ptsz : cuMemcpyDtoDAsync_v2;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  // Not capturing, or a bad stream: the copy goes its usual way (and reports that itself).
  if (info(stream, &st, nullptr, &graph, nullptr, nullptr) != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_NONE)
    return CUDA_SUCCESS;
  *captured = true;
  if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  CUdeviceptr mirror = 0;
  if (mapped::active() && mapped::contains(host, n) && mapped::device_pointer(host, &mirror))
    return to_device ? dtod(device, mirror, n, stream) : dtod(mirror, device, n, stream);
  // The staging buffer is allocated outside the capture's rules: in the global mode the driver
  // refuses (and invalidates the capture on) an allocation, which the program never made.
  CUdeviceptr staging = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged = cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  CUresult rc = cuMemAlloc_v2(&staging, n);
  if (exchanged) cuThreadExchangeStreamCaptureMode(&mode);
  if (rc != CUDA_SUCCESS) {
    log::error("%s during stream capture: no device memory for its staging buffer (%zu bytes)", call, n);
    return rc;
  }
  rc = to_device ? dtod(device, staging, n, stream) : dtod(staging, device, n, stream);
  if (rc != CUDA_SUCCESS) {
    cuMemFree_v2(staging);
    return rc;
  }
  // The node just captured is now the stream's one dependency.
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 0;
  uint64_t node = 0;
  if (info(stream, &st, nullptr, &graph, &deps, &ndeps) == CUDA_SUCCESS && ndeps == 1) node = handle_id(deps[0]);
  CUDA_MEMCPY3D x{};
  x.WidthInBytes = n;
  x.Height = 1;
  x.Depth = 1;
  if (to_device) {
    x.srcMemoryType = CU_MEMORYTYPE_HOST;
    x.srcHost = host;
    x.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    x.dstDevice = staging;
  } else {
    x.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    x.srcDevice = staging;
    x.dstMemoryType = CU_MEMORYTYPE_HOST;
    x.dstHost = host;
  }
  note_graph_transfer(handle_id(graph), node, to_device, x);
  return CUDA_SUCCESS;
}

}  // namespace rgpu::client

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


// Begin and end: forwarded, and counted.
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream s) {
  CUresult rc = rgpu_fwd_cuStreamBeginCapture(s);
  capture_began(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream s) {
  CUresult rc = rgpu_fwd_cuStreamBeginCapture_ptsz(s);
  capture_began(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  CUresult rc = rgpu_fwd_cuStreamBeginCapture_v2(s, mode);
  capture_began(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  CUresult rc = rgpu_fwd_cuStreamBeginCapture_v2_ptsz(s, mode);
  capture_began(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* g) {
  CUresult rc = rgpu_fwd_cuStreamEndCapture(s, g);
  capture_ended(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  CUresult rc = rgpu_fwd_cuStreamEndCapture_ptsz(s, g);
  capture_ended(s, rc);
  return rc;
}

// cuStreamBeginCaptureToGraph: captures into the caller's graph after `deps`; counted like
// cuStreamBeginCapture.
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                         const CUgraphEdgeData* edges, size_t n,
                                                         CUstreamCaptureMode mode) {
  CUresult rc = begin_to_graph(rgpu::op::cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", s, g, deps,
                               edges, n, mode);
  capture_began(s, rc);
  return rc;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                              const CUgraphEdgeData* edges, size_t n,
                                                              CUstreamCaptureMode mode) {
  CUresult rc = begin_to_graph(rgpu::op::cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph_ptsz", s, g,
                               deps, edges, n, mode);
  capture_began(s, rc);
  return rc;
}

// Only a capturing stream has dependencies to update: while none is open the answer is local.
RGPU_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n,
                                                               unsigned int flags) {
  return update_deps(rgpu::op::cuStreamUpdateCaptureDependencies, "cuStreamUpdateCaptureDependencies", s, deps,
                     nullptr, n, flags);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n,
                                                                    unsigned int flags) {
  return update_deps(rgpu::op::cuStreamUpdateCaptureDependencies_ptsz, "cuStreamUpdateCaptureDependencies_ptsz", s,
                     deps, nullptr, n, flags);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps,
                                                                  const CUgraphEdgeData* edges, size_t n,
                                                                  unsigned int flags) {
  return update_deps(rgpu::op::cuStreamUpdateCaptureDependencies_v2, "cuStreamUpdateCaptureDependencies_v2", s, deps,
                     edges, n, flags);
}
RGPU_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps,
                                                                       const CUgraphEdgeData* edges, size_t n,
                                                                       unsigned int flags) {
  return update_deps(rgpu::op::cuStreamUpdateCaptureDependencies_v2_ptsz, "cuStreamUpdateCaptureDependencies_v2_ptsz",
                     s, deps, edges, n, flags);
}

// Asked locally while no capture is open.
RGPU_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (!none_open()) return rgpu_fwd_cuStreamIsCapturing(s, status);
  rgpu::client::trace_call("cuStreamIsCapturing");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  if (!none_open()) return rgpu_fwd_cuStreamIsCapturing_ptsz(s, status);
  rgpu::client::trace_call("cuStreamIsCapturing_ptsz");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (!none_open()) return rgpu_fwd_cuStreamGetCaptureInfo(s, status, id);
  rgpu::client::trace_call("cuStreamGetCaptureInfo");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (!none_open()) return rgpu_fwd_cuStreamGetCaptureInfo_ptsz(s, status, id);
  rgpu::client::trace_call("cuStreamGetCaptureInfo_ptsz");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

}  // extern "C"
