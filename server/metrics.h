// What `rgpu-server --metrics-listen HOST:PORT` serves, over common/http_server.h: /metrics, the
// Prometheus text exposition (format 0.0.4) of the listener's session table
// (protocol/session_table.h: sessions and their memory, calls and round trips by op, bytes each
// way, failed handshakes by reason, module-cache lookups), and /healthz, 200 "ok" with the
// driver's state while the server can serve a client, 503 with why not otherwise. Every name
// starts with rgpu_. It runs on a thread of the listening process, which never touches the GPU:
// the driver's state is what the spare process found when it started the driver (server/prewarm.h).
#pragma once

#include <string>

#include "common/http_server.h"
#include "protocol/session_table.h"

namespace rgpu::server::metrics {

// The exposition of `s` (tests call it on a snapshot of their own).
std::string render(const proto::table::Snapshot& s);

// The /healthz answer for `s`, while `accepting` (false once the server drains).
http::Response health(const proto::table::Snapshot& s, bool accepting);

// Binds `address` (HOST:PORT; HOST alone takes port 9714), before the accept loop starts: the
// listening descriptor, or -1 with *err.
int bind(const std::string& address, std::string* err);

// In the listening process: serves /metrics and /healthz on fd, on a thread of its own.
void start(int fd);

// The listener stopped accepting (a drain): /healthz answers 503 from now on.
void stopped_accepting();

}  // namespace rgpu::server::metrics
