// Implementation of protocol/accept_loop.h.
#include "protocol/accept_loop.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/channel.h"
#include "protocol/session_dir.h"

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
  } else {
    *token = env::get().token;
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

namespace {

// Spare processes and the reaper tell the parent what happened through one pipe, a pid per
// message (4 bytes: atomic on a pipe): positive, that spare took a connection; negative, that
// process ended.
void tell(int fd, int32_t message) {
  while (write(fd, &message, sizeof message) < 0 && errno == EINTR) {
  }
}

// A client resuming its session: hands the connection to the session's process, which runs the
// resume proof (protocol/session_dir.h). Returns this process's exit status.
int route_resume(int fd, const std::string& peer, const std::vector<uint8_t>& payload, const AcceptLoop& loop) {
  ResumeHello hello;
  Reader r(payload.data(), payload.size());
  if (!decode(r, &hello)) {
    log::warn("connection from %s: a malformed resume request (%zu bytes)", peer.c_str(), payload.size());
    refuse(fd, "malformed resume request");
    return 1;
  }
  std::string why;
  if (loop.session_dir.empty()) {
    why = "this server keeps no sessions for resuming";
  } else if (hand_over(loop.session_dir, fd, hello, &why)) {
    log::info("connection from %s resumes session %s", peer.c_str(), session_hex(hello.session).c_str());
    return 0;
  }
  log::info("connection from %s asked to resume session %s: %s", peer.c_str(), session_hex(hello.session).c_str(),
            why.c_str());
  refuse(fd, "session lost: " + why);
  return 1;
}

// A spare's life: prepare, accept one connection, say so, then serve it as its session.
[[noreturn]] void run_spare(int lfd, int notify_fd, pid_t parent, const AcceptLoop& loop) {
  // Until it has a client, a spare ends with the parent (it would hold the port otherwise).
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(0);  // the parent ended before the line above

  log::set_prefix(log::format("%s[%d]", loop.name.c_str(), static_cast<int>(getpid())));
  if (loop.prepare) loop.prepare();
  int fd;
  for (;;) {
    fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) break;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    log::error("accept failed: %s", std::strerror(errno));
    sleep(1);
  }
  prctl(PR_SET_PDEATHSIG, 0);  // a session outlives a restart of the listening parent
  tell(notify_fd, static_cast<int32_t>(getpid()));
  close(notify_fd);
  close(lfd);
  std::string peer = net::peer_name(fd);
  net::set_nodelay(fd);
  net::set_recv_timeout(fd, 10);  // a client must finish the handshake promptly
  ServerHandshakeResult hs;
  std::string err;
  if (!server_handshake(fd, loop.token, &hs, &err, loop.capabilities, loop.welcomed, true)) {
    if (hs.resume) _exit(route_resume(fd, peer, hs.resume_payload, loop));
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

}  // namespace

void run_accept_loop(int lfd, const AcceptLoop& loop) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    log::error("cannot make the spare-process pipe: %s", std::strerror(errno));
    _exit(1);
  }
  // Reap session processes, and say so when one dies of a signal: its client was cut off.
  std::function<void(pid_t)> on_exit = loop.on_exit;
  int notify_fd = pipefd[1];
  std::thread([on_exit, notify_fd] {
    for (;;) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, 0);
      if (pid < 0) {
        if (errno == ECHILD) sleep(1);
        continue;
      }
      tell(notify_fd, -static_cast<int32_t>(pid));
      if (on_exit) on_exit(pid);
      if (WIFSIGNALED(st))
        log::error("session process %d died of signal %d (%s); its client was disconnected", static_cast<int>(pid),
                   WTERMSIG(st), strsignal(WTERMSIG(st)));
    }
  }).detach();
  signal(SIGPIPE, SIG_IGN);

  std::set<pid_t> spares;
  const pid_t parent = getpid();
  auto started = std::chrono::steady_clock::now();
  for (;;) {
    if (spares.empty()) {
      started = std::chrono::steady_clock::now();
      pid_t pid = fork();
      if (pid < 0) {
        log::error("cannot start a session process: %s; trying again in a second", std::strerror(errno));
        sleep(1);
        continue;
      }
      if (pid == 0) {
        close(pipefd[0]);
        run_spare(lfd, pipefd[1], parent, loop);
      }
      spares.insert(pid);
    }
    int32_t message = 0;
    ssize_t n = read(pipefd[0], &message, sizeof message);
    if (n != static_cast<ssize_t>(sizeof message)) continue;  // EINTR
    pid_t pid = message > 0 ? message : -message;
    if (spares.erase(pid) == 0 || message > 0) continue;
    // The spare ended without a client (its start-up failed): start another, not in a tight loop.
    log::warn("spare session process %d ended before any client came; starting another", static_cast<int>(pid));
    if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) sleep(1);
  }
}

}  // namespace rgpu::proto
