// rgpu-delay-proxy: puts a fixed round-trip delay (and optionally a bandwidth cap) between an
// rgpu client and rgpu-server on one machine, for benchmarks at 1 ms or 30 ms RTT where
// `tc netem` is not available. A thin main over delay_proxy.h; see bench/README.md.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include "common/log.h"
#include "common/version.h"
#include "tools/delay_proxy/delay_proxy.h"

namespace {

constexpr const char* kUsage =
    "usage: rgpu-delay-proxy --listen HOST:PORT --target HOST:PORT --delay-ms D "
    "[--bandwidth-mbps B]\n"
    "       rgpu-delay-proxy --version\n"
    "  Relays every connection to --listen on to --target. Each direction gains D/2 ms, so a\n"
    "  round trip gains D ms. --bandwidth-mbps caps each direction at B Mbit/s (1e6 bit/s).\n";

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "rgpu-delay-proxy: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

double parse_number(const char* flag, const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !(v >= 0) || v > 1e9)
    fail(std::string(flag) + " needs a non-negative number, got '" + s + "'");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rgpu;
  std::string listen_s, target_s;
  double delay_ms = -1, mbps = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("rgpu-delay-proxy %s\n", RGPU_VERSION);
      return 0;
    }
    if (i + 1 >= argc) fail(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--listen") listen_s = v;
    else if (a == "--target") target_s = v;
    else if (a == "--delay-ms") delay_ms = parse_number("--delay-ms", v);
    else if (a == "--bandwidth-mbps") mbps = parse_number("--bandwidth-mbps", v);
    else fail("unknown argument '" + a + "'");
  }
  if (listen_s.empty() || target_s.empty() || delay_ms < 0)
    fail("--listen, --target and --delay-ms are required");

  std::string err;
  net::Address listen_addr, target_addr;
  if (!net::parse_address(listen_s, 0, &listen_addr, &err) ||
      !net::parse_address(target_s, 0, &target_addr, &err))
    fail(err);
  if (listen_addr.port == 0 || target_addr.port == 0) fail("--listen and --target need a port");

  log::set_prefix("rgpu-delay-proxy[" + std::to_string(::getpid()) + "]");
  int fd = net::listen_tcp(listen_addr, &err);
  if (fd < 0) {
    log::error("%s (is another process using the port?)", err.c_str());
    return 1;
  }
  delay_proxy::Options options;
  options.target = target_addr;
  options.one_way_delay = std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000 / 2));
  options.bandwidth_bps = mbps * 1e6;
  delay_proxy::Proxy proxy(fd, options);
  std::string cap = mbps > 0 ? log::format(", cap %g Mbit/s per direction", mbps) : "";
  log::info("listening on %s, relaying to %s, +%g ms round trip%s", listen_addr.str().c_str(),
            target_addr.str().c_str(), delay_ms, cap.c_str());
  proxy.run();
  return 1;
}
