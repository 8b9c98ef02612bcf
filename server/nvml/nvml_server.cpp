// Implementation of server/nvml/nvml_server.h (all but the generated handlers).
#include "server/nvml/nvml_server.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "common/log.h"

namespace rgpu::server::nvml {
namespace {

std::string g_path = "libnvidia-ml.so.1";
std::once_flag g_once;
NvmlTable g_table;
const NvmlTable* g_loaded = nullptr;

struct Entry {
  void* ptr;
  const void* tag;
};
std::mutex g_handles_mu;
std::vector<Entry> g_handles;  // id - 1 -> handle
std::unordered_map<void*, uint64_t> g_ids;

// Init ahead (server/prewarm.h): NVML is initialised when loaded, and the client's first init
// takes that init over, so NVML's count of inits is the client's own.
bool g_init_ahead = false;
std::atomic<bool> g_init_held{false};
NvmlTable g_real;

nvmlReturn_t held_init() { return g_init_held.exchange(false) ? NVML_SUCCESS : g_real.nvmlInit(); }
nvmlReturn_t held_init_v2() { return g_init_held.exchange(false) ? NVML_SUCCESS : g_real.nvmlInit_v2(); }
nvmlReturn_t held_init_flags(unsigned int flags) {
  if (flags == 0 && g_init_held.exchange(false)) return NVML_SUCCESS;
  nvmlReturn_t rc = g_real.nvmlInitWithFlags(flags);
  // Other flags: the client's own init, and the one held for it is given back.
  if (rc == NVML_SUCCESS && g_init_held.exchange(false) && g_real.nvmlShutdown) g_real.nvmlShutdown();
  return rc;
}

void init_ahead() {
  if (!g_table.nvmlInit_v2 || !g_table.nvmlShutdown || g_table.nvmlInit_v2() != NVML_SUCCESS) return;
  g_real = g_table;
  g_init_held = true;
  g_table.nvmlInit_v2 = held_init_v2;
  if (g_table.nvmlInit) g_table.nvmlInit = held_init;
  if (g_table.nvmlInitWithFlags) g_table.nvmlInitWithFlags = held_init_flags;
}

void load() {
  void* lib = dlopen(g_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    log::error("cannot load NVML '%s': %s; NVML calls from clients fail with NVML_ERROR_LIBRARY_NOT_FOUND "
               "(give the library with rgpu-server --nvml PATH)",
               g_path.c_str(), dlerror());
    return;
  }
  if (dlsym(lib, "rgpu_nvml_shim_marker")) {
    log::error("'%s' is rgpu's own NVML shim, not NVIDIA's NVML (is LD_LIBRARY_PATH pointing at rgpu's lib/?); "
               "give the real one with rgpu-server --nvml PATH",
               g_path.c_str());
    return;
  }
  int found = load_nvml_table(lib, &g_table);
  if (g_init_ahead) init_ahead();
  log::info("NVML %s loaded (%d functions)%s", g_path.c_str(), found, g_init_held ? ", initialised ahead" : "");
  g_loaded = &g_table;
}

}  // namespace

void set_library(const std::string& path) { g_path = path; }
void set_init_ahead() { g_init_ahead = true; }

const NvmlTable* table() {
  std::call_once(g_once, load);
  return g_loaded;
}

nvmlReturn_t library_missing(const char* name) {
  if (!g_loaded) return NVML_ERROR_LIBRARY_NOT_FOUND;
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(name).second)
    log::warn("%s is not in NVML %s; answering NVML_ERROR_FUNCTION_NOT_FOUND", name, g_path.c_str());
  return NVML_ERROR_FUNCTION_NOT_FOUND;
}

uint64_t handle_to_id(const void* p, const void* tag) {
  if (!p) return 0;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  void* key = const_cast<void*>(p);
  auto it = g_ids.find(key);
  if (it != g_ids.end()) return it->second;
  g_handles.push_back({key, tag});
  uint64_t id = g_handles.size();
  g_ids.emplace(key, id);
  return id;
}

bool handle_from_id(uint64_t id, const void* tag, void** out) {
  if (id == 0) {
    *out = nullptr;
    return true;
  }
  std::lock_guard<std::mutex> lock(g_handles_mu);
  if (id > g_handles.size() || g_handles[id - 1].tag != tag) return false;
  *out = g_handles[id - 1].ptr;
  return true;
}

}  // namespace rgpu::server::nvml
