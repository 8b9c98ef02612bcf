// Fuzz target for the handshake (protocol/handshake.h): both sides read their peer's messages
// from the network before anything is authenticated. The first input byte picks the side (bit 0:
// client_handshake instead of server_handshake) and whether this side holds a token (bit 1); the
// rest is everything the peer "sent": it is written into a socket pair whose writing side is then
// closed, so each run ends on EOF at the latest and must return true or false, never crash or hang.
// Without a token any 32-byte Auth passes, so the fuzzer reaches Welcome on both sides.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"
#include "protocol/messages.h"

namespace {

// The peer's bytes must fit the socket buffer: they are written before the side under test runs.
constexpr size_t kMaxInput = 64 << 10;

std::vector<uint8_t> frame(uint16_t op, const std::vector<uint8_t>& payload) {
  rgpu::proto::FrameHeader h = rgpu::proto::make_header(op, 0, 0, 0, payload.size());
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(&h), reinterpret_cast<uint8_t*>(&h) + sizeof h);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  signal(SIGPIPE, SIG_IGN);  // the side under test may write to a peer that is gone
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool client = data[0] & 1;
  const std::string token = (data[0] & 2) ? "s3cret" : "";
  if (--size > kMaxInput) size = kMaxInput;
  ++data;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  int big = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  if (size && !rgpu::net::write_full(sv[1], data, size)) std::abort();
  shutdown(sv[1], SHUT_WR);
  rgpu::net::set_recv_timeout(sv[0], 5);  // belt and braces: EOF ends every read anyway
  std::string err;
  bool ok;
  if (client) {
    rgpu::proto::ClientHandshakeResult r;
    ok = rgpu::proto::client_handshake(sv[0], token, "fuzz@host pid=1 prog=fuzz", "fuzz-server", &r, &err);
  } else {
    rgpu::proto::ServerHandshakeResult r;
    ok = rgpu::proto::server_handshake(sv[0], token, &r, &err);
    if (ok && r.identity.size() > 512) std::abort();
  }
  if (!ok && err.empty()) std::abort();  // every failure says why
  close(sv[0]);
  close(sv[1]);
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  using namespace rgpu::proto;
  rgpu::Writer hello;
  hello.put_u32(kMagic);
  hello.put_u16(kProtocolVersion);
  hello.put_u64(kOurCapabilities);
  hello.put_str("seed@host pid=1 prog=seed");
  std::vector<uint8_t> zeros(48, 0);
  hello.append(zeros.data(), zeros.size());  // session id, client nonce
  std::vector<uint8_t> auth(32, 7);
  rgpu::Writer challenge;
  challenge.put_u32(kMagic);
  challenge.put_u16(kProtocolVersion);
  challenge.put_u64(kOurCapabilities);
  challenge.put_u8(0);
  std::vector<uint8_t> nonce_and_proof(64, 0);
  challenge.append(nonce_and_proof.data(), nonce_and_proof.size());
  rgpu::Writer welcome;
  std::vector<uint8_t> session(16, 9);
  welcome.append(session.data(), session.size());
  welcome.put_u64(kOurCapabilities);
  rgpu::Writer refused;
  refused.put_str("the token was refused");

  auto seed = [&](uint8_t mode, std::vector<std::vector<uint8_t>> frames) {
    std::vector<uint8_t> s{mode};
    for (auto& f : frames) s.insert(s.end(), f.begin(), f.end());
    out->push_back(std::move(s));
  };
  for (uint8_t tok : {0, 2}) {
    seed(tok, {frame(kOpHello, hello.buf()), frame(kOpAuth, auth)});
    seed(tok, {frame(kOpHello, hello.buf())});
    seed(1 | tok, {frame(kOpChallenge, challenge.buf()), frame(kOpWelcome, welcome.buf())});
    seed(1 | tok, {frame(kOpChallenge, challenge.buf()), frame(kOpRefused, refused.buf())});
    seed(1 | tok, {frame(kOpRefused, refused.buf())});
  }
}
