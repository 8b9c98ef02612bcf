// One driver call on its way to the server: what generated stubs (gen/client_stubs.gen.cpp) and
// hand-written overrides (client/driver/*.cpp) use to reach the wire.
//
// Usage, for a call that waits:
//   rgpu::client::Call c(rgpu::op::cuMemAlloc_v2, rgpu::client::kWaits);
//   c.args().put<uint64_t>(bytesize);
//   c.args().put_u8(dptr != nullptr);
//   CUresult rc = c.invoke();            // flushes queued one-way calls, sends, waits
//   if (rc == CUDA_SUCCESS && dptr) *dptr = c.reply().get<CUdeviceptr>();
//   return rc;
// For a one-way call (kOneWay), invoke() queues the frame and returns CUDA_SUCCESS at once; a
// failure comes back with the next waiting call on this thread (protocol/messages.h).
//
// invoke() returns CUDA_ERROR_NOT_INITIALIZED before cuInit has connected, and
// CUDA_ERROR_DEVICE_UNAVAILABLE when the connection is gone. With RGPU_BATCH=0 every call waits.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "client/connection.h"
#include "common/wire.h"
#include "protocol/messages.h"

namespace rgpu::client {

enum CallKind { kWaits, kOneWay };

// Several servers (RGPU_SERVER=a,b; docs/design.md §6). The number of servers is set once by
// cuInit; with one, every routing step below is this one load and branch.
namespace detail {
extern std::atomic<int> g_servers;
}
inline bool several_servers() { return detail::g_servers.load(std::memory_order_relaxed) > 1; }
// The server a handle id belongs to (its bits, protocol/messages.h kHandleServerShift); -1 for
// NULL and the special stream ids, which name no server.
inline int handle_server(uint64_t id) {
  if (id < proto::kFirstClientHandle) return -1;
  return static_cast<int>((id & proto::kHandleServerMask) >> proto::kHandleServerShift);
}
// The server of a client device ordinal, -1 for none.
int device_server(CUdevice client_ordinal);
// The server of the allocation holding p, -1 when the client has none on record. Allocations are
// recorded (note_allocation) only with several servers.
int pointer_server(CUdeviceptr p);
// Records an allocation; when it overlaps another server's allocation, records nothing and
// returns that server (two servers' device addresses can coincide: each is its own process,
// often on its own host), else -1.
int note_allocation(CUdeviceptr base, size_t size, int server);
void forget_allocation(CUdeviceptr base);
// Several servers: records memory a call just allocated at *dptr on `server` (nothing with one
// server; callers check several_servers() first, so that working out `server` and `release`
// costs nothing on the one-server path). Memory at an address another server's memory also has could not be told apart from
// it: logged naming both servers, given back on its own server with `release`, *dptr set to 0
// and CUDA_ERROR_NOT_SUPPORTED returned, rather than a later call reaching the wrong GPU. `what`
// names the allocating call in the log line.
CUresult keep_allocation(const char* what, CUdeviceptr* dptr, size_t size, int server,
                         const std::function<void(CUdeviceptr)>& release);
// The server of a handle (a stream, a pool), else that of the thread's current context: where a
// call naming only that handle goes (0 with one server).
int server_of(const void* handle);
// The server of this thread's current context (0 when none is current).
int current_server();

class Call {
 public:
  Call(uint16_t op, CallKind kind);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Where the arguments go, in the order the server's handler reads them.
  Writer& args() { return args_; }
  // Bytes sent after the arguments without copying them first (large inputs, e.g. HtoD data).
  // The memory must stay valid until invoke() returns.
  void attach(const void* data, size_t n) {
    attach_ = data;
    attach_len_ = n;
  }
  // For a waiting call: reply bytes after the first `prefix` bytes of the handler's output are
  // read straight into dst (at most cap bytes); reply() then holds only the prefix.
  void reply_sink(size_t prefix, void* dst, size_t cap) {
    sink_prefix_ = prefix;
    sink_ = dst;
    sink_cap_ = cap;
  }
  // The stream the call queues work on (client/device_work.h); calls that name none count as
  // queueing work on any stream unless device_work::invisible says they queue nothing.
  void on_stream(CUstream s) { stream_ = reinterpret_cast<uint64_t>(s); }
  // The client checked what the server could refuse (a copy into memory it holds): a one-way
  // call so marked does not make this thread's next synchronize wait to hear how it went.
  void checked() { checked_ = true; }
  // Routing (several servers): the call goes to the server of the handles, devices and pointers
  // it names, else to that of the thread's current context. Handles of two servers in one call
  // make invoke() refuse it with a log line that names both. With one server these do nothing.
  void via(const void* handle) {
    if (several_servers()) to_server(handle_server(reinterpret_cast<uint64_t>(handle)));
  }
  void via_device(CUdevice dev) {
    if (several_servers()) to_server(device_server(dev));
  }
  void via_pointer(CUdeviceptr p) {
    if (several_servers()) to_server(pointer_server(p));
  }
  // Routes the call to server s (-1: no opinion).
  void to_server(int s) {
    if (s < 0 || s == server_) return;
    if (server_ < 0) server_ = s;
    else other_ = s;
  }
  // The server the call goes to (0 with one server).
  int server() {
    if (server_ < 0) server_ = several_servers() ? current_server() : 0;
    return server_;
  }
  // A fresh id for a handle this call creates, owned by the call's server.
  uint64_t mint();
  // Sends the call. Returns the call's CUresult (for one-way calls, CUDA_SUCCESS once queued), or
  // an error deferred from an earlier one-way call on this thread, or a connection error.
  CUresult invoke();
  // invoke() in two halves, for pipelining several waiting calls (bulk copies): submit() sends,
  // finish() waits for the reply and returns what invoke() would. Waiting calls only.
  CUresult submit();
  CUresult finish();
  // The handler's output after its CUresult (waiting calls only, after invoke()).
  Reader& reply() { return reply_reader_; }
  // The error of an earlier one-way call that came back with this call's reply (CUDA_SUCCESS when
  // none). invoke() returns it only when the call itself succeeded; a caller that treats some
  // failure of its own as expected (kOpModuleByHash's NOT_FOUND) checks it here so it is not lost.
  CUresult deferred() const { return deferred_; }
  // Bytes the sink received.
  size_t sink_received() const { return sink_received_; }
  size_t sink_cap() const { return sink_cap_; }

