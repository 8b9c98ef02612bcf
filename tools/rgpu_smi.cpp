// rgpu-smi: what the rgpu-server named by RGPU_SERVER serves, seen through rgpu's NVML shim
// (libnvidia-ml.so.1, client/nvml/) with the same connection settings as every rgpu client
// (RGPU_SERVER, RGPU_TOKEN): the server's address, its GPUs (name, UUID, memory, utilization,
// temperature) and, where the server can tell, its sessions.
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

// The server's live sessions: one per client process (this one included, marked).
void print_sessions() {
  std::vector<char> buf(1 << 16);
  long need = rgpu_nvml_sessions(buf.data(), buf.size());
  if (need > static_cast<long>(buf.size())) {
    buf.resize(static_cast<size_t>(need));
    need = rgpu_nvml_sessions(buf.data(), buf.size());
  }
  if (need < 0) {
    std::printf("sessions:    not reported (this rgpu-server cannot list its sessions; see its log)\n");
    return;
  }
  std::istringstream lines(buf.data());
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  std::printf("sessions:    %zu\n", rows.size());
  time_t now = time(nullptr);
  for (const std::string& row : rows) {
    std::istringstream f(row);
    std::string pid, identity, peer, start, self;
    std::getline(f, pid, '\t');
    std::getline(f, identity, '\t');
    std::getline(f, peer, '\t');
    std::getline(f, start, '\t');
    std::getline(f, self, '\t');
    long long age = now - std::atoll(start.c_str());
    std::printf("  pid %-7s %-40s from %-21s for %llds%s\n", pid.c_str(), identity.c_str(), peer.c_str(), age,
                self == "1" ? "  (this rgpu-smi)" : "");
  }
}

constexpr const char* kUsage =
    "usage: rgpu-smi                          the GPUs and sessions of the rgpu-server named by RGPU_SERVER\n"
    "       rgpu-smi -L, --list-gpus          the GPUs one a line, as nvidia-smi -L prints them\n"
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
  if (nvmlReturn_t rc = nvmlInit_v2(); rc != NVML_SUCCESS) {
    std::fprintf(stderr, "rgpu-smi: cannot reach rgpu-server at %s: %s (the line above says why)\n", server.c_str(),
                 nvmlErrorString(rc));
    return 1;
  }
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
