// Implementation of protocol/accept_loop.h.
#include "protocol/accept_loop.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/log.h"
#include "common/net.h"

namespace rgpu::proto {
namespace {

bool read_token(const std::string& path, std::string* token, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = "cannot read --token-file " + path + ": " + std::strerror(errno);
    return false;
  }
  std::getline(f, *token);
  while (!token->empty() && (token->back() == '\r' || token->back() == ' ')) token->pop_back();
  if (token->empty()) {
    *err = "--token-file " + path + " is empty; put the shared token on its first line";
    return false;
  }
  return true;
}

}  // namespace

bool prepare_listen(const ListenOptions& o, std::string* token, net::Address* addr) {
  if (o.log_level == "debug") log::set_level(log::kDebug);
  if (o.log_level == "warn") log::set_level(log::kWarn);
  if (o.log_level == "error") log::set_level(log::kError);
  std::string err;
  token->clear();
  if (!o.token_file.empty()) {
    if (!read_token(o.token_file, token, &err)) {
      log::error("%s", err.c_str());
      return false;
    }
  } else if (const char* t = getenv("RGPU_TOKEN"); t && *t) {
    *token = t;
  }
  if (!net::parse_address(o.listen, o.default_port, addr, &err)) {
    log::error("--listen: %s", err.c_str());
    return false;
  }
  if (!net::is_loopback(addr->host) && token->empty() && !o.insecure) {
    log::error(
        "refusing to listen on %s without a token: anyone who can reach it could run code on %s. "
        "Give --token-file (or RGPU_TOKEN), or --insecure if the network is trusted.",
        addr->str().c_str(), o.reach.c_str());
    return false;
  }
  return true;
}

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
      if (hs.said_nothing)
        log::info("connection from %s closed before the handshake (a port check)", peer.c_str());
      else
        log::warn("connection from %s: %s", peer.c_str(), err.c_str());
      _exit(1);
    }
    net::set_recv_timeout(fd, 0);
    log::info("session for %s from %s started", hs.identity.c_str(), peer.c_str());
    _exit(loop.session(fd, peer, hs));
  }
}

}  // namespace rgpu::proto
