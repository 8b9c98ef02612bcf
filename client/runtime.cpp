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
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "client/call.h"
#include "client/contexts.h"
#include "client/stats.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "gen/cuda_enums.gen.h"
#include "gen/ops.gen.h"
#include "protocol/client_session.h"

// Lets rgpu-server recognise (and refuse) this library when it is pointed at it as a driver.
extern "C" __attribute__((visibility("default"))) const int rgpu_shim_marker = 1;

namespace rgpu::client {
namespace {

std::mutex g_init_mu;
bool g_init_done = false;
CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;
Connection* g_conn = nullptr;  // server 0's (the only one, most often)
// Every server's connection, by server number (RGPU_SERVER's order). Filled before g_servers is
// set, never changed after: readers need no lock.
std::vector<Connection*>& g_conns = *new std::vector<Connection*>();
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
  for (Connection* c : g_conns) c->flush();
}

// A device as a server numbers it: the server's number and its ordinal there.
struct Placed {
  int server;
  CUdevice local;
};
// The devices the program may see, in the order it sees them (CUDA_VISIBLE_DEVICES), by client
// ordinal.
std::vector<Placed>& g_visible = *new std::vector<Placed>();

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and CUDA_VISIBLE_DEVICES write it.
std::string uuid_text(const std::array<uint8_t, 16>& u) {
  const std::string h = crypto::hex(u.data(), u.size());
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
         h.substr(20);
}

// Applies CUDA_VISIBLE_DEVICES to the snapshot, as the driver does: entries are indices or
// (prefixes of) UUIDs; the list ends at the first entry that names no device or repeats one.
// `placed` gives each device of the snapshot its server and ordinal there.
void apply_visible_devices(const std::vector<Placed>& placed) {
  const env::Settings& s = env::get();
  std::vector<proto::DeviceInfo> all = g_snapshot.devices;
  g_visible.clear();
  if (!s.has_visible_devices) {
    g_visible = placed;
    return;
  }
  std::vector<int> chosen;
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
    for (int d : chosen) repeat |= d == found;
    if (found < 0 || repeat) break;
    chosen.push_back(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  g_snapshot.devices.clear();
  for (int d : chosen) {
    g_snapshot.devices.push_back(all[static_cast<size_t>(d)]);
    g_visible.push_back(placed[static_cast<size_t>(d)]);
  }
}

// Server `server`'s device snapshot: the one it pushed behind the handshake (no round trip), else
// asked.
CUresult fetch_snapshot(int server, proto::Snapshot* out) {
  std::vector<uint8_t> pushed;
  bool decoded;
  Connection* conn = g_conns[static_cast<size_t>(server)];
  if (conn->take_pushed_snapshot(&pushed)) {
    Reader r(pushed.data(), pushed.size());
    r.get<proto::ReplyPrefix>();
    int32_t rc = r.get<int32_t>();
    if (r.ok() && rc != CUDA_SUCCESS) return static_cast<CUresult>(rc);
    decoded = r.ok() && proto::decode_snapshot(r, out);
  } else {
    Call c(proto::kOpSnapshot, kWaits);
    c.to_server(server);
    CUresult rc = c.invoke();
    if (rc != CUDA_SUCCESS) return rc;
    decoded = proto::decode_snapshot(c.reply(), out);
  }
  if (!decoded) {
    log::error("rgpu-server at %s sent a malformed device snapshot; are client and server the same rgpu release?",
               conn->server_name().c_str());
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  return CUDA_SUCCESS;
}

// Every server's snapshot, as one: the first server's driver, error texts and module cache, and
// the devices of all of them, the first server's first (RGPU_SERVER's order), then
// CUDA_VISIBLE_DEVICES applied to that list.
CUresult fetch_snapshots() {
  std::vector<Placed> placed;
  for (size_t i = 0; i < g_conns.size(); ++i) {
    proto::Snapshot one;
    if (CUresult rc = fetch_snapshot(static_cast<int>(i), &one)) return rc;
    if (one.init_result != CUDA_SUCCESS) {
      if (g_conns.size() > 1)
        log::error("rgpu-server at %s: its driver's cuInit failed (%d)", g_conns[i]->server_name().c_str(), one.init_result);
      g_snapshot.init_result = one.init_result;
      return static_cast<CUresult>(one.init_result);
    }
    for (size_t d = 0; d < one.devices.size(); ++d) placed.push_back({static_cast<int>(i), static_cast<CUdevice>(d)});
    if (i == 0) {
      g_snapshot = std::move(one);
      continue;
    }
    for (auto& dev : one.devices) g_snapshot.devices.push_back(std::move(dev));
  }
  if (g_snapshot.devices.size() > proto::kMaxSnapshotDevices) {
    log::error("the servers of RGPU_SERVER have %zu GPUs together; rgpu presents at most %u to one program",
               g_snapshot.devices.size(), proto::kMaxSnapshotDevices);
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  apply_visible_devices(placed);
  if (g_snapshot.init_result == CUDA_SUCCESS && g_snapshot.devices.empty()) return CUDA_ERROR_NO_DEVICE;
  return static_cast<CUresult>(g_snapshot.init_result);
}

// Tells every server but the first its number (kOpHandleSpace), so that the handles it names carry
// it: asked of all at once, then each answer awaited.
CUresult number_the_servers() {
  std::vector<std::unique_ptr<Call>> calls;
  for (size_t i = 1; i < g_conns.size(); ++i) {
    calls.push_back(std::make_unique<Call>(proto::kOpHandleSpace, kWaits));
    calls.back()->to_server(static_cast<int>(i));
    calls.back()->args().put_u8(static_cast<uint8_t>(i));
    if (CUresult rc = calls.back()->submit()) return rc;
  }
  for (size_t i = 1; i < g_conns.size(); ++i) {
    CUresult rc = calls[i - 1]->finish();
    if (rc == CUDA_ERROR_NOT_SUPPORTED) {
      log::error("rgpu-server at %s is older than this client and cannot be one of several servers in "
                 "RGPU_SERVER; upgrade it, or name it alone",
                 g_conns[i]->server_name().c_str());
      return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    if (rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
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
  std::vector<std::string> servers;
  if (!proto::split_server_list(s.server, &servers, &err)) {
    log::error("%s", err.c_str());
    g_init_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
    return g_init_result;
  }
  // Several servers are dialled at once: a program's start waits for the slowest, not the sum.
  std::vector<Connection*> conns(servers.size(), nullptr);
  std::vector<std::string> errs(servers.size());
  std::vector<std::thread> dialers;
  for (size_t i = 1; i < servers.size(); ++i)
    dialers.emplace_back([&, i] { conns[i] = Connection::open(servers[i], s.token, &errs[i], /*want_snapshot=*/true); });
  conns[0] = Connection::open(servers[0], s.token, &errs[0], /*want_snapshot=*/true);
  for (auto& t : dialers) t.join();
  for (size_t i = 0; i < servers.size(); ++i) {
    if (conns[i]) continue;
    log::error("%s", errs[i].c_str());
    for (Connection* c : conns) delete c;
    g_init_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
    return g_init_result;
  }
  g_conns = conns;
  g_conn = conns[0];
  detail::g_servers.store(static_cast<int>(conns.size()), std::memory_order_release);
  std::atexit(at_exit_flush);
  g_init_result = several_servers() ? number_the_servers() : CUDA_SUCCESS;
  if (g_init_result == CUDA_SUCCESS) g_init_result = fetch_snapshots();
  if (g_init_result == CUDA_SUCCESS) log::debug("connected to rgpu-server at %s", s.server.c_str());
  return g_init_result;
}

Connection* connection() { return g_conn; }
Connection* connection(int server) {
  return server >= 0 && static_cast<size_t>(server) < g_conns.size() ? g_conns[static_cast<size_t>(server)] : nullptr;
}
const std::vector<Connection*>& connections() { return g_conns; }

namespace detail {
std::atomic<int> g_servers{0};
}  // namespace detail
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
  return g_visible[static_cast<size_t>(client_ordinal)].local;
}

int device_server(CUdevice client_ordinal) {
  if (client_ordinal < 0 || static_cast<size_t>(client_ordinal) >= g_visible.size()) return -1;
  return g_visible[static_cast<size_t>(client_ordinal)].server;
}

CUdevice client_device(CUdevice server_ordinal, int server) {
  for (size_t i = 0; i < g_visible.size(); ++i)
    if (g_visible[i].local == server_ordinal && g_visible[i].server == server) return static_cast<CUdevice>(i);
  return -1;
}

int current_server() {
  CUcontext ctx = contexts::current();
  const int s = handle_server(handle_id(ctx));
  return s < 0 ? 0 : s;
}

// Device allocations by server, for calls that name only a pointer (several servers only).
namespace {
std::shared_mutex g_alloc_mu;
std::map<CUdeviceptr, std::pair<size_t, int>>& g_allocs = *new std::map<CUdeviceptr, std::pair<size_t, int>>();
}  // namespace

int note_allocation(CUdeviceptr base, size_t size, int server) {
  if (!several_servers() || !base) return -1;
  std::unique_lock lock(g_alloc_mu);
  // Another server's allocation in [base, base + size): the next one at or after base, or the
  // last one before it if it reaches past base.
  const size_t n = std::max<size_t>(size, 1);
  auto it = g_allocs.lower_bound(base);
  if (it != g_allocs.end() && it->first - base < n && it->second.second != server) return it->second.second;
  if (it != g_allocs.begin()) {
    auto before = std::prev(it);
    if (base - before->first < std::max<size_t>(before->second.first, 1) && before->second.second != server)
      return before->second.second;
  }
  g_allocs[base] = {size, server};
  return -1;
}

void forget_allocation(CUdeviceptr base) {
  if (!several_servers()) return;
  std::unique_lock lock(g_alloc_mu);
  g_allocs.erase(base);
}

CUresult keep_allocation(const char* what, CUdeviceptr* dptr, size_t size, int server,
                         const std::function<void(CUdeviceptr)>& release) {
  if (!several_servers() || !dptr || !*dptr) return CUDA_SUCCESS;
  const int other = note_allocation(*dptr, size, server);
  if (other < 0) return CUDA_SUCCESS;
  Connection* a = connection(server);
  Connection* b = connection(other);
  log::error("%s: %s gave memory at %#llx, where %s's memory also is (each server is its own process, and their "
             "device addresses can coincide); rgpu could not tell the two apart, so it refuses the allocation "
             "(returning CUDA_ERROR_NOT_SUPPORTED): use one server per program, or servers whose device addresses "
             "differ",
             what, a ? a->server_name().c_str() : "?", static_cast<unsigned long long>(*dptr),
             b ? b->server_name().c_str() : "?");
  release(*dptr);  // on its own server: the pointer alone would route to the other's memory
  *dptr = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

int server_of(const void* handle) {
  if (!several_servers()) return 0;
  const int s = handle_server(reinterpret_cast<uint64_t>(handle));
  return s >= 0 ? s : current_server();
}

int pointer_server(CUdeviceptr p) {
  std::shared_lock lock(g_alloc_mu);
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin()) return -1;
  --it;
  return p - it->first < std::max<size_t>(it->second.first, 1) ? it->second.second : -1;
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
