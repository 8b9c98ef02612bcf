// Every environment variable rgpu reads, in one table (kVariables in env.cpp), read in one place.
//
// The table is the source: each variable a user may set, the value used when it is unset, which
// component reads it and what it means. read_all() in env.cpp takes every value from the
// environment through it (a name missing from the table aborts there, and common_test
// EnvTable.EveryVariableReadIsInTheTable fails), the README's table of variables is generated from
// it (build/bin/rgpu-env-table --write README.md; ctest env_table_readme fails when they differ),
// and common_test EnvTable.NothingElseReadsTheEnvironment fails when code outside common/env.cpp
// calls getenv. Components that cannot link common/ read nothing themselves: the fake driver links
// this file alone (rgpu_env), the Python package reads only what the table lists for it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace rgpu::env {

// Who reads a variable (Variable::readers is a set of these).
enum Reader : unsigned {
  kClient = 1 << 0,    // the CUDA shim, libcuda.so.1 (client/)
  kNvml = 1 << 1,      // the NVML shim, libnvidia-ml.so.1 (client/nvml/; rgpu-smi, nvidia-smi)
  kServer = 1 << 2,    // rgpu-server (server/)
  kOpserver = 1 << 3,  // rgpu-opserver (opserver/)
  kFake = 1 << 4,      // the fake driver, libfakecuda.so (fakecuda/)
  kTorch = 1 << 5,     // the PyTorch device rgpu (python/rgpu/, its C++ in python/rgpu/csrc/)
};

struct Variable {
  const char* name;
  // The value read when the variable is unset or empty; "" for none.
  const char* fallback;
  // What the README's default column shows, when it is not `fallback` in backticks (a computed
  // default, or none); nullptr otherwise.
  const char* shown_default;
  unsigned readers;
  // Markdown, one line: what the variable does.
  const char* meaning;
};

// The table, in the order the README shows it.
std::span<const Variable> variables();
// The README's table (markdown, one row per variable, ending in a newline).
std::string readme_table();

struct Settings {
  std::string server;                       // RGPU_SERVER
  std::string opserver;                     // RGPU_OPSERVER
  std::string token;                        // RGPU_TOKEN
  std::string trace;                        // RGPU_TRACE
  std::string stats;                        // RGPU_STATS
  bool batch = true;                        // RGPU_BATCH
  std::string log;                          // RGPU_LOG
  int connect_timeout_s = 0;                // RGPU_CONNECT_TIMEOUT
  int heartbeat_s = 0;                      // RGPU_HEARTBEAT (protocol/channel.h)
  size_t replay_max_mb = 0;                 // RGPU_REPLAY_MAX_MB (protocol/channel.h)
  int reconnect_s = 0;                      // RGPU_RECONNECT; 0: the server's session grace
  size_t bulk_chunk = 0;                   // RGPU_BULK_CHUNK
  bool oneway_loads = true;                 // RGPU_ONEWAY_LOADS
  bool oneway_sync = true;                  // RGPU_ONEWAY_SYNC (client/device_work.h)
  bool alloc_ahead = true;                  // RGPU_ALLOC_AHEAD (client/device_memory.h)
  std::string answer_cache;                 // RGPU_ANSWER_CACHE (client/answer_store.h); "": default
  std::string nvrtc_cache;                  // RGPU_NVRTC_CACHE (client/dark_api/nvrtc_cache.cpp)
  bool cuda_cache_disable = false;          // CUDA_CACHE_DISABLE=1
  bool tools_stream = true;                 // RGPU_TOOLS_STREAM
  bool image_layouts = true;                // RGPU_IMAGE_LAYOUTS
  int progress = -1;                        // RGPU_PROGRESS: 1 on, 0 off, -1 when stderr is a terminal
  bool has_visible_devices = false;         // CUDA_VISIBLE_DEVICES is set (even if empty)
  std::string visible_devices;              // CUDA_VISIBLE_DEVICES
  std::string omp_wait_policy;              // OMP_WAIT_POLICY (opserver/main.cpp)
  bool has_omp_wait_policy = false;         // OMP_WAIT_POLICY is set
  std::string opserver_python;              // RGPU_OPSERVER_PYTHON (opserver/inductor.h); "": the build's
  std::string xdg_cache_home;               // XDG_CACHE_HOME (common/files.h, server/module_cache.h)
  std::string xdg_runtime_dir;              // XDG_RUNTIME_DIR (protocol/session_dir.h)
  std::string home;                         // HOME
  std::string xdg_state_home;               // XDG_STATE_HOME (protocol/tls.h: --tls auto's certificate)
  std::string tls_ca;                       // RGPU_TLS_CA (protocol/tls.h)
  std::string tls_fingerprint;              // RGPU_TLS_FINGERPRINT
  std::string tls_cert;                     // RGPU_TLS_CERT
  std::string tls_key;                      // RGPU_TLS_KEY
  int tls_threads = -1;                     // RGPU_TLS_THREADS (-1: the default, protocol/tls_records.h)
  std::string user;                         // USER: the identity a connection gives the server
  long long order_wait_ms = 0;              // RGPU_ORDER_WAIT_MS (server/session.cpp)
  int peer_copy_wait_s = 60;                // RGPU_PEER_COPY_WAIT_S (server/handlers/peer_copy.cpp)
  size_t host_cache_mb = 1024;              // RGPU_HOST_CACHE_MB (python/rgpu/csrc/runtime/host_cache.cpp)
  bool fake_noop_kernels = false;           // RGPU_FAKE_NOOP_KERNELS=1 (fakecuda/launch.cpp)
  int fake_load_delay_ms = 0;               // RGPU_FAKE_LOAD_DELAY_MS (fakecuda/module.cpp)
  int fake_dtoh_delay_ms = 0;               // RGPU_FAKE_DTOH_DELAY_MS (fakecuda/memory.cpp)
  int fake_devices = 1;                     // RGPU_FAKE_DEVICES (fakecuda/device.cpp)
  bool inline_calls = true;                 // RGPU_INLINE_CALLS (server/session.cpp): 0 off
  int spin = -1;                            // RGPU_SPIN (common/spin_policy.h): -1 auto, 0 never, 1 always
  int fake_address_slot = 0;                // RGPU_FAKE_ADDRESS_SLOT (fakecuda/memory.cpp)
};

// Reads the environment once; later calls return the same values.
const Settings& get();
// Re-reads the environment (tests).
void reload();
// The names read_all() looked up in its last read, in order (tests).
std::vector<std::string> names_read();

}  // namespace rgpu::env
