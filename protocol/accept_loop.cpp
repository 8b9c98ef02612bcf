// Implementation of protocol/accept_loop.h.
#include "protocol/accept_loop.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <sstream>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/channel.h"
#include "protocol/drain.h"
#include "protocol/session_dir.h"
#include "protocol/session_table.h"

namespace rgpu::proto {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

bool prepare_tls(const ListenOptions& o, std::shared_ptr<TlsContext>* tls) {
  tls->reset();
  const bool have_files = !o.tls_cert.empty() || !o.tls_key.empty();
  if (!o.tls.empty() && o.tls != "auto") {
    log::error("--tls takes `auto` (a self-signed certificate kept in --state-dir); give --tls-cert and --tls-key "
               "for a certificate of your own");
    return false;
  }
  if (o.tls == "auto" && have_files) {
    log::error("--tls auto and --tls-cert/--tls-key both given; give one of them");
    return false;
  }
  if (have_files && (o.tls_cert.empty() || o.tls_key.empty())) {
    log::error("--tls-cert and --tls-key go together: give the certificate and its private key");
    return false;
  }
  if (o.tls.empty() && !have_files) {
    if (!o.tls_client_ca.empty()) {
      log::error("--tls-client-ca needs TLS: add --tls auto or --tls-cert and --tls-key");
      return false;
    }
    return true;
  }
  TlsServerConfig config{o.tls_cert, o.tls_key, o.tls_client_ca};
  std::string err;
  if (o.tls == "auto") {
    std::string dir = o.state_dir.empty() ? default_state_dir() : o.state_dir;
    if (!ensure_auto_certificate(dir, &config.cert_file, &config.key_file, &err)) {
      log::error("%s", err.c_str());
      return false;
    }
  }
  *tls = tls_server_context(config, &err);
  if (!*tls) {
    log::error("%s", err.c_str());
    return false;
  }
  const std::string print = tls_fingerprint(**tls);
  log::info("TLS 1.3 with the certificate %s, fingerprint %s; clients use RGPU_SERVER=tls://HOST:PORT with "
            "RGPU_TLS_FINGERPRINT=%s (or RGPU_TLS_CA)%s",
            config.cert_file.c_str(), print.c_str(), print.c_str(),
            o.tls_client_ca.empty() ? "" : ", and client certificates signed by --tls-client-ca");
  return true;
}

bool parse_token_file(const std::string& text, const std::string& path, std::vector<Tenant>* tenants,
                      std::string* err) {
  tenants->clear();
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty() || w[0][0] == '#') continue;
    const std::string where = path + " line " + std::to_string(number);
    // Two words name a tenant; one, or more than two (a passphrase, as the first line of a token
    // file always could be), are one unnamed token, trailing blanks trimmed.
    Tenant t{w.size() == 2 ? w[0] : "", w.back()};
    if (w.size() > 2) {
      t.token = line;
      while (!t.token.empty() && std::isspace(static_cast<unsigned char>(t.token.back()))) t.token.pop_back();
    }
    if (w.size() == 2 && !valid_name(t.name)) {
      *err = where + ": the tenant name '" + t.name + "' is not 1 to 63 letters, digits, '.', '_' or '-'";
      return false;
    }
    for (const Tenant& other : *tenants) {
      if (other.token == t.token && other.name != t.name) {
        *err = where + ": tenant '" + t.name + "' has the same token as tenant '" + other.name +
               "'; give each tenant a token of its own";
        return false;
      }
    }
    tenants->push_back(t);
  }
  if (tenants->empty()) {
    *err = "--token-file " + path + " holds no token; put a token on a line (or NAME TOKEN, one line per tenant)";
    return false;
  }
  return true;
}

const std::string& proved_token(const std::vector<Tenant>& tenants, const ServerHandshakeResult& hs) {
  static const std::string none;
  return hs.token_index < tenants.size() ? tenants[hs.token_index].token : none;
}

namespace {

bool read_token_file(const std::string& path, std::vector<Tenant>* tenants, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = "cannot read --token-file " + path + ": " + std::strerror(errno);
    return false;
  }
  std::stringstream text;
  text << f.rdbuf();
  return parse_token_file(text.str(), path, tenants, err);
}

}  // namespace

