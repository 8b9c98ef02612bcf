// Host↔device copies: the calls whose payload is the user's data. Large copies travel as
// RGPU_BULK_CHUNK frames back to back with no round trip between them (docs/design.md §3, "bulk
// data"); host-to-device chunks are written from the caller's memory without a copy, and
// device-to-host replies are read straight into the caller's buffer (Call::reply_sink).
//
// Semantics kept from the driver:
// - cuMemcpyHtoD returns once the source is consumed; all its chunks but the last are one-way,
//   the last waits, so the call reports this copy's errors (and any earlier deferred ones).
// - cuMemcpyHtoDAsync copies the source before it returns (legal for pageable memory), is
//   one-way, and runs in stream order on the server.
// - cuMemcpyDtoHAsync must land in the caller's buffer by the synchronize that covers it: it is
//   one-way, and the server sends the bytes when the copy has run (below). Both hold for pinned memory
//   (client/driver/host_memory.h) too: pinned is a promise about the client's memory only.
// - A copy whose host side lies in mapped host memory (DEVICEMAP) runs on the server against its
//   copy of the buffer (client/mapped_memory.h), so its bytes cross the network once.
// - cuMemcpy / cuMemcpyAsync (unified addressing): each address is host memory of this process
//   when it lies in a pinned range of ours or when the server's driver does not know it as device
//   memory (one cuPointerGetAttributes round trip for an address outside the pinned ranges);
//   then the copy runs as HtoD, DtoH or DtoD. Host to host copies run here, after the stream
//   (async) or the context (sync) has finished the work before them.
#include <cuda.h>

#include <algorithm>
#include <unordered_map>
#include <mutex>
#include <condition_variable>
#include <chrono>
#include <atomic>
#include <deque>
#include <memory>
#include <cstring>

#include "client/call.h"
#include "client/device_memory.h"
#include "client/driver/host_memory.h"
#include "client/driver/stream_capture.h"
#include "client/mapped_memory.h"
#include "client/progress.h"
#include "client/runtime.h"
#include "common/env.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/copy.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;
using rgpu::client::is_device;

// Wire layout: protocol/wire/copy.h (cuMemcpyHtoD*).
CUresult htod(uint16_t op, bool async, CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  if (n && !src) return CUDA_ERROR_INVALID_VALUE;
  if (async) {  // on a capturing stream: captured through staging (client/driver/stream_capture.h)
    bool captured = false;
    CUresult rc = rgpu::client::capture_host_copy("cuMemcpyHtoDAsync", stream, op == rgpu::op::cuMemcpyHtoDAsync_v2_ptsz,
                                                  dst, const_cast<void*>(src), n, true, &captured);
    if (captured) return rc;
  }
  if (async && rgpu::client::host_callbacks_pending() && rgpu::client::find_host_range(src, n, nullptr))
    rgpu::client::wait_host_callbacks();  // a callback ahead may still write the source
  if (n && rgpu::client::mapped::active() && rgpu::client::mapped::contains(src, n))
    return rgpu::client::mapped::copy(op, async, dst, src, n, async ? handle_id(stream) : 0);
  // Into memory this process allocated and holds: nothing the server could refuse, so a
  // synchronize after it need not wait to hear (client/device_work.h).
  const bool checked = rgpu::client::device_memory::contains(dst, n);
  rgpu::client::progress::Transfer shown(rgpu::client::progress::Kind::kToGpu, n);
  size_t off = 0;
  do {
    size_t len = std::min<size_t>(n - off, rgpu::env::get().bulk_chunk);
    bool last = off + len == n;
    Call c(op, (last && !async) ? rgpu::client::kWaits : rgpu::client::kOneWay);
    c.via_pointer(dst);
    c.via(stream);
    if (checked) c.checked();
    rgpu::proto::wire::put_htod_head(c.args(), async, dst + off, handle_id(stream), len);
    c.attach(static_cast<const uint8_t*>(src) + off, len);
    CUresult rc = c.invoke();
    if (rc != CUDA_SUCCESS) return rc;
    off += len;
  } while (off < n);
  return CUDA_SUCCESS;
}

