// Implementation of test_util.h (tests only).
#include "client/dark_api/test_util.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "client/runtime.h"
#include "common/env.h"
#include "common/net.h"
#include "protocol/handshake.h"
#include "server/session.h"

namespace rgpu::client::dark::testing {

bool connect_to_fake_server() {
  static const bool connected = [] {
    net::Address addr{"127.0.0.1", 0};
    std::string err;
    int lfd = net::listen_tcp(addr, &err);
    if (lfd < 0) return false;
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
    pid_t pid = fork();
    if (pid == 0) {
      int fd = accept(lfd, nullptr, nullptr);
      void* lib = dlopen(RGPU_FAKE_DRIVER, RTLD_NOW | RTLD_LOCAL);
      static server::DriverTable table;
      server::load_driver_table(lib, &table);
      proto::ServerHandshakeResult hs;
      if (!proto::server_handshake(fd, "", &hs, &err, proto::kOurCapabilities | proto::kCapChannel)) _exit(1);
      server::SessionOptions options{&table, "test", hs.identity};
      options.channel = (hs.capabilities & proto::kCapChannel) != 0;
      options.session = hs.session;
      _exit(server::run_session(fd, options));
    }
    close(lfd);
    static pid_t server_pid = pid;
    std::atexit([] { kill(server_pid, SIGTERM); });
    setenv("RGPU_SERVER", ("127.0.0.1:" + std::to_string(ntohs(sa.sin_port))).c_str(), 1);
    env::reload();
    return init(0) == CUDA_SUCCESS;
  }();
  return connected;
}

}  // namespace rgpu::client::dark::testing
