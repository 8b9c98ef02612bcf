// The process model both servers share (rgpu-server, rgpu-opserver): accept a connection, fork a
// process for it, run the handshake there, then the session. A session's crash or hostile client
// ends that process only; the listening parent never touches the GPU.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "protocol/handshake.h"

namespace rgpu::proto {

struct AcceptLoop {
  std::string name;   // "rgpu-server": the prefix of each session process's log lines
  std::string token;  // the shared token clients must prove ("" = none)
  // Runs in the session's own process after a successful handshake; returns its exit status.
  std::function<int(int fd, const std::string& peer, const ServerHandshakeResult& hs)> session;
  // Runs in the parent when a session process has ended (after its exit was reaped).
  std::function<void(pid_t pid)> on_exit;
};

// Serves the listening socket forever: reaps session processes on a thread of its own (logging
// the ones that died of a signal), ignores SIGPIPE, accepts and forks.
[[noreturn]] void run_accept_loop(int listen_fd, const AcceptLoop& loop);

}  // namespace rgpu::proto
