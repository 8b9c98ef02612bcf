// Implementation of client/runtime.h and of the parts of client/call.h that are not per call:
// handle minting, tracing, the NOT_SUPPORTED stub.
#include "client/runtime.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <vector>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "client/call.h"
#include "client/contexts.h"
#include "client/stats.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "gen/cuda_enums.gen.h"
#include "gen/ops.gen.h"

// Lets rgpu-server recognise (and refuse) this library when it is pointed at it as a driver.
extern "C" __attribute__((visibility("default"))) const int rgpu_shim_marker = 1;

namespace rgpu::client {
namespace {

std::mutex g_init_mu;
bool g_init_done = false;
CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;
Connection* g_conn = nullptr;
// Leaked on purpose (and g_visible): programs call the driver from exit handlers, after static
// destructors would have run.
proto::Snapshot& g_snapshot = *new proto::Snapshot();
std::atomic<uint32_t> g_next_thread{1};
std::atomic<uint64_t> g_next_handle{proto::kFirstClientHandle};

// RGPU_TRACE destination (log::trace_stream): null when off or before the first call.
FILE* g_trace = nullptr;
std::once_flag g_trace_once;

void open_trace() { g_trace = log::trace_stream(); }

void at_exit_flush() {
  if (g_conn) g_conn->flush();
}

// The server ordinals the program may see, in the order it sees them (CUDA_VISIBLE_DEVICES).
std::vector<CUdevice>& g_visible = *new std::vector<CUdevice>();

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and CUDA_VISIBLE_DEVICES write it.
std::string uuid_text(const std::array<uint8_t, 16>& u) {
  const std::string h = crypto::hex(u.data(), u.size());
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
         h.substr(20);
}

// Applies CUDA_VISIBLE_DEVICES to the snapshot, as the driver does: entries are indices or
// (prefixes of) UUIDs; the list ends at the first entry that names no device or repeats one.
void apply_visible_devices() {
  const env::Settings& s = env::get();
  std::vector<proto::DeviceInfo> all = g_snapshot.devices;
  g_visible.clear();
  if (!s.has_visible_devices) {
    for (size_t i = 0; i < all.size(); ++i) g_visible.push_back(static_cast<CUdevice>(i));
    return;
  }
  size_t start = 0;
  const std::string& list = s.visible_devices;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.erase(0, 1);
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    int found = -1;
    if (!entry.empty() && std::isdigit(static_cast<unsigned char>(entry[0]))) {
      char* end = nullptr;
      long v = std::strtol(entry.c_str(), &end, 10);
      if (*end == '\0' && v >= 0 && static_cast<size_t>(v) < all.size()) found = static_cast<int>(v);
    } else if (entry.rfind("GPU-", 0) == 0 && entry.size() > 4) {
      for (size_t i = 0; i < all.size(); ++i)
        if (uuid_text(all[i].uuid).rfind(entry, 0) == 0) found = static_cast<int>(i);
    }
    bool repeat = false;
    for (CUdevice d : g_visible) repeat |= d == found;
    if (found < 0 || repeat) break;
    g_visible.push_back(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  g_snapshot.devices.clear();
  for (CUdevice d : g_visible) g_snapshot.devices.push_back(all[static_cast<size_t>(d)]);
}

// The device snapshot: the one the server pushed behind the handshake (no round trip), else asked.
CUresult fetch_snapshot() {
  std::vector<uint8_t> pushed;
  bool decoded;
  if (g_conn->take_pushed_snapshot(&pushed)) {
    Reader r(pushed.data(), pushed.size());
    r.get<proto::ReplyPrefix>();
    int32_t rc = r.get<int32_t>();
    if (r.ok() && rc != CUDA_SUCCESS) return static_cast<CUresult>(rc);
    decoded = r.ok() && proto::decode_snapshot(r, &g_snapshot);
  } else {
    Call c(proto::kOpSnapshot, kWaits);
    CUresult rc = c.invoke();
    if (rc != CUDA_SUCCESS) return rc;
    decoded = proto::decode_snapshot(c.reply(), &g_snapshot);
  }
  if (!decoded) {
    log::error("rgpu-server at %s sent a malformed device snapshot; are client and server the same rgpu release?",
               g_conn->server_name().c_str());
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  apply_visible_devices();
  if (g_snapshot.init_result == CUDA_SUCCESS && g_snapshot.devices.empty()) return CUDA_ERROR_NO_DEVICE;
  return static_cast<CUresult>(g_snapshot.init_result);
}

}  // namespace

CUresult init(unsigned flags) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_init_done) return g_init_result;
  g_init_done = true;
  const env::Settings& s = env::get();
  log::set_prefix(log::format("rgpu[%d]", static_cast<int>(getpid())));
  if (s.log == "debug") log::set_level(log::kDebug);
  if (s.log == "warn") log::set_level(log::kWarn);
  if (s.log == "error") log::set_level(log::kError);
  stats::enable_from_env();
  stats::note_connect_started();
  stats::Timer timer(stats::Time::kConnect);
  std::string err;
  g_conn = Connection::open(s.server, s.token, &err, /*want_snapshot=*/true);
  if (!g_conn) {
    log::error("%s", err.c_str());
    g_init_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
    return g_init_result;
  }
  std::atexit(at_exit_flush);
  g_init_result = fetch_snapshot();
  if (g_init_result == CUDA_SUCCESS) log::debug("connected to rgpu-server at %s", g_conn->server_name().c_str());
  return g_init_result;
}

Connection* connection() { return g_conn; }
CUresult no_connection_result() {
  return g_init_done ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_NOT_INITIALIZED;
}
const proto::Snapshot& snapshot() { return g_snapshot; }

const proto::DeviceInfo* device_info(CUdevice client_ordinal) {
  if (client_ordinal < 0 || static_cast<size_t>(client_ordinal) >= g_snapshot.devices.size()) return nullptr;
  return &g_snapshot.devices[static_cast<size_t>(client_ordinal)];
}

uint32_t thread_id() {
  thread_local uint32_t id = g_next_thread.fetch_add(1);
  return id;
}

bool batching() { return env::get().batch; }

void count_call(uint16_t op, bool waited, uint64_t wait_us) { stats::record(op, waited, wait_us); }

CUdevice server_device(CUdevice client_ordinal) {
  if (client_ordinal < 0 || static_cast<size_t>(client_ordinal) >= g_visible.size()) return -1;
  return g_visible[static_cast<size_t>(client_ordinal)];
}

CUdevice client_device(CUdevice server_ordinal) {
  for (size_t i = 0; i < g_visible.size(); ++i)
    if (g_visible[i] == server_ordinal) return static_cast<CUdevice>(i);
  return -1;
}

uint32_t image_arch() {
  if (!g_conn || g_snapshot.devices.empty()) return 0;
  CUdevice dev = 0;
  if (CUcontext c = contexts::current()) contexts::device_of(c, &dev);
  if (dev < 0 || static_cast<size_t>(dev) >= g_snapshot.devices.size()) dev = 0;
  const auto& attrs = g_snapshot.devices[static_cast<size_t>(dev)].attrs;
  if (attrs.size() <= CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) return 0;
  return static_cast<uint32_t>(attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR].value * 10 +
                               attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR].value);
}

