// rgpu-doctor: checks, from the client machine, what a CUDA program needs to run through rgpu, in
// the order a program meets them, and says what to fix: that libcuda.so.1 resolves to rgpu's shim
// (library path or LD_PRELOAD), that the server in RGPU_SERVER answers (tls:// too), that the token
// and TLS settings are accepted, the protocol versions of both sides, the round-trip time and the
// bandwidth measured now (small calls, a 64 MiB copy each way), the GPU the server shows, and, when
// a python with torch is around, that torch's CUDA build is no newer than the server's driver.
// Each line says "ok: ..." or "problem: ... fix: ..."; the exit status is 1 when any problem was
// found, 0 otherwise.
//
// The checks of the server (reach, token, TLS, versions) run here with rgpu's protocol library, not
// through the shim, so that each failure is told apart; the rest run through the shim itself
// (dlopen'ed as a program would load it), so they measure what a program gets.
#include <cuda.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/version.h"
#include "protocol/client_session.h"
#include "protocol/messages.h"
#include "protocol/tls.h"

namespace {

using Clock = std::chrono::steady_clock;

int g_problems = 0;

void ok(const std::string& what) { std::printf("ok: %s\n", what.c_str()); }
void problem(const std::string& what, const std::string& fix) {
  ++g_problems;
  std::printf("problem: %s fix: %s\n", what.c_str(), fix.c_str());
}

std::string lib_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "rgpu's lib/ folder";
  std::string exe(buf, static_cast<size_t>(n));
  std::string dir = exe.substr(0, exe.rfind('/')) + "/../lib";
  char real[PATH_MAX];
  return realpath(dir.c_str(), real) ? std::string(real) : dir;
}

