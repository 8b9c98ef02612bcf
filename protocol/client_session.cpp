// Implementation of protocol/client_session.h.
#include "protocol/client_session.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/env.h"
#include "common/log.h"

namespace rgpu::proto {

std::string client_identity(const std::string& suffix) {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  // USER, else the account's name (a container or CI job often runs without USER), else "?".
  std::string user = env::get().user;
  if (user.empty()) {
    passwd pw{};
    passwd* found = nullptr;
    char buf[1024];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &found) == 0 && found && found->pw_name) user = found->pw_name;
  }
  std::string prog = "?";
  if (FILE* f = fopen("/proc/self/comm", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof buf, f)) prog = std::string(buf, strcspn(buf, "\n"));
    fclose(f);
  }
  std::string id = log::format("%s@%s pid=%d prog=%s", user.empty() ? "?" : user.c_str(), host,
                               static_cast<int>(getpid()), prog.c_str());
  return suffix.empty() ? id : id + " " + suffix;
}

bool parse_server_address(const std::string& s, uint16_t default_port, net::Address* out, bool* tls,
                          std::string* err) {
  static const std::string kTls = "tls://";
  *tls = s.compare(0, kTls.size(), kTls) == 0;
  if (!*tls && s.find("://") != std::string::npos) {
    *err = "the address " + s + " has a scheme rgpu does not know; give host:port, or tls://host:port for TLS";
    return false;
  }
  return net::parse_address(*tls ? s.substr(kTls.size()) : s, default_port, out, err);
}

bool split_server_list(const std::string& list, std::vector<std::string>* out, std::string* err) {
  out->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.erase(0, 1);
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    net::Address addr;
    bool tls = false;
    std::string why = "an empty entry";
    if (entry.empty() || !parse_server_address(entry, 9713, &addr, &tls, &why)) {
      *err = "RGPU_SERVER='" + list + "' is not a server list (" + why +
             "); give host:port[,host:port...], each host:port may be tls://host:port";
      return false;
    }
    out->push_back(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out->size() > kMaxServers) {
    *err = "RGPU_SERVER names " + std::to_string(out->size()) + " servers; rgpu serves at most " +
           std::to_string(kMaxServers) + " under one program";
    return false;
  }
  return true;
}

namespace {

// A TLS client that the server refused after its TLS handshake (TLS 1.3 tells the client only at
// its first read): the alert says why; a client certificate it did not take is the usual cause.
std::string tls_refusal(const std::string& server, const std::string& alert) {
  if (alert.find("certificate") != std::string::npos)
    return server + " refused this client's TLS certificate (" + alert +
           "): it asks for a client certificate its --tls-client-ca signed; set RGPU_TLS_CERT and RGPU_TLS_KEY to one";
  return server + " ended the TLS connection: " + alert;
}

}  // namespace

