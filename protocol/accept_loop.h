// The process model both servers share (rgpu-server, rgpu-opserver): each connection is served by
// a process of its own, which runs the handshake and then the session. A session's crash or
// hostile client ends that process only; the listening parent never touches the GPU.
//
// The processes are forked ahead: one spare waits in accept() on the listening socket, having
// already run AcceptLoop::prepare (rgpu-server starts the GPU driver and the device's context
// there), so a client's first calls find that work done instead of waiting for it. When the spare
// takes a connection it tells the parent, which forks the next spare at once; a spare that dies
// unused is replaced too (after a second, if it lived less than that).
//
// Stopping (the signals the listening parent takes; protocol/drain.h has the sessions' side):
//   SIGTERM, SIGINT  drain: stop accepting (the listening socket is closed, the spare ended), ask
//                    every live session process of this port to drain (this listener's own, and
//                    those an earlier listener on the port left, from the sessions list), wait
//                    until they have ended, at most the drain time and a few seconds more (a
//                    session still alive then is killed), and exit 0. A second SIGTERM or SIGINT
//                    during the drain ends the sessions at once.
//   SIGHUP           hand over: stop accepting and exit 0 at once; the sessions keep running, and
//                    the next server started on the same port hands their clients back to them
//                    when they reconnect (protocol/session_dir.h), as after a crash.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/net.h"
#include "protocol/drain.h"
#include "protocol/handshake.h"
#include "protocol/tls.h"

namespace rgpu::proto {

// The start-up options both servers share.
struct ListenOptions {
  std::string log_level;   // --log-level: error, warn, info or debug
  std::string token_file;  // --token-file; empty: RGPU_TOKEN, else no token
  std::string listen;      // --listen HOST[:PORT]
  uint16_t default_port = 0;
  bool insecure = false;   // --insecure: a public address without TLS and a token is allowed
  std::string reach;       // what a tokenless public listener exposes, for the refusal ("this GPU")
  // TLS (protocol/tls.h): --tls-cert and --tls-key, or --tls auto (a self-signed certificate made
  // once in --state-dir); --tls-client-ca asks clients for certificates it signed.
  std::string tls;  // "" or "auto"
  std::string tls_cert, tls_key, tls_client_ca;
  std::string state_dir;  // "": default_state_dir()
};

// Applies the log level, reads the tokens (--token-file, else RGPU_TOKEN; none: empty) and the
// address, sets up TLS (*tls stays nullptr without it; its fingerprint is logged for clients to
// pin), and refuses to listen beyond loopback without both TLS and a token unless insecure. False
// after logging why (the caller exits with status 2).
bool prepare_listen(const ListenOptions& o, std::vector<Tenant>* tenants, net::Address* addr,
                    std::shared_ptr<TlsContext>* tls);

// The token file (--token-file): one token a line, or `NAME TOKEN` to name the tenant the token
// makes (names: 1 to 63 of A-Z a-z 0-9 . _ -). Blank lines and lines starting with '#' are skipped;
// words are separated by spaces or tabs. A line of two words is NAME TOKEN; a line of one word, or
// of more than two (a passphrase, as token files held before tenants), is one unnamed token.
// Unnamed tokens make the "" tenant; a name on several lines gives its tenant several tokens
// (rotation). One token shared by two tenants is an error, as is a file without a token. `path`
// names the file in *err.
bool parse_token_file(const std::string& text, const std::string& path, std::vector<Tenant>* tenants,
                      std::string* err);
// The token the client of hs proved ("" without tokens): what its session secret mixes.
const std::string& proved_token(const std::vector<Tenant>& tenants, const ServerHandshakeResult& hs);

// The connection limits' defaults (server_options.h has the options).
inline constexpr unsigned kDefaultMaxSessions = 64;
inline constexpr unsigned kDefaultMaxPendingHandshakes = 16;
inline constexpr std::chrono::seconds kHandshakeTimeout{10};
// Failed token proofs per source address and minute: the first kLoggedTokenFailures are logged one
// by one (the rest summed up when the minute ends), and after kTokenFailuresBeforeRefusal the
// address's connections are refused without a try until its minute ends.
inline constexpr uint32_t kLoggedTokenFailures = 3;
inline constexpr uint32_t kTokenFailuresBeforeRefusal = 10;

struct AcceptLoop {
  std::string name;   // "rgpu-server": the prefix of each session process's log lines
  std::vector<Tenant> tenants;  // the tokens clients may prove (empty = none needed)
  // --max-sessions (0: no limit): a client past it is refused ("... try later"); resuming clients
  // do not count, their sessions already do.
  unsigned max_sessions = kDefaultMaxSessions;
  // --max-pending-handshakes: connections past it evict the oldest pending handshake of the
  // address with the most (protocol/session_table.h), so idle connections cannot hold the server.
  unsigned max_pending_handshakes = kDefaultMaxPendingHandshakes;
  // The whole handshake's time limit, from accept to Welcome (not per read).
  std::chrono::milliseconds handshake_timeout = kHandshakeTimeout;
  // Optional: runs in the session's process once its tenant is known, before Welcome and whatever
  // `welcomed` sends (rgpu-server keeps each tenant's modules apart).
  std::function<void(const std::string& tenant)> tenant_known;
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
  // Where live sessions are listed (server/session.h's entries, <session_dir>/list): a drain asks
  // those an earlier listener on this port left too. Empty: only this listener's own sessions.
  std::string sessions_list;
  // --drain-timeout, and how notices name this server (empty: "<name> at <the address the client
  // reached>"); protocol/drain.h.
  DrainSettings drain;
  // Optional: runs once in the listening process, after the shared table (protocol/session_table.h)
  // exists and before the first spare is forked (rgpu-server starts its metrics endpoint there).
  std::function<void()> in_listener;
  // Descriptors only the listening process keeps: every spare closes them first.
  std::vector<int> listener_only_fds;
  // Optional: runs in the listening process when it stops accepting (a drain or a hand-over).
  std::function<void()> stopped_accepting;
  // TLS (prepare_listen's): every connection must then begin with a TLS preamble; a new session's
  // spare terminates TLS, a resuming client's raw socket goes to its session's process first.
  std::shared_ptr<TlsContext> tls;
};

// Serves the listening socket until SIGTERM, SIGINT or SIGHUP (above): reaps session processes on
// a thread of its own (logging the ones that died of a signal), ignores SIGPIPE, keeps one spare
// process accepting. Exits the process at the end (status 0).
[[noreturn]] void run_accept_loop(int listen_fd, const AcceptLoop& loop);

}  // namespace rgpu::proto
