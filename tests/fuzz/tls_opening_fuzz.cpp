// Fuzz target for what a TLS connection's ends read before anything is authenticated
// (protocol/tls.h). The first input byte picks the side:
//   bit 0 clear: a TLS listener (protocol/accept_loop.cpp): read_tls_opening (the clear preamble,
//     its magic first), then, for a new session, tls_accept: OpenSSL reads the ClientHello and
//     what follows through our socket glue, with the server's certificate made once here;
//   bit 0 set: a TLS client (tls_connect, pinned to a fingerprint): its first read tells a TLS
//     record from a clear refusal (kOpRefused and its reason, read before TLS), then OpenSSL reads
//     the server's first flight.
// The rest is the peer's bytes, written into a socket pair whose writing side is then shut, so
// every read ends at their end. Each run must fail with a reason, or (the listener's opening)
// give a preamble of a known kind; none may finish a handshake: the bytes cannot hold the peer's
// keys.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/tls.h"

namespace {

using namespace rgpu;
using namespace rgpu::proto;

std::shared_ptr<TlsContext> g_server, g_client;
constexpr size_t kMaxInput = 64 << 10;  // within the socket buffer: written before the side runs

// The peer's bytes on a socket pair: returns the side under test's end (the other is shut for
// writing, so reads end at the bytes' end; what the side writes waits there unread).
bool pair_with(const uint8_t* data, size_t size, int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
  int big = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  if (size && !net::write_full(sv[1], data, size)) return false;
  shutdown(sv[1], SHUT_WR);
  return true;
}

// What the real client sends first (the preamble, then its ClientHello), and what the real
// server answers it with: the seeds.
std::vector<uint8_t> read_all(int fd) {
  std::vector<uint8_t> out;
  uint8_t buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) out.insert(out.end(), buf, buf + n);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  signal(SIGPIPE, SIG_IGN);
  log::set_level(log::kError);
  char dir[] = "/tmp/rgpu-tls-fuzz-XXXXXX";
  std::string cert, key, err;
  if (!mkdtemp(dir) || !ensure_auto_certificate(dir, &cert, &key, &err) ||
      !(g_server = tls_server_context(TlsServerConfig{cert, key, ""}, &err))) {
    std::fprintf(stderr, "tls_opening_fuzz: cannot make the server's certificate: %s\n", err.c_str());
    std::abort();
  }
  TlsClientConfig c;
  c.fingerprint = tls_fingerprint(*g_server);
  if (!(g_client = tls_client_context(c, &err))) {
    std::fprintf(stderr, "tls_opening_fuzz: cannot make the client's context: %s\n", err.c_str());
    std::abort();
  }
  unlink(cert.c_str());
  unlink(key.c_str());
  rmdir(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool client = data[0] & 1;
  ++data;
  if (--size > kMaxInput) size = kMaxInput;
  int sv[2];
  if (!pair_with(data, size, sv)) std::abort();
  const auto deadline = Clock::now() + std::chrono::seconds(5);  // the bytes' end comes first
  std::string err;
  if (!client) {
    TlsPreamble pre;
    const TlsOpening o = read_tls_opening(sv[0], &pre, deadline);
    if (o == TlsOpening::kOk && pre.kind != kTlsNew && pre.kind != kTlsResume) std::abort();
    if (o == TlsOpening::kOk && pre.kind == kTlsNew) {
      std::unique_ptr<TlsTransport> t = tls_accept(g_server, sv[0], false, deadline, &err);
      if (t || err.empty()) std::abort();
    }
  } else {
    TlsFailure failure = TlsFailure::kNone;
    std::unique_ptr<TlsTransport> t =
        tls_connect(g_client, sv[0], false, "127.0.0.1", kTlsNew, SessionId{}, "fuzz server", deadline, &err, &failure);
    if (t || err.empty() || failure == TlsFailure::kNone) std::abort();
  }
  close(sv[0]);
  close(sv[1]);
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  if (!g_server) LLVMFuzzerInitialize(nullptr, nullptr);
  // The real client's first flight: its preamble and ClientHello, sent to a peer that says nothing.
  int c[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c) != 0) return;
  shutdown(c[1], SHUT_WR);
  std::string err;
  TlsFailure failure;
  tls_connect(g_client, c[0], false, "127.0.0.1", kTlsNew, SessionId{}, "seed server", Clock::now() + std::chrono::seconds(2),
              &err, &failure);
  std::vector<uint8_t> hello = read_all(c[1]);
  close(c[0]);
  close(c[1]);
  std::vector<uint8_t> s{0};
  s.insert(s.end(), hello.begin(), hello.end());
  out->push_back(s);
  // The real server's answer to it.
  int sv[2];
  if (hello.size() > kTlsPreambleSize && pair_with(hello.data(), hello.size(), sv)) {
    TlsPreamble pre;
    if (read_tls_opening(sv[0], &pre, Clock::now() + std::chrono::seconds(2)) == TlsOpening::kOk)
      tls_accept(g_server, sv[0], false, Clock::now() + std::chrono::seconds(2), &err);
    std::vector<uint8_t> answer = read_all(sv[1]);
    std::vector<uint8_t> a{1};
    a.insert(a.end(), answer.begin(), answer.end());
    out->push_back(a);
    close(sv[0]);
    close(sv[1]);
  }
  // A clear refusal before TLS (a full server), and a resume's preamble.
  Writer reason;
  reason.put_str("rgpu-server at 10.0.0.2:9713 has 64 sessions, its --max-sessions; try later");
  FrameHeader h = make_header(kOpRefused, 0, 0, 0, reason.size());
  std::vector<uint8_t> refused{1};
  refused.insert(refused.end(), reinterpret_cast<uint8_t*>(&h), reinterpret_cast<uint8_t*>(&h) + sizeof h);
  refused.insert(refused.end(), reason.buf().begin(), reason.buf().end());
  out->push_back(refused);
  std::vector<uint8_t> resume(1 + kTlsPreambleSize, 0);
  std::memcpy(resume.data() + 1, &kTlsPreambleMagic, 4);
  resume[5] = kTlsResume;
  out->push_back(resume);
}