 private:
  uint16_t op_;
  CallKind kind_;
  uint64_t stream_ = ~uint64_t{0};  // device_work::kAnyStream
  bool checked_ = false;
  std::vector<uint8_t> args_buf_;
  Writer args_{&args_buf_};
  const void* attach_ = nullptr;
  size_t attach_len_ = 0;
  size_t sink_prefix_ = 0;
  void* sink_ = nullptr;
  size_t sink_cap_ = 0;
  size_t sink_received_ = 0;
  std::vector<uint8_t> reply_buf_;
  Reader reply_reader_;
  CUresult deferred_ = CUDA_SUCCESS;
  ReplySlot slot_;
  uint32_t id_ = 0;
  int server_ = -1;  // the server the call goes to; -1 until decided
  int other_ = -1;   // a second server the call named (refused)
  Connection* route();  // the connection, or nullptr after logging why not
};

// Client handles (protocol/messages.h "Handles on the wire").
inline uint64_t handle_id(const void* h) { return reinterpret_cast<uint64_t>(h); }
template <class H>
H handle_from(uint64_t id) {
  return reinterpret_cast<H>(id);
}
// A fresh id for a handle the client names before the server creates it.
uint64_t mint_handle();

// Logs a call that this build does not forward and returns CUDA_ERROR_NOT_SUPPORTED. Used by the
// generated stubs of everything the generator cannot marshal: one log line naming the call.
CUresult unsupported(const char* name);

// Device ordinals: the program sees only the devices CUDA_VISIBLE_DEVICES names, numbered from
// 0; each server numbers all of its devices. server_device maps a client ordinal to its server's
// (-1 for one the client cannot see, which the driver refuses); client_device maps an ordinal of
// server `server` back (-1 for a device hidden from the client).
CUdevice server_device(CUdevice client_ordinal);
CUdevice client_device(CUdevice server_ordinal, int server = 0);

// RGPU_TRACE: one line per call when tracing is on (cheap check when off).
void trace_call(const char* name);

}  // namespace rgpu::client
