// rgpu-smi: what the rgpu-server named by RGPU_SERVER serves, seen through rgpu's NVML shim
// (libnvidia-ml.so.1, client/nvml/) with the same connection settings as every rgpu client
// (RGPU_SERVER, RGPU_TOKEN): the server's address, its GPUs (name, UUID, memory, utilization,
// temperature) and, where the server can tell, its sessions: each with its client, uptime, and
// (from a server that counts them, protocol/session_table.h) GPU memory, calls and calls per
// second. `rgpu-smi sessions [--json]` lists the sessions alone, --json as one JSON object.
//
// `rgpu-smi -L` lists the GPUs one a line as `nvidia-smi -L` does (the client images install it as
// `nvidia-smi`, deploy/README.md), for scripts and habits that expect NVIDIA's tool.
//
// `rgpu-smi suspend|resume SESSION` and `rgpu-smi migrate SESSION --gpu N` act on one of those
// sessions (SESSION is the pid the list shows): the server runs the driver's checkpoint API on
// that session's process (server/session_control.cpp), and the session's client sees a pause.
#include <nvml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/version.h"

// From rgpu's libnvidia-ml.so.1 (client/nvml/runtime.cpp).
extern "C" long rgpu_nvml_sessions(char* buf, size_t len);
extern "C" int rgpu_nvml_session_control(int action, unsigned pid, int gpu, char* msg, size_t len, int* state);

namespace {

void print_gpu(unsigned int i) {
  nvmlDevice_t d;
  if (nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(i, &d); rc != NVML_SUCCESS) {
    std::printf("GPU %u: %s\n", i, nvmlErrorString(rc));
    return;
  }
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "?";
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "?";
  nvmlDeviceGetName(d, name, sizeof name);
  nvmlDeviceGetUUID(d, uuid, sizeof uuid);
  std::printf("GPU %u: %s (%s)\n", i, name, uuid);
  nvmlMemory_t m;
  if (nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS)
    std::printf("  memory:      %llu MiB used / %llu MiB total\n", m.used >> 20, m.total >> 20);
  else
    std::printf("  memory:      N/A\n");
  nvmlUtilization_t u;
  if (nvmlDeviceGetUtilizationRates(d, &u) == NVML_SUCCESS)
    std::printf("  utilization: %u %% GPU, %u %% memory\n", u.gpu, u.memory);
  else
    std::printf("  utilization: N/A\n");
  unsigned int t;
  if (nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS)
    std::printf("  temperature: %u C\n", t);
  else
    std::printf("  temperature: N/A\n");
}

}  // namespace

constexpr const char* kUsage =
    "usage: rgpu-smi                          the GPUs and sessions of the rgpu-server named by RGPU_SERVER\n"
    "       rgpu-smi -L, --list-gpus          the GPUs one a line, as nvidia-smi -L prints them\n"
    "       rgpu-smi sessions [--json]        its sessions alone: client, GPU memory, uptime, calls and calls/s\n"
    "                                         (--json: one JSON object, {\"server\": ..., \"sessions\": [...]})\n"
    "       rgpu-smi suspend SESSION          moves the session's GPU memory into host memory and frees its GPU;\n"
    "                                         its calls wait (its program sees a pause)\n"
    "       rgpu-smi resume SESSION           brings a suspended session back onto its GPU\n"
    "       rgpu-smi migrate SESSION --gpu N  moves the session onto the server's GPU N (of the same kind)\n"
    "       rgpu-smi --version                rgpu's version\n"
    "SESSION is the pid the session list shows. The token, if the server wants one: RGPU_TOKEN.\n"
    "Suspend, resume and migrate need a driver with the checkpoint API (570 or newer) on the server.\n";

// rgpu-smi -L: `GPU 0: NAME (UUID: GPU-...)` for each GPU, nvidia-smi's format; 0 when listed, 1 when the
// server cannot be reached.
int list_gpus() {
  const std::string& server = rgpu::env::get().server;
  if (nvmlReturn_t rc = nvmlInit_v2(); rc != NVML_SUCCESS) {
    std::fprintf(stderr, "rgpu-smi: cannot use the GPUs of rgpu-server at %s: %s (the line above says why)\n",
                 server.c_str(), nvmlErrorString(rc));
    return 1;
  }
  unsigned int n = 0;
  if (nvmlReturn_t rc = nvmlDeviceGetCount_v2(&n); rc != NVML_SUCCESS) {
    std::fprintf(stderr, "rgpu-smi: cannot count the GPUs of rgpu-server at %s: %s\n", server.c_str(),
                 nvmlErrorString(rc));
    nvmlShutdown();
    return 1;
  }
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t d;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "?";
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "?";
    if (nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS) {
      nvmlDeviceGetName(d, name, sizeof name);
      nvmlDeviceGetUUID(d, uuid, sizeof uuid);
    }
    std::printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
  }
  nvmlShutdown();
  return 0;
}

