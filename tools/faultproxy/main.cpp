// rgpu-faultproxy: relays TCP between --listen and --target and breaks each connection the way
// it is told (cut, reset, stall, black hole, half close) after N bytes or N ms, for tests of what
// rgpu does when the network fails. A thin main over faultproxy.h.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/version.h"
#include "tools/faultproxy/faultproxy.h"

namespace {

constexpr const char* kUsage =
    "usage: rgpu-faultproxy --listen HOST:PORT --target HOST:PORT --fault KIND\n"
    "                       [--after-bytes N [--after-bytes-max M --seed S]] [--after-ms N]\n"
    "                       [--on-signal] [--connections N] [--max-connections N]\n"
    "       rgpu-faultproxy --version\n"
    "  Relays every connection to --listen on to --target, then breaks it:\n"
    "    cut         closes both sockets (the peers see the stream end)\n"
    "    reset       closes both with RST (the peers see ECONNRESET)\n"
    "    stall       stops reading and forwarding both ways, sockets left open\n"
    "    blackhole   reads everything and forwards nothing, sockets left open\n"
    "    half-close  ends the target-to-client direction; client-to-target goes on\n"
    "    none        just relays\n"
    "  The fault strikes after N bytes from the client (--after-bytes) or N ms after the\n"
    "  connection was accepted (--after-ms), whichever comes first, or on SIGUSR1 to the proxy\n"
    "  (--on-signal: every faulty connection open then); with none of them, at once.\n"
    "  --after-bytes-max M: each connection breaks at a random point from N to M bytes (seeded\n"
    "  by --seed, default 1: the same seed breaks at the same points).\n"
    "  --connections N: only the first N connections are broken (default: all), so that a\n"
    "  reconnect goes through.\n"
    "  --max-connections N: connections past the Nth are closed at once (a server gone for good).\n";

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "rgpu-faultproxy: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

long long number(const std::string& flag, const char* s) {
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0) fail(flag + " needs a non-negative whole number, got '" + s + "'");
  return v;
}

rgpu::faultproxy::Proxy* g_proxy = nullptr;

void on_sigusr1(int) {
  if (g_proxy) g_proxy->strike_now();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rgpu;
  std::string listen_s, target_s, fault_s = "none";
  faultproxy::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("rgpu-faultproxy %s\n", RGPU_VERSION);
      return 0;
    }
    if (a == "--on-signal") {
      o.on_request = true;
      continue;
    }
    if (i + 1 >= argc) fail(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--listen") listen_s = v;
    else if (a == "--target") target_s = v;
    else if (a == "--fault") fault_s = v;
    else if (a == "--after-bytes") o.after_bytes = static_cast<uint64_t>(number(a, v));
    else if (a == "--after-bytes-max") o.after_bytes_max = static_cast<uint64_t>(number(a, v));
    else if (a == "--seed") o.seed = static_cast<uint64_t>(number(a, v));
    else if (a == "--after-ms") o.after_ms = std::chrono::milliseconds(number(a, v));
    else if (a == "--max-connections") o.max_connections = static_cast<int>(number(a, v));
    else if (a == "--connections") o.faulty_connections = static_cast<int>(number(a, v));
    else fail("unknown argument '" + a + "'");
  }
  if (listen_s.empty() || target_s.empty()) fail("--listen and --target are required");
  if (!faultproxy::parse_fault(fault_s, &o.fault)) fail("unknown --fault '" + fault_s + "'");
  std::string err;
  net::Address listen_addr;
  if (!net::parse_address(listen_s, 0, &listen_addr, &err) || !net::parse_address(target_s, 0, &o.target, &err))
    fail(err);
  int fd = net::listen_tcp(listen_addr, &err);
  if (fd < 0) fail(err);
  faultproxy::Proxy proxy(fd, o);
  g_proxy = &proxy;
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  std::fprintf(stderr, "rgpu-faultproxy: %s -> %s, fault %s\n", listen_addr.str().c_str(), o.target.str().c_str(),
               faultproxy::fault_name(o.fault));
  proxy.run();
  return 0;
}