bool prepare_listen(const ListenOptions& o, std::vector<Tenant>* tenants, net::Address* addr,
                    std::shared_ptr<TlsContext>* tls) {
  if (o.log_level == "debug") log::set_level(log::kDebug);
  if (o.log_level == "warn") log::set_level(log::kWarn);
  if (o.log_level == "error") log::set_level(log::kError);
  std::string err;
  tenants->clear();
  if (!o.token_file.empty()) {
    if (!read_token_file(o.token_file, tenants, &err)) {
      log::error("%s", err.c_str());
      return false;
    }
  } else if (!env::get().token.empty()) {
    tenants->push_back({"", env::get().token});
  }
  std::string names;
  for (const Tenant& t : *tenants)
    if (names.find("'" + t.name + "'") == std::string::npos) names += (names.empty() ? "'" : ", '") + t.name + "'";
  if (tenants->size() > 1) log::info("%zu tokens, tenants %s", tenants->size(), names.c_str());
  if (!net::parse_address(o.listen, o.default_port, addr, &err)) {
    log::error("--listen: %s", err.c_str());
    return false;
  }
  if (!prepare_tls(o, tls)) return false;
  if (!net::is_loopback(addr->host) && (tenants->empty() || !*tls) && !o.insecure) {
    const char* missing = tenants->empty() && !*tls ? "without TLS and a token"
                          : tenants->empty()        ? "without a token"
                                                    : "without TLS";
    log::error(
        "refusing to listen on %s %s: anyone who can reach it could run code on %s, or read and change what "
        "crosses the network. Give --tls auto (or --tls-cert and --tls-key) and --token-file (or RGPU_TOKEN), or "
        "--insecure if the network is trusted.",
        addr->str().c_str(), missing, o.reach.c_str());
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

// Ends a connection whose client's bytes were read only in part (the rest of a Hello, of a
// ClientHello), after a refusal or a TLS alert was written: what the client sent is read and
// dropped until it closes (at most a second), since closing with unread bytes would reset the
// connection, and the client could lose the refusal before reading it.
void drain_input(int fd) {
  ::shutdown(fd, SHUT_WR);
  // At most a second in all, however the client trickles its bytes.
  const auto until = Clock::now() + std::chrono::seconds(1);
  char sink[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0 || ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
      return;
  }
}

// Refuses in clear (before TLS, or instead of it) and ends the connection as above.
void refuse_and_drain(int fd, const std::string& reason) {
  refuse(fd, reason);
  drain_input(fd);
}

// A TLS client resuming its session: its raw socket goes to the session's process, which runs the
// TLS handshake and the resume proof. Returns this process's exit status.
int route_tls_resume(int fd, const std::string& peer, const SessionId& session, const AcceptLoop& loop) {
  std::string why;
  if (loop.session_dir.empty()) {
    why = "this server keeps no sessions for resuming";
  } else if (hand_over_tls(loop.session_dir, fd, session, &why)) {
    log::info("TLS connection from %s resumes session %s", peer.c_str(), session_hex(session).c_str());
    return 0;
  }
  log::info("TLS connection from %s asked to resume session %s: %s", peer.c_str(), session_hex(session).c_str(),
            why.c_str());
  // Before TLS, in clear: the client reports it as unauthenticated (protocol/messages.h).
  refuse_and_drain(fd, "session lost: " + why);
  return 1;
}

// This end's address of a connection, "HOST:PORT" (the address the client dialled).
std::string local_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "this address";
  return std::string(host) + ":" + serv;
}

// The handshake's deadline: at `limit` from now the connection is shut down, which ends whatever
// read or write the handshake is in (a client sending a byte every few seconds cannot hold it).
class Deadline {
 public:
  Deadline(int fd, std::chrono::milliseconds limit)
      : thread_([this, fd, limit] {
          std::unique_lock<std::mutex> lk(mu_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            expired_ = true;
            ::shutdown(fd, SHUT_RDWR);
          }
        }) {}
  ~Deadline() { stop(); }
  // Ends the watch; true when the deadline had passed (the connection is shut down).
  bool stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return expired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, expired_ = false;
  std::thread thread_;
};

// A spare's life: prepare, accept one connection, say so, then serve it as its session.
[[noreturn]] void run_spare(int lfd, int notify_fd, pid_t parent, const AcceptLoop& loop) {
  // Until it has a client, a spare ends with the parent (it would hold the port otherwise). SIGKILL:
  // SIGTERM and SIGINT are blocked in every process the parent forks (protocol/drain.h).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
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
  // From now on SIGTERM and SIGINT ask this session to drain; its notices name the server by the
  // address its client reached.
  DrainSettings drain = loop.drain;
  if (drain.server.empty()) drain.server = loop.name + " at " + local_name(fd);
  start_drain_watch(drain);
  std::string peer = net::peer_name(fd);
  const std::string host = table::host_of(peer);
  // The row first, then the word to the parent: the parent counts pending handshakes on that word.
  const bool claimed = table::claim(host);
  tell(notify_fd, static_cast<int32_t>(getpid()));
  close(notify_fd);
  close(lfd);
  net::set_nodelay(fd);
  if (!claimed) {
    table::note_handshake_failure(table::kTableFull);
    log::warn("connection from %s refused: the session table is full (%s)", peer.c_str(), drain.server.c_str());
    refuse_and_drain(fd, drain.server + " has no room for another connection; try later");
    _exit(1);
  }
  // An address with too many wrong tokens this minute is refused without a try; the listener sums
  // these up in its log once the minute ends, one line per address.
  if (table::Failures f = table::failures(host); f.count >= kTokenFailuresBeforeRefusal) {
    table::note_failure(host);
    table::note_handshake_failure(table::kRateLimited);
    refuse_and_drain(fd, log::format("%u failed token proofs from %s in the last minute: %s refuses its connections "
                                     "for %d s more; check that RGPU_TOKEN matches a token in the server's --token-file",
                                     f.count, host.c_str(), drain.server.c_str(), f.seconds_left));
    _exit(1);
  }
  net::set_recv_timeout(fd, 10);  // no single read waits longer; the deadline below bounds them all
  ServerHandshake how;
  how.tenants = loop.tenants;
  how.capabilities = loop.capabilities;
  how.welcomed = loop.welcomed;
  how.allow_resume = !loop.tls;  // with TLS a resume is announced by the preamble instead
  table::FailureReason refused = table::kProtocol;  // why admit() refused, if it did
  how.admit = [&](const ServerHandshakeResult& so_far, std::string* reason) {
    unsigned live = 0;
    switch (table::admit(so_far.tenant, loop.max_sessions, &live)) {
      case table::Admit::kOk:
        if (loop.tenant_known) loop.tenant_known(so_far.tenant);
        return true;
      case table::Admit::kEvicted:
        refused = table::kEvicted;
        *reason = drain.server + " dropped this handshake: too many connections were waiting for theirs; try again";
        return false;
      case table::Admit::kFull:
        refused = table::kMaxSessions;
        break;
    }
    *reason = log::format("%s has %u session%s, its --max-sessions; try later", drain.server.c_str(), live,
                          live == 1 ? "" : "s");
    return false;
  };
  uint32_t failures_here = 0;  // this address's failed proofs this minute, this one included
  how.on_wrong_token = [&] { failures_here = table::note_failure(host); };
  ServerHandshakeResult hs;
  std::string err;
  bool ok;
  bool late;
  {
    // The whole opening (the TLS preamble and handshake, then ours) within handshake_timeout.
    Deadline limit(fd, loop.handshake_timeout);
    if (loop.tls) {
      // The clear preamble says who terminates TLS: this process (a new session), or the live
      // session a resuming client comes back to (protocol/messages.h, TlsPreamble).
      const auto deadline = Clock::now() + loop.handshake_timeout;
      TlsPreamble pre;
      switch (read_tls_opening(fd, &pre, deadline)) {
        case TlsOpening::kOk:
          break;
        case TlsOpening::kClosed:
          log::info("connection from %s closed before the handshake (a port check)", peer.c_str());
          _exit(1);
        case TlsOpening::kNotTls:
          table::note_handshake_failure(table::kTls);
          log::warn("connection from %s did not begin with TLS (a client without tls://?); refused", peer.c_str());
          refuse_and_drain(fd, "this server speaks only TLS: dial it as tls://HOST:PORT (in RGPU_SERVER or "
                               "RGPU_OPSERVER), with RGPU_TLS_FINGERPRINT or RGPU_TLS_CA to trust its certificate");
          _exit(1);
        case TlsOpening::kMalformed:
          table::note_handshake_failure(table::kTls);
          log::warn("connection from %s: a malformed or incomplete TLS preamble", peer.c_str());
          refuse_and_drain(fd, "malformed TLS preamble");
          _exit(1);
      }
      if (pre.kind == kTlsResume) {
        limit.stop();
        _exit(route_tls_resume(fd, peer, pre.session, loop));
      }
      std::unique_ptr<TlsTransport> t = tls_accept(loop.tls, fd, true, deadline, &err);
      if (!t) {
        table::note_handshake_failure(Clock::now() >= deadline ? table::kTimeout : table::kTls);
        log::warn("connection from %s: %s", peer.c_str(), err.c_str());
        drain_input(fd);  // the alert OpenSSL sent must reach the client before the connection ends
        _exit(1);
      }
      hs.transport = std::shared_ptr<Transport>(std::move(t));
      how.deadline = deadline;
      ok = server_handshake(*hs.transport, how, &hs, &err);
    } else {
      auto plain = socket_transport(fd, false);
      ok = server_handshake(*plain, how, &hs, &err);
      if (!ok && hs.tls_preamble) {
        table::note_handshake_failure(table::kTls);
        log::warn("connection from %s asked for TLS (tls://), which this server does not speak (--tls); refused",
                  peer.c_str());
        // The refusal is written; what is left of the preamble and the ClientHello is read first.
        drain_input(fd);
        _exit(1);
      }
    }
    late = limit.stop();
  }
  if (!ok) {
    if (late) {
      table::note_handshake_failure(table::kTimeout);
      log::warn("connection from %s did not finish the handshake within %.1f s (%s); dropped", peer.c_str(),
                loop.handshake_timeout.count() / 1000.0, hs.identity.empty() ? "no greeting" : hs.identity.c_str());
      _exit(1);
    }
    if (hs.resume) _exit(route_resume(fd, peer, hs.resume_payload, loop));
    if (hs.said_nothing) {
      log::info("connection from %s closed before the handshake (a port check)", peer.c_str());
    } else if (hs.wrong_token) {
      table::note_handshake_failure(table::kWrongToken);
      const uint32_t n = failures_here;
      if (n <= kLoggedTokenFailures)
        log::warn("connection from %s: %s%s", peer.c_str(), err.c_str(),
                  n == kLoggedTokenFailures ? " (more from this address this minute are summed up at its end)" : "");
    } else {
      table::note_handshake_failure(hs.client_closed ? table::kClientClosed : refused);
      log::warn("connection from %s: %s", peer.c_str(), err.c_str());
    }
    _exit(1);
  }
  net::set_recv_timeout(fd, 0);
  log::info("session for %s from %s started", hs.identity.c_str(), peer.c_str());
  _exit(loop.session(fd, peer, hs));
}

}  // namespace

