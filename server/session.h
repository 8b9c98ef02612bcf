// One client's session, run in its own process (forked per connection, docs/design.md §2).
//
// The session's main thread reads frames and hands each to the worker thread of the client
// thread that sent it (FrameHeader::thread_id), creating workers on demand. Each worker runs its
// calls in order, so a client thread's CUDA context and call order are mirrored exactly, and a
// synchronize on one worker never stalls another. Replies are written under one mutex. A short
// synchronous query whose worker is idle runs on the reading thread itself, in that worker's
// context (session.cpp, run_on_reader); a standby thread reads on if it blocks.
//
// Hostile input: a frame over the size limit, a payload its handler cannot decode, a thread id
// past the limit, or a reply-less control op that makes no sense: the session logs why and ends,
// which closes this connection and nothing else.
#pragma once

#include <chrono>
#include <string>

#include "protocol/handshake.h"
#include "protocol/tls.h"

#include "gen/driver_table.gen.h"

namespace rgpu::server {

struct SessionOptions {
  const DriverTable* driver = nullptr;
  std::string peer;      // "host:port", for log lines
  std::string identity;  // from the client's Hello
  // Where live sessions are listed (one file per session process, named by its pid; kOpSessions
  // reads them); empty: not listed.
  std::string sessions_dir;
  // The reliable channel (protocol/channel.h), when the handshake agreed kCapChannel: the
  // session's id and the token (the session secret mixes both), how long a broken connection is
  // waited for, and where resuming clients are handed over (protocol/session_dir.h; empty: the
  // session survives breaks only while its client reconnects through... nothing: it ends).
  bool channel = false;
  proto::SessionId session{};
  std::string token;
  std::chrono::seconds grace{600};
  std::string door_dir;
  // TLS: the stream the handshake ran on (the session runs on it, not on the socket), and the
  // server's context for resuming clients' TLS handshakes (protocol/tls.h). nullptr: plain TCP.
  std::shared_ptr<proto::Transport> transport;
  std::shared_ptr<proto::TlsContext> tls;
  // Whose token the client proved (protocol/handshake.h): the session list shows only its own.
  std::string tenant;
};

// The session process's entry in the sessions directory: written at start, removed at exit.
void register_session(const std::string& dir, const std::string& identity, const std::string& peer);
// Rewrites it: grace_ends is the unix time a disconnected session ends at (0: connected).
void write_session_entry(const std::string& dir, const std::string& identity, const std::string& peer,
                         long long start, long long grace_ends);
void unregister_session(const std::string& dir, int pid);
// True when pid's entry in dir is of this session's tenant (rgpu-smi acts only on its own tenant's).
bool same_tenant_session(const std::string& dir, int pid);
// This session process's SessionOptions::sessions_dir ("" outside a session, as when fuzzing).
const std::string& listed_sessions_dir();
// Where rgpu-smi migrate notes which GPU a session was moved to (server/session_control.cpp).
std::string session_gpu_file(const std::string& dir, int pid);
// What rgpu-smi shows after a session's peer: suspended (the driver's checkpoint state) and the
// GPU it was moved to, each in parentheses; "" for a session running where it started.
std::string session_state_note(const DriverTable& drv, const std::string& dir, int pid);

// Serves the connection until the client leaves or misbehaves. Returns the process exit status.
int run_session(int fd, const SessionOptions& options);

// Sends the device snapshot unasked, right behind the handshake's Welcome (kCapPushedSnapshot,
// protocol/handshake.h): the reply kOpSnapshot would get, with request id 0. False when the
// connection is gone.
bool push_snapshot(proto::Transport& t, const DriverTable& driver);

}  // namespace rgpu::server
