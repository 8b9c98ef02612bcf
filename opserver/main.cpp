// rgpu-opserver: serves the rgpu PyTorch device (docs/design.md §5). Listens like rgpu-server
// (loopback by default, a token or --insecure for anything else), and serves each client in its
// own process, so one client's crash or CUDA fault cannot reach another's tensors.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/version.h"
#include "opserver/session.h"
#include "protocol/accept_loop.h"
#include "protocol/handshake.h"
#include "protocol/server_options.h"

#ifndef RGPU_TORCH_LIB_DIR
#define RGPU_TORCH_LIB_DIR ""
#endif

namespace {

// libtorch_cuda registers the CUDA device when it loads; nothing in this program names one of its
// symbols, so the linker may have dropped it. Load it by name.
bool load_torch_cuda(std::string* err) {
  for (std::string name : {std::string("libtorch_cuda.so"), std::string(RGPU_TORCH_LIB_DIR) + "/libtorch_cuda.so"}) {
    if (dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL)) return true;
    *err = dlerror();
  }
  return false;
}

// On --device cpu, torch's OpenMP threads spin for a while after each parallel region (libgomp's
// default wait policy), waiting for the next one. A cpu opserver usually shares its machine with
// its client (tests, benchmarks, a workstation), and the spinning took the client's core: on the
// 2-core CI machine, generation with a KV cache ran at 0.5x local with the spin and at 0.9-1.1x
// with idle threads asleep (bench/torch_gen_bench.py). libgomp reads the policy once, when it
// loads, so it is set by running this program again with it. A policy the user set is kept.
void exec_with_passive_omp_threads(char** argv) {
  if (rgpu::env::get().has_omp_wait_policy) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // If the exec failed, run as is: only slower.
}

}  // namespace

namespace rgpu::opserver {
void install_reusing_cpu_allocator();  // cpu_allocator.cpp
}

