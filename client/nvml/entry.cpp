// The NVML entry points written by hand (codegen/nvml_annotations.txt: local and wrap): init and
// shutdown (which connect first), error strings, and the undocumented export table. Everything
// else is generated (gen/nvml_client_stubs.gen.cpp).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "client/nvml/call.h"
#include "common/log.h"
#include "common/nvml_error_text.h"
#include "gen/nvml_client_forward.gen.h"

using namespace rgpu::client::nvml;

namespace {

// nvmlInternalGetExportTable: nvidia-smi asks for table c4fe3e6c-c98f-6c4e-a327-ee696e12f7c4
// (docs/reference/dark-api.md). Slot 0 holds the table's size in bytes, as in the driver's
// export tables; every other slot is NULL. Seen on the H200 machine (driver 580.159.04): with
// NULL slots nvidia-smi skips them, while slots that answer NVML_ERROR_NOT_SUPPORTED (it calls 81
// and 26) make it stop with "Internal NVML error". Any other table id gets the same table, with a
// log line naming the id. Pinned by tests/gpu/run.sh (nvidia-smi through rgpu).
constexpr size_t kExportSlots = 512;

const std::array<const void*, kExportSlots> kExportTable = [] {
  std::array<const void*, kExportSlots> t{};
  t[0] = reinterpret_cast<const void*>(kExportSlots * sizeof(void*));
  return t;
}();

constexpr unsigned char kSmiTableId[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};


// NVML counts nvmlInit calls and shuts down at the matching nvmlShutdown. The client keeps the
// count: only the first init and the last shutdown reach the server (PyTorch loads NVML and
// calls nvmlInit and nvmlDeviceGetCount_v2 five times at start-up, ten round trips before).
// The count and the device count belong to one connection; a new connection starts over.
struct InitState {
  std::mutex mu;
  uint64_t connection = 0;  // connection_number() they belong to
  int inits = 0;
  bool count_known = false;
  unsigned int count = 0;
};
InitState& state() {
  static auto* s = new InitState;  // never freed: NVML may be called during exit
  return *s;
}

nvmlReturn_t init_then(nvmlReturn_t (*forward)(unsigned int), unsigned int flags) {
  nvmlReturn_t rc = connect();
  if (rc != NVML_SUCCESS) return rc;
  InitState& s = state();
  std::lock_guard lk(s.mu);
  if (s.connection != connection_number()) {
    s.connection = connection_number();
    s.inits = 0;
    s.count_known = false;
  }
  if (s.inits > 0) {
    ++s.inits;
    return NVML_SUCCESS;
  }
  for (int server = 0; server < server_count() && rc == NVML_SUCCESS; ++server) {
    route_to(server);
    rc = forward(flags);
  }
  if (rc == NVML_SUCCESS) s.inits = 1;
  return rc;
}

// Several servers: each one's device count, asked once per connection, so that a joined index
// maps to (server, the server's index).
std::vector<unsigned int> g_counts;  // under state().mu

nvmlReturn_t server_counts(nvmlReturn_t (*forward)(unsigned int*), std::vector<unsigned int>* out) {
  std::vector<unsigned int> counts;
  for (int server = 0; server < server_count(); ++server) {
    unsigned int n = 0;
    route_to(server);
    if (nvmlReturn_t rc = forward(&n)) return rc;
    counts.push_back(n);
  }
  *out = counts;
  return NVML_SUCCESS;
}

// nvmlDeviceGetCount[_v2]: the server's answer, kept while NVML stays initialised.
nvmlReturn_t device_count(nvmlReturn_t (*forward)(unsigned int*), unsigned int* count) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  InitState& s = state();
  std::lock_guard lk(s.mu);
  const bool current = s.connection == connection_number() && s.inits > 0;
  if (current && s.count_known) {
    *count = s.count;
    return NVML_SUCCESS;
  }
  std::vector<unsigned int> counts;
  nvmlReturn_t rc = server_counts(forward, &counts);
  if (rc != NVML_SUCCESS) return rc;
  *count = 0;
  for (unsigned int n : counts) *count += n;
  if (current) {
    s.count = *count;
    s.count_known = true;
    g_counts = counts;
  }
  return rc;
}

// A joined index's server and that server's index; false for an index past every server's GPUs.
bool split_index(unsigned int index, int* server, unsigned int* local) {
  InitState& s = state();
  std::lock_guard lk(s.mu);
  if (g_counts.size() != static_cast<size_t>(server_count()) || s.connection != connection_number()) {
    std::vector<unsigned int> counts;
    if (server_counts(rgpu_nvml_fwd_nvmlDeviceGetCount_v2, &counts) != NVML_SUCCESS) return false;
    g_counts = counts;
    s.connection = connection_number();
  }
  for (size_t i = 0; i < g_counts.size(); ++i) {
    if (index < g_counts[i]) {
      *server = static_cast<int>(i);
      *local = index;
      return true;
    }
    index -= g_counts[i];
  }
  return false;
}

// The joined index of server `server`'s first GPU.
unsigned int first_index(int server) {
  InitState& s = state();
  std::lock_guard lk(s.mu);
  unsigned int first = 0;
  for (int i = 0; i < server && static_cast<size_t>(i) < g_counts.size(); ++i) first += g_counts[i];
  return first;
}