// The driver entry points the checks call through the shim.
struct Shim {
  void* handle = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree_v2)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH_v2)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;

  template <typename F>
  bool find(F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(handle, name));
    return *f != nullptr;
  }
  bool bind() {
    return find(&cuInit, "cuInit") && find(&cuDriverGetVersion, "cuDriverGetVersion") &&
           find(&cuDeviceGetCount, "cuDeviceGetCount") && find(&cuDeviceGet, "cuDeviceGet") &&
           find(&cuDeviceGetName, "cuDeviceGetName") && find(&cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2") &&
           find(&cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") && find(&cuCtxSetCurrent, "cuCtxSetCurrent") &&
           find(&cuCtxSynchronize, "cuCtxSynchronize") && find(&cuMemAlloc_v2, "cuMemAlloc_v2") &&
           find(&cuMemFree_v2, "cuMemFree_v2") && find(&cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2") &&
           find(&cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2") && find(&cuGetErrorName, "cuGetErrorName");
  }
  std::string name(CUresult rc) const {
    const char* n = nullptr;
    if (cuGetErrorName && cuGetErrorName(rc, &n) == CUDA_SUCCESS && n) return n;
    return "error " + std::to_string(static_cast<int>(rc));
  }
};

// 1. libcuda.so.1, as a program's loader finds it, is rgpu's shim.
bool check_shim(Shim* shim) {
  const std::string fix_path = "put rgpu's lib folder first: export LD_LIBRARY_PATH=" + lib_dir() +
                               ":$LD_LIBRARY_PATH (or preload it: LD_PRELOAD=" + lib_dir() + "/libcuda.so.1)";
  shim->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!shim->handle) {
    problem(std::string("no libcuda.so.1 is found on the library path (") + dlerror() + ").", fix_path);
    return false;
  }
  Dl_info info{};
  void* init = dlsym(shim->handle, "cuInit");
  std::string path = init && dladdr(init, &info) && info.dli_fname ? info.dli_fname : "libcuda.so.1";
  char real[PATH_MAX];
  if (realpath(path.c_str(), real)) path = real;
  if (!dlsym(shim->handle, "rgpu_shim_marker")) {
    problem("libcuda.so.1 resolves to " + path + ", which is not rgpu's shim (NVIDIA's driver, or another): "
            "CUDA programs would use it and never reach rgpu-server.", fix_path);
    return false;
  }
  if (!shim->bind()) {
    problem("rgpu's shim at " + path + " lacks driver entry points this check calls (" + dlerror() + ").",
            "rebuild rgpu (scripts/setup.sh) so that the shim and rgpu-doctor come from one build");
    return false;
  }
  ok("libcuda.so.1 resolves to rgpu's shim (" + path + ")");
  return true;
}

// 2-4. The server answers; the token and TLS settings are accepted; the versions agree.
bool check_server() {
  const rgpu::env::Settings& env = rgpu::env::get();
  const std::string server = env.server.substr(0, env.server.find(','));
  rgpu::net::Address addr;
  bool tls = false;
  std::string err;
  if (!rgpu::proto::parse_server_address(server, 9713, &addr, &tls, &err)) {
    problem("RGPU_SERVER='" + env.server + "' is not an address: " + err + ".",
            "set RGPU_SERVER=HOST:PORT, or tls://HOST:PORT for a server started with --tls");
    return false;
  }
  // A plain TCP connection first: whether anything listens, apart from what the handshake says.
  int fd = rgpu::net::connect_tcp(addr, &err, 3000);
  if (fd < 0) {
    problem("nothing answers at " + addr.str() + " (RGPU_SERVER): " + err + ".",
            "start rgpu-server there (rgpu-server --listen " + addr.str() +
                "), or point RGPU_SERVER at the server (an SSH tunnel: rgpu-run --host USER@GPU-HOST)");
    return false;
  }
  close(fd);
  ok("rgpu-server at " + addr.str() + " accepts connections (RGPU_SERVER=" + env.server + ")");

  rgpu::proto::ClientSessionOptions o;
  if (tls) {
    o.tls = rgpu::proto::tls_client_context(rgpu::proto::TlsClientConfig::from_env(), &err);
    if (!o.tls) {
      problem("the TLS settings cannot be used: " + err + ".",
              "fix RGPU_TLS_CA / RGPU_TLS_FINGERPRINT (the fingerprint rgpu-server logs at start) / RGPU_TLS_CERT "
              "and RGPU_TLS_KEY");
      return false;
    }
  }
  o.address = addr;
  o.token = env.token;
  o.identity = rgpu::proto::client_identity("(rgpu-doctor)");
  o.connect_timeout = std::chrono::seconds(10);
  o.quiet = true;
  rgpu::proto::ClientSession session;
  if (!rgpu::proto::open_client_session(o, &session, &err)) {
    const bool about_token = err.find("token") != std::string::npos || err.find("proof") != std::string::npos;
    const bool about_tls = tls || err.find("TLS") != std::string::npos || err.find("tls") != std::string::npos;
    std::string fix = about_token
                          ? "set RGPU_TOKEN to a token of the server's --token-file (or the RGPU_TOKEN it was started "
                            "with); unset it for a server without a token"
                      : about_tls ? "dial a --tls server as tls://HOST:PORT and trust its certificate with "
                                    "RGPU_TLS_FINGERPRINT (logged by rgpu-server at start) or RGPU_TLS_CA; a plain "
                                    "server as HOST:PORT"
                                  : "see the server's log for why it refused this client";
    problem("the handshake with rgpu-server at " + addr.str() + " failed: " + err + ".", fix);
    return false;
  }
  ok(std::string(env.token.empty() ? "no token needed" : "the token (RGPU_TOKEN) is accepted") +
     (tls ? ", TLS 1.3 with a trusted certificate" : ", plain TCP (no TLS)"));
  // The handshake carries the protocol version: a server that speaks another refuses the Hello.
  ok(rgpu::log::format("versions: rgpu %s here, protocol %u on both sides (the server accepted this client's "
                       "Hello; capabilities agreed 0x%llx)",
                       RGPU_VERSION, static_cast<unsigned>(rgpu::proto::kProtocolVersion),
                       static_cast<unsigned long long>(session.handshake.capabilities)));
  rgpu::proto::send_goodbye(*session.channel, 1);
  return true;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// 5-6. Through the shim: the GPU, the round-trip time and the bandwidth. Returns the driver version
// the shim reports (0 when it could not tell).
int check_through_shim(const Shim& s) {
  CUresult rc = s.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    problem("cuInit through the shim failed with " + s.name(rc) + " (the lines above say why).",
            "fix what the shim's message says; RGPU_LOG=debug shows more");
    return 0;
  }
  int version = 0, count = 0;
  s.cuDriverGetVersion(&version);
  s.cuDeviceGetCount(&count);
  if (count == 0) {
    problem("the server shows no GPU (CUDA_VISIBLE_DEVICES hides them, or the server has none).",
            "unset CUDA_VISIBLE_DEVICES here, or check the server's GPUs (rgpu-smi)");
    return version;
  }
  CUdevice dev = 0;
  char name[256] = "?";
  size_t mem = 0;
  s.cuDeviceGet(&dev, 0);
  s.cuDeviceGetName(name, sizeof name, dev);
  s.cuDeviceTotalMem_v2(&mem, dev);
  ok(rgpu::log::format("GPU 0: %s, %zu MiB, driver CUDA %d.%d (%d GPU%s)", name, mem >> 20, version / 1000,
                       version % 1000 / 10, count, count == 1 ? "" : "s"));

  CUcontext ctx = nullptr;
  if ((rc = s.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (rc = s.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
    problem("making GPU 0's context failed with " + s.name(rc) + ".", "see the server's log");
    return version;
  }
  // Round trips: each cuCtxSynchronize waits for the server (RGPU_ONEWAY_SYNC=0, set by main).
  std::vector<double> rtt;
  for (int i = 0; i < 11; ++i) {
    auto t = Clock::now();
    if ((rc = s.cuCtxSynchronize()) != CUDA_SUCCESS) {
      problem("cuCtxSynchronize failed with " + s.name(rc) + ".", "see the server's log");
      return version;
    }
    if (i) rtt.push_back(ms_since(t));  // the first may still set things up
  }
  std::sort(rtt.begin(), rtt.end());
  ok(rgpu::log::format("round trip %.2f ms (median of %zu calls; fastest %.2f ms)", rtt[rtt.size() / 2], rtt.size(),
                       rtt.front()));

  constexpr size_t kBytes = 64u << 20;
  std::vector<unsigned char> host(kBytes);
  for (size_t i = 0; i < kBytes; i += 4096) host[i] = static_cast<unsigned char>(i >> 12);
  CUdeviceptr d = 0;
  if ((rc = s.cuMemAlloc_v2(&d, kBytes)) != CUDA_SUCCESS) {
    problem("allocating 64 MiB on GPU 0 failed with " + s.name(rc) + ".",
            "free GPU memory on the server, or raise its --memory-limit-mb");
    return version;
  }
  auto t = Clock::now();
  rc = s.cuMemcpyHtoD_v2(d, host.data(), kBytes);
  if (rc == CUDA_SUCCESS) rc = s.cuCtxSynchronize();
  const double up_ms = ms_since(t);
  t = Clock::now();
  if (rc == CUDA_SUCCESS) rc = s.cuMemcpyDtoH_v2(host.data(), d, kBytes);
  const double down_ms = ms_since(t);
  s.cuMemFree_v2(d);
  if (rc != CUDA_SUCCESS) {
    problem("a 64 MiB copy failed with " + s.name(rc) + ".", "see the server's log");
    return version;
  }
  ok(rgpu::log::format("bandwidth: %.0f MB/s to the GPU, %.0f MB/s from it (64 MiB each way)", kBytes / up_ms / 1e3,
                       kBytes / down_ms / 1e3));
  return version;
}

// Runs argv with stdout captured, at most `timeout`; the exit status, or -1 when it could not run
// or took too long.
int run_capture(const std::vector<std::string>& argv, std::chrono::seconds timeout, std::string* out) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    close(p[0]);
    close(p[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    return -1;
  }
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pf{p[0], POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    ssize_t n = read(p[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out->size() < 65536) out->append(buf, static_cast<size_t>(n));
  }
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// 7. torch's CUDA build against the driver the shim reports.
void check_torch(const std::string& python, int driver_version) {
  if (python == "none") return;
  std::string out;
  const int status = run_capture(
      {python, "-c", "import torch; print(torch.__version__); print(torch.version.cuda or 'none')"},
      std::chrono::seconds(120), &out);
  if (status != 0) {
    ok("no torch for " + python + " (its check is skipped)");
    return;
  }
  const std::string torch_version = out.substr(0, out.find('\n'));
  std::string cuda = out.substr(out.find('\n') + 1);
  cuda = cuda.substr(0, cuda.find('\n'));
  if (cuda == "none") {
    ok("torch " + torch_version + " (" + python + ") is a CPU-only build: it does not use the driver path; "
       "rgpu's PyTorch device (import rgpu) serves it");
    return;
  }
  int major = 0, minor = 0;
  if (std::sscanf(cuda.c_str(), "%d.%d", &major, &minor) != 2) {
    problem("torch " + torch_version + " reports CUDA '" + cuda + "', which is not a version.",
            "reinstall torch from an official CUDA build");
    return;
  }
  const int built = major * 1000 + minor * 10;
  const std::string driver = rgpu::log::format("%d.%d", driver_version / 1000, driver_version % 1000 / 10);
  if (driver_version == 0) {
    ok("torch " + torch_version + " is built for CUDA " + cuda + " (the driver's version is unknown: see above)");
  } else if (built > driver_version) {
    problem("torch " + torch_version + " is built for CUDA " + cuda + ", newer than the server's driver (CUDA " +
                driver + "): its kernels would fail to load.",
            "install a torch built for CUDA " + driver + " or older (pip's cuXYZ wheels), or update the GPU "
            "host's driver");
  } else {
    ok("torch " + torch_version + " is built for CUDA " + cuda + ", which the server's driver (CUDA " + driver +
       ") runs");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "rgpu-doctor: checks this machine's setup for running CUDA programs through rgpu, in order: the shim on the\n"
      "library path, the server in RGPU_SERVER, the token and TLS settings, the versions, the round-trip time and\n"
      "bandwidth now, the GPU, and torch's CUDA build. Each line is 'ok: ...' or 'problem: ... fix: ...'; the exit\n"
      "status is 1 when there is a problem.",
      "rgpu-doctor"};
  std::string python = "python3";
  app.add_option("--python", python,
                 "the python whose torch is checked against the server's driver (default python3; 'none' skips it)");
  app.set_version_flag("--version", "rgpu-doctor " RGPU_VERSION, "print rgpu-doctor's version and exit");
  CLI11_PARSE(app, argc, argv);
  rgpu::log::set_prefix("rgpu-doctor");
  rgpu::log::set_level(rgpu::log::kWarn);
  // Every cuCtxSynchronize a round trip, so that the round-trip time is measured (client/device_work.h).
  setenv("RGPU_ONEWAY_SYNC", "0", 1);

  Shim shim;
  const bool shim_ok = check_shim(&shim);
  const bool server_ok = check_server();
  int driver_version = 0;
  if (shim_ok && server_ok) driver_version = check_through_shim(shim);
  check_torch(python, driver_version);
  return g_problems ? 1 : 0;
}
