// The command-line options rgpu-server and rgpu-opserver share (how they listen, who may connect,
// how sessions survive and stop), added to either program's CLI11 app in one place so that both
// say the same thing about them. Each program adds its own options (the driver, the device) next
// to these.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "protocol/accept_loop.h"

namespace rgpu::proto {

struct ServerOptions {
  ListenOptions listen;        // --listen, --token-file, --insecure, --log-level, --tls*, --state-dir
  unsigned session_grace = 600;  // --session-grace: seconds a broken connection may take to come back
  unsigned drain_timeout = 60;   // --drain-timeout: seconds the sessions get after SIGTERM or SIGINT
  std::string runtime_dir;       // --runtime-dir: the live sessions' sockets ("": the default)
  unsigned max_sessions = kDefaultMaxSessions;                     // --max-sessions (0: no limit)
  unsigned max_pending_handshakes = kDefaultMaxPendingHandshakes;  // --max-pending-handshakes
  double handshake_timeout_s = kHandshakeTimeout.count();          // --handshake-timeout
};

// Copies the connection limits into loop (tenants, --max-sessions, --max-pending-handshakes).
void apply_server_options(const ServerOptions& o, const std::vector<Tenant>& tenants, AcceptLoop* loop);

// Adds the shared options to app. `o->listen.default_port` and `o->listen.listen` must be set first
// (the default address is part of the help); `kept` names what a session keeps through a break
// ("GPU state", "tensors").
void add_server_options(CLI::App& app, ServerOptions* o, const std::string& kept);

}  // namespace rgpu::proto