nvmlReturn_t handle_by_index(nvmlReturn_t (*forward)(unsigned int, nvmlDevice_t*), unsigned int index,
                             nvmlDevice_t* device) {
  if (server_count() == 1) return forward(index, device);
  int server = 0;
  unsigned int local = 0;
  if (!split_index(index, &server, &local)) return NVML_ERROR_INVALID_ARGUMENT;
  route_to(server);
  return forward(local, device);
}

// By UUID or PCI bus id: the first server that has the GPU.
template <class Forward>
nvmlReturn_t handle_by_name(Forward forward, const char* name, nvmlDevice_t* device) {
  nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
  for (int server = 0; server < server_count(); ++server) {
    route_to(server);
    rc = forward(name, device);
    if (rc != NVML_ERROR_NOT_FOUND) return rc;
  }
  return rc;
}

nvmlReturn_t fwd_init(unsigned int) { return rgpu_nvml_fwd_nvmlInit(); }
nvmlReturn_t fwd_init_v2(unsigned int) { return rgpu_nvml_fwd_nvmlInit_v2(); }
nvmlReturn_t fwd_init_flags(unsigned int flags) { return rgpu_nvml_fwd_nvmlInitWithFlags(flags); }

}  // namespace

extern "C" {

RGPU_NVML_API int rgpu_nvml_shim_marker = 1;

RGPU_NVML_API nvmlReturn_t nvmlInit(void) { return init_then(fwd_init, 0); }
RGPU_NVML_API nvmlReturn_t nvmlInit_v2(void) { return init_then(fwd_init_v2, 0); }
RGPU_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return init_then(fwd_init_flags, flags); }

RGPU_NVML_API nvmlReturn_t nvmlShutdown(void) {
  if (!connected()) return NVML_ERROR_UNINITIALIZED;
  InitState& s = state();
  std::lock_guard lk(s.mu);
  if (s.connection == connection_number() && s.inits > 1) {
    --s.inits;
    return NVML_SUCCESS;
  }
  // The last one (or one the server must refuse). The connection stays open: a later nvmlInit
  // reuses it.
  nvmlReturn_t rc = NVML_SUCCESS;
  for (int server = 0; server < server_count() && rc == NVML_SUCCESS; ++server) {
    route_to(server);
    rc = rgpu_nvml_fwd_nvmlShutdown();
  }
  if (rc == NVML_SUCCESS && s.connection == connection_number()) {
    s.inits = 0;
    s.count_known = false;
  }
  return rc;
}

RGPU_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return device_count(rgpu_nvml_fwd_nvmlDeviceGetCount, count);
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return device_count(rgpu_nvml_fwd_nvmlDeviceGetCount_v2, count);
}

RGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(rgpu_nvml_fwd_nvmlDeviceGetHandleByIndex, index, device);
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(rgpu_nvml_fwd_nvmlDeviceGetHandleByIndex_v2, index, device);
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return handle_by_name(rgpu_nvml_fwd_nvmlDeviceGetHandleByUUID, uuid, device);
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus, nvmlDevice_t* device) {
  return handle_by_name(rgpu_nvml_fwd_nvmlDeviceGetHandleByPciBusId, bus, device);
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  return handle_by_name(rgpu_nvml_fwd_nvmlDeviceGetHandleByPciBusId_v2, bus, device);
}
// The index in the joined list: the server's own, after the GPUs of the servers before it.
RGPU_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  nvmlReturn_t rc = rgpu_nvml_fwd_nvmlDeviceGetIndex(device, index);
  if (rc == NVML_SUCCESS && index && last_server() > 0) *index += first_index(last_server());
  return rc;
}

RGPU_NVML_API const char* nvmlErrorString(nvmlReturn_t result) { return rgpu::nvml_error_text(result); }

// Not in nvml.h: (const void **table, const unsigned char uuid[16]).
RGPU_NVML_API nvmlReturn_t nvmlInternalGetExportTable(const void** table, const void* id) {
  if (!table || !id) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::memcmp(id, kSmiTableId, sizeof kSmiTableId) != 0) {
    const auto* b = static_cast<const unsigned char*>(id);
    char hex[33];
    for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", b[i]);
    rgpu::log::warn("nvmlInternalGetExportTable: unknown table %s; answering with a table of stubs", hex);
  }
  *table = kExportTable.data();
  return NVML_SUCCESS;
}

// Event sets are answered on the client: a set that never reports an event. nvidia-smi creates one
// at start and stops with "Internal NVML error" when it cannot; forwarding events would need the
// server to push them, which nothing asks for yet.
RGPU_NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  if (!connected()) return NVML_ERROR_UNINITIALIZED;
  *set = reinterpret_cast<nvmlEventSet_t>(new char(0));
  return NVML_SUCCESS;
}
RGPU_NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  delete reinterpret_cast<char*>(set);
  return NVML_SUCCESS;
}
RGPU_NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long, nvmlEventSet_t set) {
  if (!device || !set) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}
RGPU_NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t*, unsigned int timeoutms) {
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeoutms, 10000u)));
  return NVML_ERROR_TIMEOUT;
}
RGPU_NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return nvmlEventSetWait_v2(set, data, timeoutms);
}

}  // extern "C"