// Async device-to-host copies are one-way: each chunk's destination is registered under a
// delivery id, and the server sends the bytes as a kOpAsyncData frame once the copy has run
// (protocol/messages.h); the connection's reading thread writes them into place. They are in
// place by the time any later call of this thread to their server returns, and every
// synchronizing call (client/driver/sync.cpp) also waits for those of other threads to its server
// (wait_async_copies).
struct AsyncCopy {
  uint8_t* dst;
  size_t n;
  int server;  // whose connection delivers it
};
std::mutex& async_mu() {
  static auto* m = new std::mutex;  // leaked: used from exit handlers
  return *m;
}
auto& g_async = *new std::unordered_map<uint64_t, AsyncCopy>();
auto& g_async_cv = *new std::condition_variable();
std::atomic<uint64_t> g_next_delivery{1};

void* async_dest(uint64_t id, int32_t status, size_t n) {
  std::lock_guard lk(async_mu());
  auto it = g_async.find(id);
  if (it == g_async.end() || (status == 0 && n != it->second.n)) return nullptr;
  return it->second.dst;
}

void async_done(uint64_t id, int32_t status) {
  {
    std::lock_guard lk(async_mu());
    g_async.erase(id);
  }
  if (status != 0)
    rgpu::log::debug("async device-to-host copy %llu failed with %d (reported with the next call that waits)",
                     static_cast<unsigned long long>(id), status);
  g_async_cv.notify_all();
}

// Wire layout: protocol/wire/copy.h (cuMemcpyDtoH*). Async ops are one-way; the bytes come as
// kOpAsyncData. All chunk requests are sent before the first reply is awaited, so the server copies chunk k+1
// off the device while chunk k is on the wire; each reply lands in its slice of dst.
CUresult dtoh(uint16_t op, bool async, void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (n && !dst) return CUDA_ERROR_INVALID_VALUE;
  if (async) {  // on a capturing stream: captured through staging (client/driver/stream_capture.h)
    bool captured = false;
    CUresult rc = rgpu::client::capture_host_copy("cuMemcpyDtoHAsync", stream, op == rgpu::op::cuMemcpyDtoHAsync_v2_ptsz,
                                                  src, dst, n, false, &captured);
    if (captured) return rc;
  }
  if (n && rgpu::client::mapped::active() && rgpu::client::mapped::contains(dst, n))
    return rgpu::client::mapped::copy(op, async, src, dst, n, async ? handle_id(stream) : 0);
  if (async && n) {
    rgpu::client::Connection* conn = rgpu::client::connection();
    if (!conn) return CUDA_ERROR_NOT_INITIALIZED;
    static std::once_flag once;
    // Every server's connection delivers (RGPU_SERVER=a,b): delivery ids are the process's.
    std::call_once(once, [] {
      for (rgpu::client::Connection* c : rgpu::client::connections()) c->set_async_data_handlers(async_dest, async_done);
    });
    size_t off = 0;
    do {
      size_t len = std::min<size_t>(n - off, rgpu::env::get().bulk_chunk);
      uint64_t id = g_next_delivery.fetch_add(1);
      Call c(op, rgpu::client::kOneWay);
      c.via_pointer(src);
      c.via(stream);
      c.on_stream(stream);
      {
        std::lock_guard lk(async_mu());
        g_async[id] = AsyncCopy{static_cast<uint8_t*>(dst) + off, len, c.server()};
      }
      rgpu::proto::wire::put_dtoh(c.args(), true, {src + off, handle_id(stream), len, id});
      if (CUresult rc = c.invoke()) {
        std::lock_guard lk(async_mu());
        g_async.erase(id);  // not sent, or an earlier failure reported: the data will not come
        return rc;
      }
      off += len;
    } while (off < n);
    return CUDA_SUCCESS;
  }
  rgpu::client::progress::Transfer shown(rgpu::client::progress::Kind::kFromGpu, n);
  constexpr size_t kInFlight = 32;  // chunks requested ahead
  std::deque<std::unique_ptr<Call>> calls;
  CUresult first = CUDA_SUCCESS;
  size_t off = 0;
  auto finish_one = [&] {
    std::unique_ptr<Call>& c = calls.front();
    CUresult rc = c->finish();
    if (rc == CUDA_SUCCESS && c->sink_received() != c->sink_cap()) rc = CUDA_ERROR_UNKNOWN;
    if (first == CUDA_SUCCESS) first = rc;
    calls.pop_front();
  };
  do {
    size_t len = std::min<size_t>(n - off, rgpu::env::get().bulk_chunk);
    auto c = std::make_unique<Call>(op, rgpu::client::kWaits);
    c->via_pointer(src);
    rgpu::proto::wire::put_dtoh(c->args(), false, {src + off, 0, len, 0});
    c->reply_sink(sizeof(int32_t), static_cast<uint8_t*>(dst) + off, len);
    CUresult rc = c->submit();
    if (rc != CUDA_SUCCESS) {
      first = first == CUDA_SUCCESS ? rc : first;
      break;
    }
    calls.push_back(std::move(c));
    if (calls.size() >= kInFlight) finish_one();
    off += len;
  } while (off < n);
  while (!calls.empty()) finish_one();
  return first;
}

