// Implementation of protocol/accept_loop.h.
#include "protocol/accept_loop.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/net.h"

namespace rgpu::proto {

void run_accept_loop(int lfd, const AcceptLoop& loop) {
  // Reap session processes, and say so when one dies of a signal: its client was cut off.
  std::function<void(pid_t)> on_exit = loop.on_exit;
  std::thread([on_exit] {
    for (;;) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, 0);
      if (pid < 0) {
        if (errno == ECHILD) sleep(1);
        continue;
      }
      if (on_exit) on_exit(pid);
      if (WIFSIGNALED(st))
        log::error("session process %d died of signal %d (%s); its client was disconnected", static_cast<int>(pid),
                   WTERMSIG(st), strsignal(WTERMSIG(st)));
    }
  }).detach();
  signal(SIGPIPE, SIG_IGN);

  for (;;) {
    int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      log::error("accept failed: %s", std::strerror(errno));
      sleep(1);
      continue;
    }
    pid_t pid = fork();
    if (pid < 0) {
      log::error("cannot start a session process: %s", std::strerror(errno));
      close(fd);
      continue;
    }
    if (pid > 0) {
      close(fd);
      continue;
    }
    // The session's own process.
    close(lfd);
    std::string peer = net::peer_name(fd);
    log::set_prefix(log::format("%s[%d]", loop.name.c_str(), static_cast<int>(getpid())));
    net::set_nodelay(fd);
    net::set_recv_timeout(fd, 10);  // a client must finish the handshake promptly
    ServerHandshakeResult hs;
    std::string err;
    if (!server_handshake(fd, loop.token, &hs, &err)) {
      log::warn("connection from %s: %s", peer.c_str(), err.c_str());
      _exit(1);
    }
    net::set_recv_timeout(fd, 0);
    log::info("session for %s from %s started", hs.identity.c_str(), peer.c_str());
    _exit(loop.session(fd, peer, hs));
  }
}

}  // namespace rgpu::proto
