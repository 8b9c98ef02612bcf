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
// Wire: u64 stream, u8 want_edges. Reply: CUresult, i32 status, u64 id, u64 graph id,
//   u64 n, n × u64 node ids, then (want_edges) n × CUgraphEdgeData.
#include <cuda.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/call.h"
#include "client/runtime.h"
#include "client/stream_capture.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

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

constexpr uint64_t kMaxDependencies = 1 << 16;

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

namespace rgpu::client {

bool stream_is_capturing(CUstream stream) {
  if (none_open()) return false;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (rgpu_fwd_cuStreamIsCapturing(stream, &st) != CUDA_SUCCESS) return false;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult refuse_host_copy_in_capture(const char* call, CUstream stream) {
  if (!stream_is_capturing(stream)) return CUDA_SUCCESS;
  log::error("%s during stream capture is not supported by rgpu: the graph would copy at each launch, on the "
             "server, which cannot reach this process's memory; capture a device-to-device copy and copy to "
             "or from the host after the graph runs",
             call);
  return CUDA_ERROR_NOT_SUPPORTED;
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


// Begin and end: forwarded, and counted. (cuStreamBeginCaptureToGraph is not forwarded yet; when it
// is, it must count too.)
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
