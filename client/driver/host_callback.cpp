// Host callbacks: cuLaunchHostFunc and cuStreamAddCallback run the user's function in this
// process, in stream order (protocol/messages.h, kOpCallback). The call is one-way: the client
// picks a callback id, remembers the function under it, and announces the notification to the
// connection (so it is read even if no thread ever waits for a reply). When the server's stream
// reaches the callback, the server sends kOpCallback and holds the stream; the connection's
// callback thread runs the function and answers kOpCallbackDone, which releases the stream.
//
// Wire layout: protocol/wire/stream.h.
// If the server cannot queue the callback, it sends kOpCallback with run = 0 and the error is
// reported with the next reply on this thread, as for any one-way call.
// Graph host nodes (client/driver/host_nodes.h, client/driver/graph.cpp) use the same ids and
// handler, registered as persistent: one id runs at every launch of the graph, so it is never
// forgotten.
// Several servers (RGPU_SERVER=a,b): a callback is announced to, and answered on, the connection
// of the server its stream (or graph) is on; every connection has the handler.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "client/call.h"
#include "client/driver/host_memory.h"
#include "client/driver/host_nodes.h"
#include "client/runtime.h"
#include "common/log.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"
#include "protocol/wire/stream.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

struct Callback {
  CUhostFn host_fn = nullptr;           // cuLaunchHostFunc
  CUstreamCallback stream_fn = nullptr;  // cuStreamAddCallback
  void* user = nullptr;
  CUstream stream = nullptr;
  bool persistent = false;  // a graph host node (client/driver/host_nodes.h): runs at every launch
  int server = 0;           // whose stream: the connection that announces it (not for graph nodes)
};

std::mutex g_mu;
// Leaked on purpose: programs call the driver from exit handlers, after static destructors.
auto& g_callbacks = *new std::unordered_map<uint64_t, Callback>();
std::atomic<uint64_t> g_next_id{1};
auto& g_done_cv = *new std::condition_variable();

// Runs on the callback thread of connection `from`. status: the stream's status
// (cuStreamAddCallback); run = false: the server could not queue the callback; forget it, run
// nothing, answer nothing.
void deliver(rgpu::client::Connection& from, uint64_t id, int32_t status, bool run) {
  Callback cb;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_callbacks.find(id);
    if (it == g_callbacks.end()) {
      rgpu::log::warn("rgpu-server announced host callback %llu, which this process never queued; ignoring it",
                      static_cast<unsigned long long>(id));
      return;
    }
    cb = it->second;
    if (!run && !cb.persistent) g_callbacks.erase(it);
  }
  if (!run) {
    g_done_cv.notify_all();
    return;
  }
  if (cb.host_fn) cb.host_fn(cb.user);
  else if (cb.stream_fn) cb.stream_fn(cb.stream, static_cast<CUresult>(status), cb.user);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    // Only now: wait_host_callbacks() waits for functions to return. Graph host nodes stay.
    if (!cb.persistent) g_callbacks.erase(id);
  }
  g_done_cv.notify_all();
  rgpu::Writer ack;
  rgpu::proto::wire::put_callback_done(ack, id);
  from.send_control(rgpu::proto::kOpCallbackDone, ack.buf().data(), ack.buf().size());
}

// Every server's connection, once: a graph's host nodes run on whichever server launches it.
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (rgpu::client::Connection* conn : rgpu::client::connections())
      if (conn) conn->set_callback_handler(deliver);
  });
}


// A host function queued on a capturing stream becomes a host node of the captured graph: it runs
// at every launch of the graph, not now (the server keeps its side the same way).
bool captured(CUstream stream, bool ptsz) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult rc = ptsz ? cuStreamIsCapturing_ptsz(stream, &st) : cuStreamIsCapturing(stream, &st);
  return rc == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUresult add(uint16_t op, const char* name, CUstream stream, Callback cb, bool with_flags, unsigned flags) {
  rgpu::client::trace_call(name);
  if (!cb.host_fn && !cb.stream_fn) return CUDA_ERROR_INVALID_VALUE;
  if (with_flags && flags != 0) return CUDA_ERROR_INVALID_VALUE;  // reserved, must be 0
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  cb.server = rgpu::client::server_of(stream);  // the connection that announces it
  rgpu::client::Connection* conn = rgpu::client::connection(cb.server);
  if (!conn) return CUDA_ERROR_INVALID_HANDLE;
  install_handlers();
  if (cb.host_fn) cb.persistent = captured(stream, op == rgpu::op::cuLaunchHostFunc_ptsz);
  uint64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_callbacks[id] = cb;
  }
  if (!cb.persistent) conn->expect_callback();
  Call c(op, rgpu::client::kOneWay);
  rgpu::proto::wire::put_host_callback(c.args(), with_flags, {handle_id(stream), id, flags});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) {
    // Not sent (or an earlier failure was reported): the server will not announce it. Only a
    // send that failed leaves it unsent; then the connection is gone and nothing is awaited.
    std::lock_guard<std::mutex> lock(g_mu);
    g_callbacks.erase(id);
  }
  return rc;
}

}  // namespace

namespace rgpu::client {

bool host_callbacks_pending() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& [id, cb] : g_callbacks)
    if (!cb.persistent) return true;
  return false;
}

void wait_host_callbacks() {
  if (!connection()) return;
  uint64_t limit = g_next_id.load();
  for (Connection* conn : connections())
    if (conn) conn->flush();  // the callbacks' own calls may still be queued here
  std::unique_lock<std::mutex> lock(g_mu);
  // Re-checked every 100 ms as well: a broken connection notifies nobody, and its callbacks are
  // not waited for.
  while (!g_done_cv.wait_for(lock, std::chrono::milliseconds(100), [&] {
    for (const auto& [id, cb] : g_callbacks) {
      if (id >= limit || cb.persistent) continue;
      Connection* conn = connection(cb.server);
      if (conn && !conn->broken()) return false;
    }
    return true;
  })) {
  }
}

uint64_t register_host_node(CUhostFn fn, void* user) {
  if (!connection()) return 0;
  install_handlers();
  uint64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_mu);
  Callback cb;
  cb.host_fn = fn;
  cb.user = user;
  cb.persistent = true;
  g_callbacks[id] = cb;
  return id;
}

void forget_host_node(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_callbacks.erase(id);
}

bool host_node(uint64_t id, CUhostFn* fn, void** user) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_callbacks.find(id);
  if (it == g_callbacks.end() || !it->second.persistent) return false;
  *fn = it->second.host_fn;
  *user = it->second.user;
  return true;
}

void expect_host_callbacks(uint64_t n, const void* exec) {
  Connection* conn = connection(server_of(exec));
  if (!conn) return;
  for (uint64_t i = 0; i < n; ++i) conn->expect_callback();
}

}  // namespace rgpu::client

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return add(rgpu::op::cuLaunchHostFunc, "cuLaunchHostFunc", hStream, {fn, nullptr, userData, hStream}, false, 0);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  return add(rgpu::op::cuLaunchHostFunc_ptsz, "cuLaunchHostFunc_ptsz", hStream, {fn, nullptr, userData, hStream},
             false, 0);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                                 unsigned int flags) {
  return add(rgpu::op::cuStreamAddCallback, "cuStreamAddCallback", hStream, {nullptr, callback, userData, hStream},
             true, flags);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void* userData,
                                                      unsigned int flags) {
  return add(rgpu::op::cuStreamAddCallback_ptsz, "cuStreamAddCallback_ptsz", hStream,
             {nullptr, callback, userData, hStream}, true, flags);
}

}  // extern "C"