struct UnifiedOps {
  uint16_t htod, dtoh;
  CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*sync)(CUstream);  // for host-to-host copies
};

CUresult unified(const UnifiedOps& ops, bool async, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (n == 0) return CUDA_SUCCESS;
  bool dst_dev = is_device(dst), src_dev = is_device(src);
  if (dst_dev && src_dev) return async ? ops.dtod_async(dst, src, n, stream) : ops.dtod(dst, src, n);
  if (dst_dev) return htod(ops.htod, async, dst, reinterpret_cast<const void*>(src), n, stream);
  if (src_dev) return dtoh(ops.dtoh, async, reinterpret_cast<void*>(dst), src, n, stream);
  if (CUresult rc = ops.sync(stream)) return rc;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult ctx_sync(CUstream) { return cuCtxSynchronize(); }

}  // namespace

namespace rgpu::client {

void wait_async_copies(int server) {
  uint64_t limit = g_next_delivery.load();
  std::unique_lock lk(async_mu());
  // Re-checked every 100 ms as well: a broken connection delivers nothing more.
  Connection* conn = connection(server);
  while (!g_async_cv.wait_for(lk, std::chrono::milliseconds(100), [&] {
    if (!conn || conn->broken()) return true;
    for (const auto& [id, c] : g_async)
      if (id < limit && c.server == server) return false;
    return true;
  })) {
  }
}

}  // namespace rgpu::client

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  rgpu::client::trace_call("cuMemcpy");
  static const UnifiedOps ops{rgpu::op::cuMemcpyHtoD_v2, rgpu::op::cuMemcpyDtoH_v2, cuMemcpyDtoD_v2,
                              cuMemcpyDtoDAsync_v2, ctx_sync};
  return unified(ops, false, dst, src, n, nullptr);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  rgpu::client::trace_call("cuMemcpy_ptds");
  static const UnifiedOps ops{rgpu::op::cuMemcpyHtoD_v2_ptds, rgpu::op::cuMemcpyDtoH_v2_ptds, cuMemcpyDtoD_v2_ptds,
                              cuMemcpyDtoDAsync_v2_ptsz, ctx_sync};
  return unified(ops, false, dst, src, n, nullptr);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  rgpu::client::trace_call("cuMemcpyAsync");
  static const UnifiedOps ops{rgpu::op::cuMemcpyHtoDAsync_v2, rgpu::op::cuMemcpyDtoHAsync_v2, cuMemcpyDtoD_v2,
                              cuMemcpyDtoDAsync_v2, cuStreamSynchronize};
  return unified(ops, true, dst, src, n, s);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  rgpu::client::trace_call("cuMemcpyAsync_ptsz");
  static const UnifiedOps ops{rgpu::op::cuMemcpyHtoDAsync_v2_ptsz, rgpu::op::cuMemcpyDtoHAsync_v2_ptsz,
                              cuMemcpyDtoD_v2_ptds, cuMemcpyDtoDAsync_v2_ptsz, cuStreamSynchronize_ptsz};
  return unified(ops, true, dst, src, n, s);
}