// printf into a std::string.
template <typename... Args>
std::string printf_string(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// One of the server's live sessions, as rgpu_nvml_sessions lists it.
struct Session {
  std::string pid, identity, peer;
  long long start = 0;
  bool self = false;
  bool counted = false;  // the server counts its memory and calls (false: an older server, or a
                         // session an earlier server process left)
  unsigned long long gpu_bytes = 0, calls = 0;
  double calls_per_s = 0;
};

// The server's live sessions: one per client process (this one included, marked). False when the
// server cannot list them.
bool list_sessions(std::vector<Session>* out) {
  std::vector<char> buf(1 << 16);
  long need = rgpu_nvml_sessions(buf.data(), buf.size());
  if (need > static_cast<long>(buf.size())) {
    buf.resize(static_cast<size_t>(need));
    need = rgpu_nvml_sessions(buf.data(), buf.size());
  }
  if (need < 0) return false;
  std::istringstream lines(buf.data());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string start, self, gpu, calls, rate;
    Session s;
    std::getline(f, s.pid, '\t');
    std::getline(f, s.identity, '\t');
    std::getline(f, s.peer, '\t');
    std::getline(f, start, '\t');
    std::getline(f, self, '\t');
    std::getline(f, gpu, '\t');
    std::getline(f, calls, '\t');
    std::getline(f, rate, '\t');
    s.start = std::atoll(start.c_str());
    s.self = self == "1";
    s.counted = !gpu.empty() && gpu != "-";
    if (s.counted) {
      s.gpu_bytes = std::strtoull(gpu.c_str(), nullptr, 10);
      s.calls = std::strtoull(calls.c_str(), nullptr, 10);
      s.calls_per_s = static_cast<double>(std::strtoull(rate.c_str(), nullptr, 10)) / 1000.0;
    }
    out->push_back(s);
  }
  return true;
}

void print_sessions() {
  std::vector<Session> sessions;
  if (!list_sessions(&sessions)) {
    std::printf("sessions:    not reported (this rgpu-server cannot list its sessions; see its log)\n");
    return;
  }
  std::printf("sessions:    %zu\n", sessions.size());
  const time_t now = time(nullptr);
  for (const Session& s : sessions) {
    std::string counts = "  memory, calls: not counted by this server";
    if (s.counted)
      counts = printf_string("  %llu MiB GPU memory, %llu calls, %.1f calls/s", s.gpu_bytes >> 20, s.calls,
                               s.calls_per_s);
    std::printf("  pid %-7s %-40s from %-21s for %llds%s%s\n", s.pid.c_str(), s.identity.c_str(), s.peer.c_str(),
                static_cast<long long>(now - s.start), counts.c_str(), s.self ? "  (this rgpu-smi)" : "");
  }
}

// A JSON string: quotes, backslashes and control characters escaped.
std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// rgpu-smi sessions [--json]: the sessions alone, as lines or as one JSON object.
// NVML's init through the shim: false, having said why, when the server cannot be reached.
bool reach(const std::string& server) {
  nvmlReturn_t rc = nvmlInit_v2();
  if (rc == NVML_SUCCESS) return true;
  std::fprintf(stderr, "rgpu-smi: cannot reach rgpu-server at %s: %s (the line above says why)\n", server.c_str(),
               nvmlErrorString(rc));
  return false;
}

