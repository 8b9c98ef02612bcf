// The process model both servers share (rgpu-server, rgpu-opserver): each connection is served by
// a process of its own, which runs the handshake and then the session. A session's crash or
// hostile client ends that process only; the listening parent never touches the GPU.
//
// The processes are forked ahead: one spare waits in accept() on the listening socket, having
// already run AcceptLoop::prepare (rgpu-server starts the GPU driver and the device's context
// there), so a client's first calls find that work done instead of waiting for it. When the spare
// takes a connection it tells the parent, which forks the next spare at once; a spare that dies
// unused is replaced too (after a second, if it lived less than that).
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
  // Optional: runs in each spare process before its connection arrives. It must return promptly
  // (what takes long, it starts on a thread of its own): the spare accepts only after it.
  std::function<void()> prepare;
  // What the server offers in the handshake, and what it sends right behind Welcome (optional).
  uint64_t capabilities = kOurCapabilities;
  Welcomed welcomed;
  // Where live sessions listen for resuming clients (protocol/session_dir.h); empty: a
  // connection that asks to resume is refused.
  std::string session_dir;
};

// Serves the listening socket forever: reaps session processes on a thread of its own (logging
// the ones that died of a signal), ignores SIGPIPE, keeps one spare process accepting.
[[noreturn]] void run_accept_loop(int listen_fd, const AcceptLoop& loop);

}  // namespace rgpu::proto