uint64_t mint_handle() {
  const uint64_t id = g_next_handle.fetch_add(1, std::memory_order_relaxed);
  // Under RGPU_TRACE the id follows the call that minted it, so a trace names every handle's kind.
  if (g_trace) {
    fprintf(g_trace, "rgpu-trace   minted %#llx\n", static_cast<unsigned long long>(id));
    fflush(g_trace);
  }
  return id;
}

void trace_call(const char* name) {
  std::call_once(g_trace_once, open_trace);
  if (!g_trace) return;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count();
  fprintf(g_trace, "rgpu-trace %lld.%06lld tid=%u %s\n", static_cast<long long>(us / 1000000),
          static_cast<long long>(us % 1000000), thread_id(), name);
  fflush(g_trace);
}

void trace_result(uint16_t op, CUresult rc, bool deferred) {
  if (!g_trace) return;
  const char* name = op::name(op);
  // The driver's own name (cuGetErrorName answers from the server's snapshot), else cuda.h's.
  const char* err = nullptr;
  if (cuGetErrorName(rc, &err) != CUDA_SUCCESS || !err) err = cuda_enum::enum_name(cuda_enum::kCUresult, rc);
  fprintf(g_trace, "rgpu-trace   %s %s -> %s (%d)\n", deferred ? "earlier one-way call" : "",
          name ? name : "control", err ? err : "a CUresult cuda.h does not name", static_cast<int>(rc));
  fflush(g_trace);
}

CUresult unsupported(const char* name) {
  trace_call(name);
  log::error("%s is not supported by rgpu yet (returning CUDA_ERROR_NOT_SUPPORTED)", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace rgpu::client
