// Implementation of protocol/server_options.h.
#include "protocol/server_options.h"

namespace rgpu::proto {

void add_server_options(CLI::App& app, ServerOptions* o, const std::string& kept) {
  ListenOptions& l = o->listen;
  app.add_option("--listen", l.listen, "HOST:PORT to listen on (default " + l.listen + ", loopback only)");
  app.add_option("--token-file", l.token_file,
                 "file of the tokens clients must prove (or set RGPU_TOKEN for one): a token a line, or NAME TOKEN to "
                 "name the tenant it makes (a line of more than two words is one passphrase); each tenant's sessions, "
                 "modules and memory are kept apart from the others' (unnamed tokens make the tenant \"\"); blank "
                 "lines and lines starting with # are skipped");
  app.add_flag("--insecure", l.insecure, "allow listening on a non-loopback address without TLS and a token");
  app.add_option("--tls", l.tls,
                 "`auto`: TLS 1.3 with a self-signed certificate made once in --state-dir; its SHA-256 fingerprint "
                 "is printed at start for clients to pin (RGPU_TLS_FINGERPRINT); clients dial tls://HOST:PORT")
      ->check(CLI::IsMember({"auto"}));
  app.add_option("--tls-cert", l.tls_cert, "PEM certificate (and chain) for TLS 1.3, with --tls-key");
  app.add_option("--tls-key", l.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", l.tls_client_ca,
                 "PEM CA certificates: clients must present a certificate they signed (RGPU_TLS_CERT, RGPU_TLS_KEY)");
  app.add_option("--state-dir", l.state_dir,
                 "directory of what the server keeps across restarts (--tls auto's certificate; default "
                 "$XDG_STATE_HOME/rgpu, else $HOME/.local/state/rgpu, else /var/lib/rgpu)");
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
  app.add_option("--max-sessions", o->max_sessions,
                 "most sessions at once (default " + std::to_string(kDefaultMaxSessions) +
                     ", 0: no limit); a client past it is refused and told to try later")
      ->check(CLI::Range(0, 100000));
  app.add_option("--max-pending-handshakes", o->max_pending_handshakes,
                 "most connections that have not finished the handshake (default " +
                     std::to_string(kDefaultMaxPendingHandshakes) +
                     "); past it the oldest of the address with the most is dropped. Each is a process (with rgpu-server "
                     "--prewarm context, one holding a GPU context)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--handshake-timeout", o->handshake_timeout_s,
                 "seconds a connection has for the whole handshake, from accept to welcome (default 10)")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--log-level", l.log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
}

}  // namespace rgpu::proto

namespace rgpu::proto {

void apply_server_options(const ServerOptions& o, const std::vector<Tenant>& tenants, AcceptLoop* loop) {
  loop->tenants = tenants;
  loop->max_sessions = o.max_sessions;
  loop->max_pending_handshakes = o.max_pending_handshakes;
  loop->handshake_timeout = std::chrono::milliseconds(static_cast<long long>(o.handshake_timeout_s * 1000));
}

}  // namespace rgpu::proto