int main(int argc, char** argv) {
  CLI::App app{
      "rgpu-opserver: runs the ATen operators of rgpu PyTorch clients (device=\"rgpu\") on this machine.\n"
      "Clients set RGPU_OPSERVER=host:port and `import rgpu`.\n"
      "Stopping: SIGTERM or SIGINT (Ctrl-C) drains: new connections are refused, the sessions get --drain-timeout\n"
      "seconds to finish, sessions still running then are ended, and the server exits 0; a second SIGTERM or\n"
      "SIGINT ends them at once. SIGHUP: the server exits at once and leaves its sessions running.",
      "rgpu-opserver"};
  app.set_version_flag("--version", "rgpu-opserver " RGPU_VERSION, "print rgpu-opserver's version and exit");
  rgpu::proto::ServerOptions server;
  server.listen = {"info", "", "127.0.0.1:9720", 9720, false, "this machine"};
  std::string device = "cuda";
  std::string pretend_version;
  double max_storage_gb = 1024;
  int devices = 0;
  bool no_cpu_reuse = false;
  std::string compile = rgpu::opserver::inductor_built() ? "inductor" : "none";
  rgpu::proto::add_server_options(app, &server, "tensors");
  app.add_option("--device", device, "where ops run: cuda (default) or cpu (tests, machines without a GPU)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--devices", devices,
                 "how many devices clients see (rgpu:0 .. rgpu:N-1): on cuda the first N GPUs (default: all of "
                 "them), on cpu N names for the one CPU (default 1; tests of several devices)")
      ->check(CLI::Range(1, rgpu::torchwire::kMaxDevices));
  app.add_flag("--no-cpu-buffer-reuse", no_cpu_reuse,
               "--device cpu: allocate every buffer from malloc, as a local run does (default: freed buffers of 64 KiB "
               "and more are kept for reuse, cpu_allocator.cpp)");
  app.add_option("--compile", compile,
                 "how compiled graphs (torch.compile(backend=\"rgpu\")) run: inductor (the default where this program "
                 "embeds Python: Inductor compiles each graph at its first run, opserver/inductor.h) or none (op by op)")
      ->check(CLI::IsMember({"inductor", "none"}));
  app.add_option("--max-storage-gb", max_storage_gb, "largest single tensor storage a client may allocate, in GiB (default 1024)");
  app.add_option("--pretend-torch-version", pretend_version, "report this torch version in the hello (tests of the version check)")
      ->group("");
  CLI11_PARSE(app, argc, argv);
  if (device == "cpu") exec_with_passive_omp_threads(argv);

  rgpu::log::set_prefix("rgpu-opserver");
  std::string err;
  std::vector<rgpu::proto::Tenant> tenants;
  rgpu::net::Address addr;
  std::shared_ptr<rgpu::proto::TlsContext> tls;
  if (!rgpu::proto::prepare_listen(server.listen, &tenants, &addr, &tls))
    return 2;

  rgpu::opserver::SessionOptions opt;
  opt.torch_version = pretend_version;
  opt.max_storage_bytes = static_cast<uint64_t>(max_storage_gb * (1ull << 30));
  if (compile == "inductor" && !rgpu::opserver::inductor_built()) {
    rgpu::log::error("--compile inductor: this rgpu-opserver was built without Python (%s); use --compile none, or "
                     "rebuild with -DRGPU_TORCH_PYTHON= a python that has a shared libpython",
                     rgpu::opserver::inductor_missing_reason());
    return 2;
  }
  opt.inductor = compile == "inductor";
  opt.python = rgpu::env::get().opserver_python.empty() ? rgpu::opserver::inductor_default_python()
                                                         : rgpu::env::get().opserver_python;
  if (device == "cuda") {
    if (!load_torch_cuda(&err)) {
      rgpu::log::error("--device cuda: cannot load libtorch_cuda.so (%s); is this libtorch built with CUDA? "
                       "Use --device cpu on a machine without a GPU",
                       err.c_str());
      return 2;
    }
    // Checked in a child process, so the listening parent never initialises CUDA (children fork
    // from it, and CUDA does not survive a fork).
    // The child's exit status is the number of GPUs torch sees.
    pid_t pid = fork();
    if (pid == 0)
      _exit(std::min<int>(c10::impl::getDeviceGuardImpl(c10::kCUDA)->deviceCount(), rgpu::torchwire::kMaxDevices));
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) == 0) {
      rgpu::log::error("--device cuda: torch sees no CUDA device here; use --device cpu, or check the driver (nvidia-smi)");
      return 2;
    }
    int gpus = WEXITSTATUS(st);
    if (devices > gpus) {
      rgpu::log::error("--devices %d: torch sees %d GPU%s here", devices, gpus, gpus == 1 ? "" : "s");
      return 2;
    }
    opt.device = c10::Device(c10::kCUDA, 0);
    opt.device_count = devices ? devices : gpus;
  } else {
    opt.device_count = devices ? devices : 1;
    if (!no_cpu_reuse) rgpu::opserver::install_reusing_cpu_allocator();
  }

  int lfd = rgpu::net::listen_tcp(addr, &err);
  if (lfd < 0) {
    rgpu::log::error("%s; is another rgpu-opserver already running there?", err.c_str());
    return 2;
  }
  const char* omp_wait = rgpu::env::get().has_omp_wait_policy ? rgpu::env::get().omp_wait_policy.c_str() : nullptr;
  std::string graphs = opt.inductor ? "compiled graphs by Inductor (python " + opt.python + ")"
                       : rgpu::opserver::inductor_built()
                           ? "compiled graphs op by op (--compile none)"
                           : std::string("compiled graphs op by op (built without Python: ") +
                                 rgpu::opserver::inductor_missing_reason() + ")";
  rgpu::log::info("listening on %s, torch %s on %s (%d device%s)%s, %s%s%s", addr.str().c_str(),
                  rgpu::opserver::torch_version().c_str(), device.c_str(), opt.device_count,
                  opt.device_count == 1 ? "" : "s", tls ? (tenants.empty() ? ", TLS, no token" : ", TLS, token required")
                      : (tenants.empty() ? ", no token" : ", token required"),
                  graphs.c_str(),
                  device == "cpu" && omp_wait ? ", OMP_WAIT_POLICY=" : "", device == "cpu" && omp_wait ? omp_wait : "");

  // Live sessions listen in a directory per port for their clients to come back
  // (protocol/session_dir.h); an opserver restarted on the same port finds them.
  const std::string door_dir = rgpu::proto::server_session_dir(server.runtime_dir, addr.port);
  rgpu::proto::AcceptLoop loop;
  loop.name = "rgpu-opserver";
  rgpu::proto::apply_server_options(server, tenants, &loop);
  loop.drain.timeout = std::chrono::seconds(server.drain_timeout);
  loop.capabilities = rgpu::proto::kOurCapabilities | rgpu::proto::kCapChannel;
  loop.session_dir = door_dir;
  loop.tls = tls;
  loop.session = [&opt, &tenants, &door_dir, &tls, grace = server.session_grace](int fd, const std::string&,
                                                          const rgpu::proto::ServerHandshakeResult& hs) {
    if (!(hs.capabilities & rgpu::proto::kCapChannel)) {
      rgpu::log::warn("client %s does not speak the channel (an older rgpu release); closing", hs.identity.c_str());
      return 1;
    }
    rgpu::proto::ServerChannelSetup channel;
    channel.session = hs.session;
    channel.token = rgpu::proto::proved_token(tenants, hs);
    channel.grace = std::chrono::seconds(grace);
    channel.door_dir = door_dir;
    channel.identity = hs.identity;
    channel.transport = hs.transport;
    channel.tls = tls;
    int status = rgpu::opserver::serve(fd, opt, channel);
    rgpu::log::info("session for %s ended", hs.identity.c_str());
    return status;
  };
  rgpu::proto::run_accept_loop(lfd, loop);
}
