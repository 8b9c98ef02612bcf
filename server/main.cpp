// rgpu-server: listens for rgpu clients and serves each in its own process, on the real CUDA
// driver or on the fake one. See `rgpu-server --help` and server/README.md.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "common/log.h"
#include "common/net.h"
#include "common/version.h"
#include "gen/driver_table.gen.h"
#include "protocol/accept_loop.h"
#include "protocol/handshake.h"
#include "protocol/server_options.h"
#include "protocol/session_dir.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/module_cache.h"
#include "server/nccl/nccl_server.h"
#include "server/nvml/nvml_server.h"
#include "server/prewarm.h"
#include "server/session.h"

namespace {

std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "rgpu-server: runs CUDA driver calls from rgpu clients on this machine's GPU.\n"
      "Clients point RGPU_SERVER at this server and load rgpu's libcuda.so.1.\n"
      "Stopping: SIGTERM or SIGINT (Ctrl-C) drains: new connections are refused, each client is told the server is\n"
      "shutting down and has --drain-timeout seconds to finish, sessions still running then are ended (their\n"
      "clients' next call fails, saying so), and the server exits 0; a second SIGTERM or SIGINT ends them at once.\n"
      "SIGHUP hands over: the server exits at once and its sessions keep running for the next rgpu-server started\n"
      "on the same port (and --runtime-dir), which hands them their clients when they reconnect (an upgrade).",
      "rgpu-server"};
  app.set_version_flag("--version", "rgpu-server " RGPU_VERSION, "print rgpu-server's version and exit");
  rgpu::proto::ServerOptions server;
  server.listen = {"info", "", "127.0.0.1:9713", 9713, false, "this GPU"};
  std::string driver = "libcuda.so.1";
  std::string nvml;
  std::string nccl;
  std::string prewarm = "context";
  std::string metrics_listen;
  std::string cache_dir = rgpu::server::module_cache::default_dir();
  uint64_t cache_max_mb = 4096;
  // Memory limits (server/limits.h), in MiB; 0: none. Host memory defaults to a share of the RAM.
  const uint64_t ram_mb = rgpu::server::limits::machine_ram() >> 20;
  uint64_t memory_limit_mb = 0, tenant_memory_limit_mb = 0;
  uint64_t host_memory_limit_mb = ram_mb / 2, session_host_memory_limit_mb = ram_mb / 4;
  rgpu::proto::add_server_options(app, &server, "GPU state");
  app.add_option("--driver", driver,
                 "path of the CUDA driver library to serve (default: the system's libcuda.so.1), or 'fake' for "
                 "rgpu's fake driver (tests, machines without a GPU)");
  app.add_option("--nvml", nvml,
                 "path of the NVML library that answers clients' NVML calls (default: the system's libnvidia-ml.so.1, "
                 "or rgpu's fake NVML with --driver fake)");
  app.add_option("--nccl", nccl,
                 "path of the NCCL library that runs clients' NCCL calls (rgpu's libnccl.so.2 forwards them here; "
                 "default: libnccl.so.2 as the dynamic loader finds it, else the NVIDIA pip package's in the system's "
                 "Python; with --driver fake, rgpu's fake NCCL)");
  app.add_option("--cache-dir", cache_dir,
                 "directory of the persistent module-image cache, shared by the sessions of a tenant (each tenant's "
                 "images are apart, in tenant-NAME/): clients send a module's bytes only when it is not there (default $XDG_CACHE_HOME/rgpu or ~/.cache/rgpu/modules; 'none' "
                 "turns the cache off)");
  app.add_option("--cache-max-mb", cache_max_mb,
                 "largest total size of the module cache in MiB (all tenants); past it the least recently used images "
                 "are removed (default 4096)");
  app.add_option("--memory-limit-mb", memory_limit_mb,
                 "most GPU memory one session may allocate, in MiB (cuMemAlloc*, pools, cuMemCreate, managed; default "
                 "0: no limit); past it the call fails with CUDA_ERROR_OUT_OF_MEMORY and the server logs the limit");
  app.add_option("--tenant-memory-limit-mb", tenant_memory_limit_mb,
                 "most GPU memory all sessions of one tenant (--token-file) may allocate together, in MiB (default 0: "
                 "no limit)");
  app.add_option("--host-memory-limit-mb", host_memory_limit_mb,
                 "most host memory all sessions together may hold for mapped and managed buffers' copies, in MiB "
                 "(default half this machine's RAM, " + std::to_string(ram_mb / 2) + "; 0: no limit)");
  app.add_option("--session-host-memory-limit-mb", session_host_memory_limit_mb,
                 "the same for one session, in MiB (default a quarter of the RAM, " + std::to_string(ram_mb / 4) +
                     "; 0: no limit)");
  app.add_option("--prewarm", prewarm,
                 "what a spare session process does before its client arrives: 'context' (the driver's init and GPU "
                 "0's context, held for the client: 0.2 to 0.3 s off each client's start-up on an H200, at the cost of one idle context "
                 "on GPU 0), 'init' (the driver's and NVML's init only) or 'none' (default context)")
      ->check(CLI::IsMember({"none", "init", "context"}));
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST[:PORT] (port default 9714) to serve Prometheus metrics on, at /metrics (names rgpu_*: "
                 "sessions, calls and round trips by op, bytes, GPU memory per session, failed handshakes, "
                 "module-cache hits), and /healthz (200 with the driver's state while the server can serve, 503 "
                 "otherwise); plain HTTP with no authentication, so keep it on loopback or a trusted network "
                 "(e.g. 127.0.0.1:9714; default: off)");
  CLI11_PARSE(app, argc, argv);

  rgpu::log::set_prefix("rgpu-server");
  std::string err;
  static std::vector<rgpu::proto::Tenant> tenants;
  rgpu::net::Address addr;
  static std::shared_ptr<rgpu::proto::TlsContext> tls;
  if (!rgpu::proto::prepare_listen(server.listen, &tenants, &addr, &tls))
    return 2;

  if (cache_dir == "none") cache_dir.clear();
  if (!rgpu::server::module_cache::configure(cache_dir, cache_max_mb << 20, &err)) {
    rgpu::log::warn("%s; running without a module cache (give --cache-dir DIR, or --cache-dir none)", err.c_str());
  }

  std::string driver_path = driver == "fake" ? exe_dir() + "/../lib/libfakecuda.so" : driver;
  if (nvml.empty()) nvml = driver == "fake" ? exe_dir() + "/../lib/libfakenvml.so" : "libnvidia-ml.so.1";
  rgpu::server::nvml::set_library(nvml);  // opened by each session at its first NVML call
  if (nccl.empty() && driver == "fake") nccl = exe_dir() + "/../lib/libfakenccl.so";
  rgpu::server::nccl::set_library(nccl);  // opened by each session at its first NCCL call
  void* lib = dlopen(driver_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    rgpu::log::error("cannot load the CUDA driver '%s': %s. Give the real driver with --driver PATH, or --driver fake",
                     driver_path.c_str(), dlerror());
    return 2;
  }
  if (dlsym(lib, "rgpu_shim_marker")) {
    rgpu::log::error("'%s' is rgpu's own client shim, not a CUDA driver (is LD_LIBRARY_PATH pointing at rgpu's lib/?). "
                     "Give the real driver with --driver PATH",
                     driver_path.c_str());
    return 2;
  }
  static rgpu::server::DriverTable table;
  static rgpu::server::prewarm::Level prewarm_level;
  rgpu::server::prewarm::parse_level(prewarm, &prewarm_level);
  int found = rgpu::server::load_driver_table(lib, &table);
  auto& limits = rgpu::server::limits::settings();
  limits.gpu.per_session = memory_limit_mb << 20;
  limits.gpu.per_tenant = tenant_memory_limit_mb << 20;
  limits.host.per_session = session_host_memory_limit_mb << 20;
  limits.host.total = host_memory_limit_mb << 20;
  rgpu::server::limits::install(&table);

  static int metrics_fd = -1;
  if (!metrics_listen.empty()) {
    metrics_fd = rgpu::server::metrics::bind(metrics_listen, &err);
    if (metrics_fd < 0) {
      rgpu::log::error("--metrics-listen %s: %s; is something else listening there?", metrics_listen.c_str(),
                       err.c_str());
      return 2;
    }
  }
  int lfd = rgpu::net::listen_tcp(addr, &err);
  if (lfd < 0) {
    rgpu::log::error("%s; is another rgpu-server already running there?", err.c_str());
    return 2;
  }
  // Live sessions listen in a directory per port for their clients to come back
  // (protocol/session_dir.h), and are listed as files in its list/ (rgpu-smi shows them); a
  // server restarted on the same port finds both.
  static std::string door_dir, sessions_dir;
  door_dir = rgpu::proto::server_session_dir(server.runtime_dir, addr.port);
  if (!door_dir.empty()) {
    sessions_dir = door_dir + "/list";
    if (mkdir(sessions_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      rgpu::log::warn("cannot make %s (%s); rgpu-smi will not list sessions", sessions_dir.c_str(), std::strerror(errno));
      sessions_dir.clear();
    }
  }
  static unsigned grace = server.session_grace;
  rgpu::log::info("listening on %s, driver %s (%d entry points)%s, module cache %s, prewarm %s", addr.str().c_str(),
                  driver_path.c_str(), found,
                  tls ? (tenants.empty() ? ", TLS, no token" : ", TLS, token required")
                      : (tenants.empty() ? ", no token" : ", token required"),
                  rgpu::server::module_cache::enabled() ? cache_dir.c_str() : "off", prewarm.c_str());

  rgpu::proto::AcceptLoop loop;
  loop.name = "rgpu-server";
  rgpu::proto::apply_server_options(server, tenants, &loop);
  loop.tenant_known = [](const std::string& tenant) { rgpu::server::module_cache::set_tenant(tenant); };
  loop.on_exit = [](pid_t pid) { rgpu::server::unregister_session(sessions_dir, static_cast<int>(pid)); };
  loop.prepare = [] { rgpu::server::prewarm::start(&table, prewarm_level); };
  loop.capabilities = rgpu::proto::kOurCapabilities | rgpu::proto::kCapPushedSnapshot | rgpu::proto::kCapChannel;
  if (metrics_fd >= 0) {
    loop.in_listener = [] { rgpu::server::metrics::start(metrics_fd); };
    loop.listener_only_fds.push_back(metrics_fd);
    loop.stopped_accepting = rgpu::server::metrics::stopped_accepting;
  }
  loop.session_dir = door_dir;
  loop.sessions_list = sessions_dir;
  loop.drain.timeout = std::chrono::seconds(server.drain_timeout);
  loop.tls = tls;
  loop.welcomed = [](rgpu::proto::Transport& t, uint64_t agreed) {
    return !(agreed & rgpu::proto::kCapPushedSnapshot) || rgpu::server::push_snapshot(t, table);
  };
  loop.session = [](int fd, const std::string& peer, const rgpu::proto::ServerHandshakeResult& hs) {
    rgpu::server::prewarm::session_started();
    rgpu::server::SessionOptions opt{&table, peer, hs.identity, sessions_dir};
    opt.channel = (hs.capabilities & rgpu::proto::kCapChannel) != 0;
    opt.session = hs.session;
    opt.token = rgpu::proto::proved_token(tenants, hs);
    opt.tenant = hs.tenant;
    opt.grace = std::chrono::seconds(grace);
    opt.door_dir = door_dir;
    opt.transport = hs.transport;
    opt.tls = tls;
    return rgpu::server::run_session(fd, opt);
  };
  rgpu::proto::run_accept_loop(lfd, loop);
}