#define RGPU_HTOD(name)                                                                   \
  RGPU_EXPORT CUresult CUDAAPI name(CUdeviceptr dst, const void* src, size_t n) {                     \
    rgpu::client::trace_call(#name);                                                                  \
    return htod(rgpu::op::name, false, dst, src, n, nullptr);                                         \
  }
RGPU_HTOD(cuMemcpyHtoD_v2)
RGPU_HTOD(cuMemcpyHtoD_v2_ptds)
#undef RGPU_HTOD

#define RGPU_DTOH(name)                                                    \
  RGPU_EXPORT CUresult CUDAAPI name(void* dst, CUdeviceptr src, size_t n) { \
    rgpu::client::trace_call(#name);                                       \
    return dtoh(rgpu::op::name, false, dst, src, n, nullptr);              \
  }
RGPU_DTOH(cuMemcpyDtoH_v2)
RGPU_DTOH(cuMemcpyDtoH_v2_ptds)
#undef RGPU_DTOH

#define RGPU_HTOD_ASYNC(name)                                                                        \
  RGPU_EXPORT CUresult CUDAAPI name(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {   \
    rgpu::client::trace_call(#name);                                                                 \
    return htod(rgpu::op::name, true, dst, src, n, stream);                                          \
  }
RGPU_HTOD_ASYNC(cuMemcpyHtoDAsync_v2)
RGPU_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz)
#undef RGPU_HTOD_ASYNC

#define RGPU_DTOH_ASYNC(name)                                                                \
  RGPU_EXPORT CUresult CUDAAPI name(void* dst, CUdeviceptr src, size_t n, CUstream stream) { \
    rgpu::client::trace_call(#name);                                                         \
    return dtoh(rgpu::op::name, true, dst, src, n, stream);                                  \
  }
RGPU_DTOH_ASYNC(cuMemcpyDtoHAsync_v2)
RGPU_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz)
#undef RGPU_DTOH_ASYNC

// The pre-3.2 entry points with 32-bit device pointers and sizes travel as their _v2 forms.
RGPU_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int n) {
  return cuMemcpyHtoD_v2(dst, src, n);
}
RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int n) {
  return cuMemcpyDtoH_v2(dst, src, n);
}
RGPU_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dst, const void* src, unsigned int n, CUstream s) {
  return cuMemcpyHtoDAsync_v2(dst, src, n, s);
}
RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr_v1 src, unsigned int n, CUstream s) {
  return cuMemcpyDtoHAsync_v2(dst, src, n, s);
}

}  // extern "C"

namespace {

// keep_allocation's way to give memory back on `server` alone (client/call.h).
std::function<void(CUdeviceptr)> free_on(int server) {
  return [server](CUdeviceptr p) {
    rgpu::client::device_memory::forget(p);
    rgpu::client::Call c(rgpu::op::cuMemFree_v2, rgpu::client::kOneWay);
    c.to_server(server);
    c.args().put<CUdeviceptr>(p);
    c.invoke();
  };
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUresult rc = rgpu::client::device_memory::allocate(dptr, bytesize);
  // Several servers: calls that name only this pointer go to its server (client/call.h).
  if (rc != CUDA_SUCCESS || !dptr || !rgpu::client::several_servers()) return rc;
  const int server = rgpu::client::current_server();
  return rgpu::client::keep_allocation("cuMemAlloc", dptr, bytesize, server, free_on(server));
}

RGPU_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                               unsigned int element_bytes) {
  CUresult rc = rgpu_fwd_cuMemAllocPitch_v2(dptr, pitch, width, height, element_bytes);
  if (rc != CUDA_SUCCESS || !dptr || !pitch || !rgpu::client::several_servers()) return rc;
  const int server = rgpu::client::current_server();
  return rgpu::client::keep_allocation("cuMemAllocPitch", dptr, *pitch * height, server, free_on(server));
}

RGPU_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  rgpu::client::device_memory::forget(dptr);
  CUresult rc = rgpu_fwd_cuMemFree_v2(dptr);
  rgpu::client::forget_allocation(dptr);
  return rc;
}

}  // extern "C"