namespace {

// The listener's stop signals reach its main loop through this pipe, a signal number a byte.
int g_signal_read = -1, g_signal_write = -1;
pid_t g_listener = 0;
void on_stop_signal(int sig) {
  // A process forked a moment ago still has this handler until it resets it: not ours to take.
  if (getpid() != g_listener) return;
  const int saved = errno;
  const uint8_t b = static_cast<uint8_t>(sig);
  (void)!write(g_signal_write, &b, 1);
  errno = saved;
}

// Processes this listener killed on purpose (spares at a stop, sessions past the drain): the
// reaper does not report their deaths as failures.
std::mutex& g_quiet_mu = *new std::mutex;
std::set<pid_t>& g_quiet = *new std::set<pid_t>;

// How long past the drain time a session may take to end by itself before it is killed.
constexpr auto kLastResort = std::chrono::seconds(5);

const char* plural(size_t n) { return n == 1 ? "" : "s"; }

// The listening parent's state: its spare, the sessions its spares became, the pipes.
class Listener {
 public:
  Listener(int lfd, const AcceptLoop& loop, int notify_read) : lfd_(lfd), loop_(loop), notify_(notify_read) {}

  [[noreturn]] void run(int notify_write) {
    const pid_t parent = getpid();
    auto started = std::chrono::steady_clock::now();
    for (;;) {
      if (spares_.empty()) {
        started = std::chrono::steady_clock::now();
        // The stop signals are blocked across the fork: the child resets their handlers first.
        sigset_t stop, old;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &stop, &old);
        pid_t pid = fork();
        if (pid == 0) {
          signal(SIGTERM, SIG_DFL);
          signal(SIGINT, SIG_DFL);
          signal(SIGHUP, SIG_DFL);
          block_stop_signals();  // SIGTERM and SIGINT stay blocked: start_drain_watch takes them
          sigset_t hup;
          sigemptyset(&hup);
          sigaddset(&hup, SIGHUP);
          pthread_sigmask(SIG_UNBLOCK, &hup, nullptr);
          close(notify_);
          close(g_signal_read);
          close(g_signal_write);
          for (int fd : loop_.listener_only_fds) close(fd);
          run_spare(lfd_, notify_write, parent, loop_);
        }
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        if (pid < 0) {
          log::error("cannot start a session process: %s; trying again in a second", std::strerror(errno));
          wait_events(std::chrono::seconds(1));
          continue;
        }
        spares_.insert(pid);
      }
      wait_events(std::chrono::milliseconds(1000));
      summarise();
      std::vector<pid_t> died;
      died.swap(spare_died_);
      for (pid_t pid : died) {
        // The spare ended without a client (its start-up failed): start another, not in a tight loop.
        log::warn("spare session process %d ended before any client came; starting another", static_cast<int>(pid));
        if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) wait_events(std::chrono::seconds(1));
      }
    }
  }

 private:
  // Waits up to `timeout` (negative: without end) for a message from the spares and the reaper or
  // a signal, and handles what came. A stop signal does not return.
  void wait_events(std::chrono::milliseconds timeout) {
    pollfd p[2] = {{notify_, POLLIN, 0}, {g_signal_read, POLLIN, 0}};
    if (poll(p, 2, timeout.count() < 0 ? -1 : static_cast<int>(timeout.count())) <= 0) return;
    if (p[0].revents & POLLIN) read_messages();
    if (p[1].revents & POLLIN) {
      uint8_t sig = 0;
      while (read(g_signal_read, &sig, 1) == 1) on_signal(sig);
    }
  }

  void read_messages() {
    int32_t messages[64];
    ssize_t n = read(notify_, messages, sizeof messages);
    for (ssize_t i = 0; i + 4 <= n; i += 4) {
      const int32_t m = messages[i / 4];
      const pid_t pid = m > 0 ? m : -m;
      if (m > 0) {  // a spare took a connection: it is a session now
        if (spares_.erase(pid)) sessions_.insert(pid);
        evict_pending();
        continue;
      }
      sessions_.erase(pid);
      if (spares_.erase(pid) && !stopping_) spare_died_.push_back(pid);
    }
  }

  // Past --max-pending-handshakes, the oldest pending handshakes of the busiest address go
  // (protocol/session_table.h): their processes are killed, counted for the next summary.
  void evict_pending() {
    while (pid_t pid = table::evict_pending(loop_.max_pending_handshakes)) {
      {
        std::lock_guard<std::mutex> lock(g_quiet_mu);
        g_quiet.insert(pid);
      }
      kill(pid, SIGKILL);
      ++evicted_;
    }
  }

  // About once a second: what was summed up rather than logged line by line.
  void summarise() {
    table::sample_rates();
    for (const auto& [host, n] : table::take_ended_minutes(kLoggedTokenFailures))
      log::warn("%u failed token proofs from %s in the last minute (after %u, its connections were refused without "
                "a try)",
                n, host.c_str(), kTokenFailuresBeforeRefusal);
    const auto now = std::chrono::steady_clock::now();
    if (evicted_ && now - last_evicted_log_ >= std::chrono::seconds(10)) {
      log::warn("dropped %llu connection%s that had not finished the handshake: more than %u were pending "
                "(--max-pending-handshakes), the oldest from the busiest address went first",
                static_cast<unsigned long long>(evicted_), plural(evicted_), loop_.max_pending_handshakes);
      evicted_ = 0;
      last_evicted_log_ = now;
    }
  }

  void on_signal(int sig) {
    if (sig == SIGHUP) hand_over();
    if (!stopping_) drain();
    // A second SIGTERM or SIGINT while draining (drain() reads the pipe itself).
  }

  // Stops accepting: closes the listening socket and ends the spare (waiting for it, at most 2 s,
  // so that the port is free for the next server once this one has exited).
  void stop_accepting() {
    stopping_ = true;
    if (loop_.stopped_accepting) loop_.stopped_accepting();
    close(lfd_);
    // A spare that has just taken a connection is a session: it drains, it is not killed.
    pollfd ready{notify_, POLLIN, 0};
    while (poll(&ready, 1, 0) > 0 && (ready.revents & POLLIN)) read_messages();
    {
      std::lock_guard<std::mutex> lock(g_quiet_mu);
      for (pid_t pid : spares_) g_quiet.insert(pid);
    }
    for (pid_t pid : spares_) kill(pid, SIGKILL);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!spares_.empty() && std::chrono::steady_clock::now() < until) {
      pollfd p{notify_, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) read_messages();
    }
  }

  // Every live session process of this port: this listener's own and the listed ones.
  std::set<pid_t> live_sessions() {
    std::set<pid_t> all;
    for (pid_t pid : sessions_)
      if (runs_this_program(pid)) all.insert(pid);
    for (pid_t pid : listed_sessions(loop_.sessions_list)) all.insert(pid);
    return all;
  }

  bool alive(pid_t pid) {
    if (sessions_.count(pid)) return true;  // ours: alive until the reaper says otherwise
    return runs_this_program(pid);          // another listener's: init reaps it when it ends
  }

  [[noreturn]] void hand_over() {
    stop_accepting();
    const size_t n = live_sessions().size();
    log::info("SIGHUP: exiting now, leaving %zu live session%s running for the next server on this port: start it "
              "(same port, same --runtime-dir) and their clients reconnect to them there",
              n, plural(n));
    _exit(0);
  }

  [[noreturn]] void drain() {
    stop_accepting();
    const long long drain_s = loop_.drain.timeout.count();
    std::set<pid_t> left = live_sessions();
    log::info("draining %zu session%s for up to %lld s (--drain-timeout); new connections are refused. SIGTERM "
              "or SIGINT again ends them at once",
              left.size(), plural(left.size()), drain_s);
    for (pid_t pid : left) request_drain(pid, static_cast<int>(drain_s));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain_s) + kLastResort;
    bool at_once = false;
    for (;;) {
      for (auto it = left.begin(); it != left.end();) it = alive(*it) ? std::next(it) : left.erase(it);
      if (left.empty()) {
        log::info("every session has ended; exiting");
        _exit(0);
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      pollfd p[2] = {{notify_, POLLIN, 0}, {g_signal_read, POLLIN, 0}};
      auto wait = std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(100));
      if (poll(p, 2, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1) <= 0)
        continue;
      if (p[0].revents & POLLIN) read_messages();
      uint8_t sig = 0;
      while ((p[1].revents & POLLIN) && read(g_signal_read, &sig, 1) == 1) {
        if (sig == SIGHUP) {
          log::info("SIGHUP while draining: exiting now; the %zu session%s left end at their drain time by "
                    "themselves",
                    left.size(), plural(left.size()));
          _exit(0);
        }
        if (at_once) continue;
        at_once = true;
        log::info("%s again while draining: ending the %zu session%s left at once", strsignal(sig), left.size(),
                  plural(left.size()));
        for (pid_t pid : left) request_drain(pid, kEndNow);
        deadline = std::min(deadline, std::chrono::steady_clock::now() + kLastResort);
      }
    }
    for (pid_t pid : left) {
      log::warn("session process %d did not end by itself; killing it", static_cast<int>(pid));
      {
        std::lock_guard<std::mutex> lock(g_quiet_mu);
        g_quiet.insert(pid);
      }
      kill(pid, SIGKILL);
      // The reaper of this listener's own sessions removes their list entries; another's, here.
      if (!sessions_.count(pid) && loop_.on_exit) loop_.on_exit(pid);
    }
    _exit(0);
  }

  int lfd_;
  const AcceptLoop& loop_;
  int notify_;
  std::set<pid_t> spares_, sessions_;
  std::vector<pid_t> spare_died_;
  bool stopping_ = false;
  uint64_t evicted_ = 0;
  std::chrono::steady_clock::time_point last_evicted_log_{};
};

}  // namespace

void run_accept_loop(int lfd, const AcceptLoop& loop) {
  int pipefd[2], sigpipe[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0 || pipe2(sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    log::error("cannot make the spare-process pipe: %s", std::strerror(errno));
    _exit(1);
  }
  g_signal_read = sigpipe[0];
  g_signal_write = sigpipe[1];
  g_listener = getpid();
  table::create();
  if (loop.in_listener) loop.in_listener();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
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
      table::release(pid);
      tell(notify_fd, -static_cast<int32_t>(pid));
      if (on_exit) on_exit(pid);
      bool quiet;
      {
        std::lock_guard<std::mutex> lock(g_quiet_mu);
        quiet = g_quiet.erase(pid) != 0;
      }
      if (WIFSIGNALED(st) && !quiet)
        log::error("session process %d died of signal %d (%s); its client was disconnected", static_cast<int>(pid),
                   WTERMSIG(st), strsignal(WTERMSIG(st)));
    }
  }).detach();
  signal(SIGPIPE, SIG_IGN);
  Listener(lfd, loop, pipefd[0]).run(pipefd[1]);
}

}  // namespace rgpu::proto
