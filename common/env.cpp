// Implementation of common/env.h: the table of variables, and the one place that reads them.
#include "common/env.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rgpu::env {
namespace {

constexpr unsigned kShims = kClient | kNvml;

// The source of the README's table (rgpu-env-table --write README.md). Keep the meanings to one
// line each; say where the longer story is.
constexpr Variable kVariables[] = {
    {"RGPU_SERVER", "127.0.0.1:9713", nullptr, kShims,
     "`host:port` of rgpu-server, `tls://host:port` for one started with TLS (`--tls`); a "
     "comma-separated list (`a:9713,b:9713`) joins several servers' GPUs into one device list, in "
     "its order"},
    {"RGPU_TOKEN", "", "none", kShims | kServer | kOpserver | kTorch,
     "the shared token; it never crosses the wire (HMAC-SHA256 challenge and response); the servers "
     "take it when given no `--token-file`"},
    {"RGPU_TRACE", "0", nullptr, kShims,
     "`0` off, `1` stdout, `2` stderr, anything else a file: one line per driver or NVML call, and a "
     "failed call's result by name"},
    {"RGPU_BATCH", "1", nullptr, kClient, "`0`: every call waits for its reply (debugging)"},
    {"RGPU_STATS", "", "none", kClient,
     "a file path: round trips, one-way calls, bytes and per-call waits, as JSON at exit"},
    {"RGPU_OPSERVER", "127.0.0.1:9720", nullptr, kTorch,
     "`host:port` of rgpu-opserver for the PyTorch device, `tls://host:port` for one started with TLS"},
    {"RGPU_TLS_CA", "", "the system's CA store", kShims | kTorch,
     "PEM file of the CA certificates a `tls://` server's certificate must verify against (its name "
     "must match the host dialled)"},
    {"RGPU_TLS_FINGERPRINT", "", "none", kShims | kTorch,
     "`sha256:HEX`: trust the `tls://` server whose certificate has this fingerprint (rgpu-server "
     "prints its own at start), instead of a CA"},
    {"RGPU_TLS_CERT", "", "none", kShims | kTorch,
     "PEM client certificate for a server started with `--tls-client-ca` (with `RGPU_TLS_KEY`)"},
    {"RGPU_TLS_KEY", "", "none", kShims | kTorch, "PEM private key of `RGPU_TLS_CERT`"},
    {"RGPU_TLS_THREADS", "", "a quarter of the cores, at most 4", kShims | kServer | kOpserver | kTorch,
     "threads that encrypt and decrypt a `tls://` connection's bulk data beside its own "
     "(protocol/tls_records.h); `0`: none"},
    {"CUDA_VISIBLE_DEVICES", "", "all", kClient,
     "which of the server's GPUs the program sees, as with a local driver: indices or UUIDs "
     "(`GPU-...`), up to the first entry that names none"},
    {"RGPU_LOG", "info", nullptr, kClient,
     "`error`, `warn`, `info`, `debug`: what the shim logs to stderr (the servers take `--log`)"},
    {"RGPU_PROGRESS", "", "unset: on when stderr is a terminal", kClient,
     "`1`: say on stderr how far transfers are (kernel-image uploads, large copies) once they have taken "
     "2 s (on a terminal one line updated in place, else a line every 5 s), `0`: never (`client/progress.h`)"},
    {"RGPU_CONNECT_TIMEOUT", "60", nullptr, kShims | kTorch,
     "seconds to keep trying to connect (attempts with backoff, handshake included) before giving up"},
    {"RGPU_HEARTBEAT", "5", nullptr, kShims | kTorch | kServer | kOpserver,
     "seconds of silence after which a side waiting for its peer sends a heartbeat; 3 unanswered mean "
     "the connection is broken (`protocol/channel.h`)"},
    {"RGPU_REPLAY_MAX_MB", "256", nullptr, kShims | kTorch | kServer | kOpserver,
     "MiB of sent frames kept until the peer acknowledges them, to resend after a reconnect; a writer "
     "past it waits for acknowledgements"},
    {"RGPU_RECONNECT", "", "the server's session grace", kShims | kTorch,
     "seconds to keep reconnecting after the connection breaks before the session is given up"},
    {"RGPU_BULK_CHUNK", "1048576", "`1048576` (1 MiB)", kClient,
     "bytes per bulk-copy frame, 64 KiB to 32 MiB (a tuning knob for benchmarks)"},
    {"RGPU_ONEWAY_SYNC", "1", nullptr, kClient,
     "`0`: every synchronize waits for the server (by default one that follows only copies into "
     "memory the program allocated does not; `client/device_work.h`)"},
    {"RGPU_ALLOC_AHEAD", "1", nullptr, kClient,
     "`0`: every `cuMemAlloc` asks the server (by default a few more of a size asked before are "
     "allocated ahead, at most 256 MiB in all; `client/device_memory.h`)"},
    {"RGPU_ANSWER_CACHE", "", "`~/.cache/rgpu/answers.txt`", kClient,
     "the file of answers about kernels kept across runs (attributes, occupancy), `none` for none "
     "(`client/answer_store.h`)"},
    {"RGPU_NVRTC_CACHE", "", "`~/.cache/rgpu/nvrtc`", kClient,
     "the directory where NVRTC's compiles are kept across runs, as the driver's compute cache keeps "
     "them locally, `none` for none (`client/dark_api/nvrtc_cache.cpp`)"},
    {"CUDA_CACHE_DISABLE", "", "unset", kClient,
     "`1`: no NVRTC compile cache either, as with the driver's own"},
    {"RGPU_ONEWAY_LOADS", "1", nullptr, kClient,
     "`0`: every module load waits for the server's answer (by default loads of cubins for the GPU "
     "do not, nor PTX that compiled on this GPU and driver in an earlier run)"},
    {"RGPU_TOOLS_STREAM", "1", nullptr, kClient,
     "`0`: answer the driver's TOOLS_CONTEXT slot 51 for the NULL stream whatever stream it names "
     "(diagnostic, `client/dark_api/README.md`)"},
    {"RGPU_IMAGE_LAYOUTS", "1", nullptr, kClient,
     "`0`: ask the server for kernel parameter layouts instead of reading them from the images "
     "(debugging launches)"},
    {"RGPU_HOST_CACHE_MB", "1024", nullptr, kTorch,
     "MiB of freed `.cpu()` results the PyTorch device keeps for the next `.cpu()` of their size "
     "(fresh memory is zeroed by the kernel as it is first touched; `torch.rgpu.empty_cache()` "
     "frees them), `0` for none"},
    {"RGPU_PEER_COPY_WAIT_S", "60", nullptr, kServer,
     "how long a server waits for a copy from another server (`RGPU_SERVER=a,b`) that the source "
     "server has not named on a live link, before failing it"},
    {"RGPU_ORDER_WAIT_MS", "10000", nullptr, kServer,
     "how long a call waits for another client thread's earlier one-way call still running in the "
     "driver before it runs anyway"},
    {"RGPU_INLINE_CALLS", "1", nullptr, kServer,
     "`0`: rgpu-server hands every call to the thread that runs its client thread's calls; by "
     "default the thread that reads the connection runs a short synchronous query (cuMemGetInfo, "
     "attribute queries) itself when that thread is idle, a thread hand-off less per call"},
    {"RGPU_SPIN", "auto", nullptr, kClient | kServer,
     "how a thread waiting for its peer (the client for a reply, the server for the next call) "
     "waits: `auto` spins up to 50 µs first where the machine has CPUs to spare and spinning "
     "pays (common/spin_policy.h), `1` always spins first, `0` never"},
    {"RGPU_FAKE_NOOP_KERNELS", "0", nullptr, kFake,
     "`1`: kernels the fake driver has no host code for run and do nothing, instead of failing "
     "with NOT_SUPPORTED, so unmodified programs (PyTorch training) run on `--driver fake`; their "
     "numbers are garbage"},
    {"RGPU_FAKE_LOAD_DELAY_MS", "0", nullptr, kFake,
     "milliseconds each module load takes on the fake driver, as a real driver's take (tests)"},
    {"RGPU_FAKE_DTOH_DELAY_MS", "0", nullptr, kFake,
     "milliseconds each synchronous device-to-host copy (`cuMemcpyDtoH`) takes on the fake driver "
     "(tests that act while a copy between servers is under way)"},
    {"RGPU_FAKE_DEVICES", "1", nullptr, kFake,
     "how many GPUs the fake driver (and its NVML) has, 1 to 8, all H200-shaped with UUIDs and PCI "
     "buses of their own, each other's peers (tests of several GPUs, `rgpu-smi migrate`)"},
    {"RGPU_FAKE_ADDRESS_SLOT", "0", nullptr, kFake,
     "0 to 7: which eighth of the fake driver's device address window its allocations start in, "
     "and the 15th byte of its GPUs' UUIDs, so that two fake servers under one client "
     "(`RGPU_SERVER=a,b`) hand out different addresses and UUIDs, as two GPU hosts do"},
    {"OMP_WAIT_POLICY", "", "unset: `PASSIVE` for `--device cpu`", kOpserver,
     "how idle OpenMP threads wait; `rgpu-opserver --device cpu` runs itself again with `PASSIVE` "
     "unless it is set, so that its threads sleep instead of spinning on the client's core"},
    {"RGPU_OPSERVER_PYTHON", "", "unset: the `RGPU_TORCH_PYTHON` of the build", kOpserver,
     "the python whose environment (venv, site-packages) the Inductor inside `rgpu-opserver` runs "
     "in (`--compile inductor`); its torch must be the one the program links"},
    {"XDG_CACHE_HOME", "", "unset", kClient | kServer,
     "the on-disk caches live in `$XDG_CACHE_HOME/rgpu/` (the server's module cache is that "
     "directory itself)"},
    {"XDG_RUNTIME_DIR", "", "unset", kServer,
     "rgpu-server keeps its live sessions' sockets (how a reconnecting client finds its session, also "
     "after a restart) in `$XDG_RUNTIME_DIR/rgpu/PORT/`; unset: `/run/rgpu/PORT/`, else "
     "`/tmp/rgpu-UID/PORT/` (`--runtime-dir` overrides)"},
    {"XDG_STATE_HOME", "", "unset", kServer | kOpserver,
     "`--tls auto` keeps its certificate in `$XDG_STATE_HOME/rgpu/`; unset: `$HOME/.local/state/rgpu/`, "
     "else `/var/lib/rgpu/` (`--state-dir` overrides)"},
    {"HOME", "", "unset", kClient | kServer | kOpserver,
     "without `XDG_CACHE_HOME` the caches live in `$HOME/.cache/rgpu/` (the server's in `modules/` "
     "there); with neither, none is kept"},
    {"USER", "", "unset: the account's name", kShims | kTorch,
     "the user name a connection gives the server for its logs (with host, pid and program)"},
    {"RGPU_BUILD_DIR", "", "`build/` of the source tree", kTorch,
     "the CMake build the Python package takes `librgpu_torch.so`, the shims and `rgpu-opserver` "
     "from (`python/rgpu/__init__.py`)"},
    {"RGPU_PREBUILT", "", "unset: the package compiles its backend", kTorch,
     "building the wheel (`scripts/build_wheels.sh`, `python/setup.py`): a CMake build directory whose "
     "programs, shims and PyTorch backend the wheel packages as they are, instead of compiling them"},
};

// Leaked on purpose: read by calls made from exit handlers, after static destructors.
Settings& g_settings = *new Settings();
std::vector<std::string>& g_names_read = *new std::vector<std::string>();
std::once_flag g_once;

const Variable& variable(const char* name) {
  for (const Variable& v : kVariables)
    if (std::strcmp(v.name, name) == 0) return v;
  // A programming error: every variable is in the table (common_test EnvTable.* catch this).
  std::fprintf(stderr, "rgpu: %s is read but missing from the table in common/env.cpp\n", name);
  std::abort();
}

// The variable's value; its table fallback when unset or empty.
std::string str(const char* name) {
  const Variable& var = variable(name);
  g_names_read.push_back(name);
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(var.fallback);
}

bool is_set(const char* name) { return std::getenv(name) != nullptr; }

// A positive number: the variable's, else (unset, not a number, not positive) the table's fallback.
long long positive(const char* name) {
  long long v = std::atoll(str(name).c_str());
  return v > 0 ? v : std::atoll(variable(name).fallback);
}

void read_all() {
  g_names_read.clear();
  Settings s;
  s.server = str("RGPU_SERVER");
  s.opserver = str("RGPU_OPSERVER");
  s.token = str("RGPU_TOKEN");
  s.trace = str("RGPU_TRACE");
  s.stats = str("RGPU_STATS");
  s.batch = str("RGPU_BATCH") != "0";
  s.log = str("RGPU_LOG");
  s.connect_timeout_s = static_cast<int>(std::min(positive("RGPU_CONNECT_TIMEOUT"), 1ll << 30));
  s.heartbeat_s = static_cast<int>(std::min(positive("RGPU_HEARTBEAT"), 1ll << 20));
  s.replay_max_mb = static_cast<size_t>(std::min(positive("RGPU_REPLAY_MAX_MB"), 1ll << 20));
  s.reconnect_s = static_cast<int>(std::clamp(std::atoll(str("RGPU_RECONNECT").c_str()), 0ll, 1ll << 30));
  s.bulk_chunk = static_cast<size_t>(std::clamp(positive("RGPU_BULK_CHUNK"), 64ll << 10, 32ll << 20));
  s.oneway_loads = str("RGPU_ONEWAY_LOADS") != "0";
  s.oneway_sync = str("RGPU_ONEWAY_SYNC") != "0";
  s.alloc_ahead = str("RGPU_ALLOC_AHEAD") != "0";
  s.answer_cache = str("RGPU_ANSWER_CACHE");
  s.nvrtc_cache = str("RGPU_NVRTC_CACHE");
  s.cuda_cache_disable = str("CUDA_CACHE_DISABLE") == "1";
  s.tools_stream = str("RGPU_TOOLS_STREAM") != "0";
  s.image_layouts = str("RGPU_IMAGE_LAYOUTS") != "0";
  const std::string progress = str("RGPU_PROGRESS");
  s.progress = progress == "1" ? 1 : progress == "0" ? 0 : -1;
  // Set but empty means "no devices", as with the driver.
  s.visible_devices = str("CUDA_VISIBLE_DEVICES");
  s.has_visible_devices = is_set("CUDA_VISIBLE_DEVICES");
  s.omp_wait_policy = str("OMP_WAIT_POLICY");
  s.has_omp_wait_policy = is_set("OMP_WAIT_POLICY");
  s.opserver_python = str("RGPU_OPSERVER_PYTHON");
  s.xdg_cache_home = str("XDG_CACHE_HOME");
  s.xdg_runtime_dir = str("XDG_RUNTIME_DIR");
  s.home = str("HOME");
  s.xdg_state_home = str("XDG_STATE_HOME");
  s.tls_ca = str("RGPU_TLS_CA");
  s.tls_fingerprint = str("RGPU_TLS_FINGERPRINT");
  s.tls_cert = str("RGPU_TLS_CERT");
  s.tls_key = str("RGPU_TLS_KEY");
  const std::string tls_threads = str("RGPU_TLS_THREADS");
  s.tls_threads = tls_threads.empty() ? -1 : std::clamp(std::atoi(tls_threads.c_str()), 0, 64);
  s.user = str("USER");
  s.order_wait_ms = positive("RGPU_ORDER_WAIT_MS");
  s.peer_copy_wait_s = static_cast<int>(std::min(positive("RGPU_PEER_COPY_WAIT_S"), 1ll << 20));
  s.host_cache_mb = static_cast<size_t>(std::clamp(std::atoll(str("RGPU_HOST_CACHE_MB").c_str()), 0ll, 1ll << 30));
  s.fake_noop_kernels = str("RGPU_FAKE_NOOP_KERNELS") == "1";
  s.inline_calls = str("RGPU_INLINE_CALLS") != "0";
  s.spin = str("RGPU_SPIN") == "1" ? 1 : str("RGPU_SPIN") == "0" ? 0 : -1;
  s.fake_load_delay_ms = std::max(0, std::atoi(str("RGPU_FAKE_LOAD_DELAY_MS").c_str()));
  s.fake_dtoh_delay_ms = std::max(0, std::atoi(str("RGPU_FAKE_DTOH_DELAY_MS").c_str()));
  s.fake_devices = std::clamp(std::atoi(str("RGPU_FAKE_DEVICES").c_str()), 1, 8);
  s.fake_address_slot = std::clamp(std::atoi(str("RGPU_FAKE_ADDRESS_SLOT").c_str()), 0, 7);
  g_settings = s;
}

std::string readers_text(unsigned readers) {
  static const std::pair<unsigned, const char*> kNames[] = {
      {kClient, "client"},       {kNvml, "NVML shim"},  {kServer, "server"},
      {kOpserver, "opserver"},   {kFake, "fake driver"}, {kTorch, "torch device"}};
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if (!(readers & bit)) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

std::span<const Variable> variables() { return kVariables; }

std::string readme_table() {
  std::string out = "| variable | default | read by | meaning |\n|---|---|---|---|\n";
  for (const Variable& v : kVariables) {
    std::string def = v.shown_default ? v.shown_default : "`" + std::string(v.fallback) + "`";
    out += "| `" + std::string(v.name) + "` | " + def + " | " + readers_text(v.readers) + " | " + v.meaning + " |\n";
  }
  return out;
}

const Settings& get() {
  std::call_once(g_once, read_all);
  return g_settings;
}

void reload() {
  std::call_once(g_once, [] {});
  read_all();
}

std::vector<std::string> names_read() {
  get();
  return g_names_read;
}

}  // namespace rgpu::env