int sessions_command(int argc, char** argv) {
  bool json = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      std::fprintf(stderr, "rgpu-smi sessions: unexpected '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  const std::string& server = rgpu::env::get().server;
  if (!reach(server)) return 1;
  if (!json) {
    std::printf("rgpu-server: %s\n", server.c_str());
    print_sessions();
    nvmlShutdown();
    return 0;
  }
  std::vector<Session> sessions;
  const bool listed = list_sessions(&sessions);
  nvmlShutdown();
  if (!listed) {
    std::fprintf(stderr, "rgpu-smi: rgpu-server at %s cannot list its sessions; see its log\n", server.c_str());
    return 1;
  }
  const time_t now = time(nullptr);
  std::string out = "{\"server\": " + json_string(server) + ", \"sessions\": [";
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Session& s = sessions[i];
    out += i ? ", " : "";
    out += "{\"pid\": " + s.pid + ", \"client\": " + json_string(s.identity) + ", \"peer\": " + json_string(s.peer) +
           ", \"uptime_s\": " + std::to_string(now - s.start) + ", \"self\": " + (s.self ? "true" : "false");
    if (s.counted)
      out += printf_string(", \"gpu_memory_bytes\": %llu, \"calls\": %llu, \"calls_per_s\": %.3f", s.gpu_bytes,
                             s.calls, s.calls_per_s);
    else
      out += ", \"gpu_memory_bytes\": null, \"calls\": null, \"calls_per_s\": null";
    out += "}";
  }
  std::printf("%s]}\n", out.c_str());
  return 0;
}


// rgpu-smi suspend|resume|migrate: 0 when done, 1 when the server could not, 2 for bad usage.
int control(int argc, char** argv) {
  const std::string verb = argv[1];
  const int action = verb == "suspend" ? 1 : verb == "resume" ? 2 : 3;  // protocol/messages.h kSession*
  char* end = nullptr;
  long pid = argc > 2 ? std::strtol(argv[2], &end, 10) : 0;
  if (argc < 3 || !*argv[2] || *end || pid <= 0 || pid > 0x7fffffff) {
    std::fprintf(stderr, "rgpu-smi %s: give the session's pid, as `rgpu-smi` lists it\n%s", verb.c_str(), kUsage);
    return 2;
  }
  int gpu = -1;
  int i = 3;
  if (action == 3) {
    if (argc != 5 || std::strcmp(argv[3], "--gpu") != 0 || !*argv[4] || (std::strtol(argv[4], &end, 10), *end)) {
      std::fprintf(stderr, "rgpu-smi migrate: give the GPU to move to, as --gpu N\n%s", kUsage);
      return 2;
    }
    gpu = static_cast<int>(std::strtol(argv[4], nullptr, 10));
    i = 5;
  }
  if (argc > i) {
    std::fprintf(stderr, "rgpu-smi %s: unexpected '%s'\n%s", verb.c_str(), argv[i], kUsage);
    return 2;
  }
  const std::string& server = rgpu::env::get().server;
  if (!reach(server)) return 1;
  char msg[4097] = "";
  int state = 255;
  int rc = rgpu_nvml_session_control(action, static_cast<unsigned>(pid), gpu, msg, sizeof msg, &state);
  nvmlShutdown();
  if (rc != 0) {
    std::fprintf(stderr, "rgpu-smi %s: %s\n", verb.c_str(), msg);
    return 1;
  }
  std::printf("%s\n", msg);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--version")) {
    std::printf("rgpu-smi %s\n", RGPU_VERSION);
    return 0;
  }
  if (argc > 1) {
    const std::string verb = argv[1];
    if ((verb == "-L" || verb == "--list-gpus") && argc == 2) return list_gpus();
    if (verb == "suspend" || verb == "resume" || verb == "migrate") return control(argc, argv);
    if (verb == "sessions") return sessions_command(argc, argv);
    std::fprintf(stderr, "rgpu-smi: unknown command '%s'\n%s", argv[1], kUsage);
    return 2;
  }
  const std::string& server = rgpu::env::get().server;
  std::printf("rgpu-server: %s\n", server.c_str());
  if (nvmlReturn_t rc = nvmlInit_v2(); rc != NVML_SUCCESS) {
    std::fprintf(stderr, "rgpu-smi: cannot use the GPUs of rgpu-server at %s: %s (the line above says why)\n",
                 server.c_str(), nvmlErrorString(rc));
    return 1;
  }
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "?";
  int cuda = 0;
  nvmlSystemGetDriverVersion(driver, sizeof driver);
  nvmlSystemGetCudaDriverVersion_v2(&cuda);
  std::printf("driver:      %s (CUDA %d.%d)\n", driver, cuda / 1000, cuda % 1000 / 10);
  unsigned int n = 0;
  if (nvmlReturn_t rc = nvmlDeviceGetCount_v2(&n); rc != NVML_SUCCESS) {
    std::fprintf(stderr, "rgpu-smi: cannot count the server's GPUs: %s\n", nvmlErrorString(rc));
    return 1;
  }
  std::printf("GPUs:        %u\n", n);
  for (unsigned int i = 0; i < n; ++i) print_gpu(i);
  print_sessions();
  nvmlShutdown();
  return 0;
}
