// The process model both servers share (rgpu-server, rgpu-opserver): accept a connection, fork a
// process for it, run the handshake there, then the session. A session's crash or hostile client
// ends that process only; the listening parent never touches the GPU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/net.h"
#include "protocol/handshake.h"

namespace rgpu::proto {

// The start-up options both servers share.
struct ListenOptions {
  std::string log_level;   // --log-level: error, warn, info or debug
  std::string token_file;  // --token-file; empty: RGPU_TOKEN, else no token
  std::string listen;      // --listen HOST[:PORT]
  uint16_t default_port = 0;
  bool insecure = false;   // --insecure: a public address without a token is allowed
  std::string reach;       // what a tokenless public listener exposes, for the refusal ("this GPU")
};

// Applies the log level, reads the token and the address, and refuses to listen beyond loopback
// without a token unless insecure. False after logging why (the caller exits with status 2).
bool prepare_listen(const ListenOptions& o, std::string* token, net::Address* addr);

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
