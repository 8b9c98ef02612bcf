// Implementation of protocol/server_options.h.
#include "protocol/server_options.h"

namespace rgpu::proto {

void add_server_options(CLI::App& app, ServerOptions* o, const std::string& kept) {
  ListenOptions& l = o->listen;
  app.add_option("--listen", l.listen, "HOST:PORT to listen on (default " + l.listen + ", loopback only)");
  app.add_option("--token-file", l.token_file,
                 "file whose first line is the shared token clients must prove (or set RGPU_TOKEN)");
  app.add_flag("--insecure", l.insecure, "allow listening on a non-loopback address without a token");
  app.add_option("--session-grace", o->session_grace,
                 "seconds a session whose connection broke keeps its " + kept +
                     " for its client to reconnect (default 600); past it the session ends");
  app.add_option("--drain-timeout", o->drain_timeout,
                 "seconds the sessions get to finish after SIGTERM or SIGINT (default 60): their clients are told "
                 "at once, and a session still running after it is ended with that reason")
      ->check(CLI::Range(0, 24 * 3600));
  app.add_option("--runtime-dir", o->runtime_dir,
                 "directory of the live sessions' sockets, through which a client reconnects to its session, also "
                 "after this server restarts (default $XDG_RUNTIME_DIR/rgpu, else /run/rgpu, else /tmp/rgpu-UID)");
  app.add_option("--log-level", l.log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
}

}  // namespace rgpu::proto