bool open_client_session(const ClientSessionOptions& o, ClientSession* out, std::string* err) {
  const std::string server = o.server_program + " at " + (o.tls ? "tls://" : "") + o.address.str();
  DialOptions dialing;
  dialing.total = o.connect_timeout;
  dialing.peer = o.server_program;
  dialing.fix = o.fix;
  dialing.log_attempts = !o.quiet;
  out->handshake = {};
  // The connection of the attempt under way: the TLS stream, or the socket (borrowed: dial()
  // closes the socket of a failed attempt).
  std::unique_ptr<Transport> conn;
  // Each attempt: TLS, the handshake, then what the server sends behind it.
  auto setup = [&](int fd, Clock::time_point deadline, std::string* why) {
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count();
    net::set_recv_timeout(fd, static_cast<int>(std::max<long long>(1, left)));
    out->handshake = {};
    conn.reset();
    if (o.tls) {
      TlsFailure failure;
      conn = tls_connect(o.tls, fd, false, o.address.host, kTlsNew, SessionId{}, server, deadline, why, &failure);
      if (!conn) return failure == TlsFailure::kClosed ? Attempt::kRetry : Attempt::kGiveUp;
    } else {
      conn = socket_transport(fd, false);
    }
    if (!client_handshake(*conn, o.token, o.identity, o.address.str(), &out->handshake, why,
                          o.capabilities | kCapChannel, deadline)) {
      std::string alert = conn->failure();
      if (o.tls && !alert.empty()) {
        *why = tls_refusal(server, alert);
        return Attempt::kGiveUp;
      }
      return out->handshake.closed ? Attempt::kRetry : Attempt::kGiveUp;
    }
    if (!(out->handshake.capabilities & kCapChannel)) {
      *why = server + " does not speak this client's channel (an older release); use the same rgpu release on both sides";
      return Attempt::kGiveUp;
    }
    if (o.after_handshake) {
      Attempt a = o.after_handshake(fd, *conn, out->handshake, why);
      if (a != Attempt::kDone) return a;
    }
    net::set_recv_timeout(fd, 0);  // replies to a long synchronize may take as long as the kernel
    return Attempt::kDone;
  };
  int fd = dial(o.address, dialing, setup, err);
  if (fd < 0) return false;
  set_liveness(fd);
  ChannelOptions channel = o.channel;
  channel.peer = server;
  out->channel = std::make_unique<Channel>(Side::kClient, out->handshake.session, o.token, channel);
  // A broken connection: dial again (the session's own resume runs on what this returns). Over
  // TLS the preamble names the session, so that the listener hands the socket to the session's
  // process before TLS begins; that process runs the TLS handshake.
  out->channel->set_redial([addr = o.address, dialing, tls = o.tls, server, session = out->handshake.session](
                               Clock::time_point deadline, std::string* why) -> std::unique_ptr<Transport> {
    DialOptions d = dialing;
    d.total = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::unique_ptr<TlsTransport> secure;
    DialSetup tls_setup = [&](int nfd, Clock::time_point until, std::string* e) {
      TlsFailure failure;
      secure = tls_connect(tls, nfd, false, addr.host, kTlsResume, session, server, until, e, &failure);
      if (secure) return Attempt::kDone;
      return failure == TlsFailure::kClosed ? Attempt::kRetry : Attempt::kGiveUp;
    };
    int nfd = proto::dial(addr, d, tls ? tls_setup : DialSetup(), why);
    if (nfd < 0) return nullptr;
    set_liveness(nfd);
    if (!secure) return socket_transport(nfd);
    secure->own_fd();
    return secure;
  });
  std::shared_ptr<Transport> first = conn ? std::shared_ptr<Transport>(std::move(conn)) : nullptr;
  if (o.tls) {
    static_cast<TlsTransport*>(first.get())->own_fd();
  } else {
    first = socket_transport(fd);  // owning the socket from now on
  }
  if (!out->channel->start(first)) {
    *err = server + " closed the connection right after the handshake; see its log";
    out->channel.reset();
    return false;
  }
  return true;
}

void send_goodbye(Channel& channel, uint32_t request_id) {
  channel.resume_until(Clock::now() + kGoodbyeResume, "this process is exiting");
  // A connection that ended while this process was idle shows it only to a read (a write into it
  // still succeeds, and is lost): look without waiting first, so that the break is known and the
  // goodbye goes out on a resumed connection. What comes unasked for now is dropped: the process
  // is exiting.
  FrameHeader h{};
  for (int i = 0; i < 64; ++i) {
    if (channel.receive(&h, Wait::kPassive, std::chrono::milliseconds(0)) != Status::kOk) break;
    if (channel.read_payload(nullptr, h.length) != Status::kOk) break;
  }
  channel.send(kOpGoodbye, kNoReply, request_id, 0, nullptr, 0, false);
  channel.flush();  // repairs a broken connection first
  // A goodbye written into a connection that broke right after is lost, and the session would
  // keep its GPU state for the whole grace: wait (one round trip) for the server to acknowledge
  // it, resuming (and resending it) if the connection breaks meanwhile.
  channel.wait_acknowledged(kGoodbyeResume);
}

}  // namespace rgpu::proto
