// Fuzz target for the handshake (protocol/handshake.h): both sides read their peer's messages
// from the network before anything is authenticated. The first input byte picks the side (bit 0:
// client_handshake instead of server_handshake), whether this side holds a token (bit 1) and, for
// the server, the accept loop's form (bit 2: two tenants, an admission check, resumes); the
// rest is everything the peer "sent", then the end of the stream (tests/fuzz/scripted_transport.h:
// what the side under test writes is dropped), so each run ends at the end of the bytes at the
// latest and must return true or false, never crash or hang. Without a token any 32-byte Auth
// passes, so the fuzzer reaches Welcome on both sides.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"
#include "protocol/messages.h"
#include "tests/fuzz/scripted_transport.h"

namespace {

// The handshake's messages are at most kMaxHandshakePayload each: a few of them is all a peer
// can send before the handshake ends.
constexpr size_t kMaxInput = 64 << 10;

std::vector<uint8_t> frame(uint16_t op, const std::vector<uint8_t>& payload) {
  rgpu::proto::FrameHeader h = rgpu::proto::make_header(op, 0, 0, 0, payload.size());
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(&h), reinterpret_cast<uint8_t*>(&h) + sizeof h);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const bool client = mode & 1;
  const std::string token = (mode & 2) ? "s3cret" : "";
  if (--size > kMaxInput) size = kMaxInput;
  ++data;
  rgpu::fuzz::ScriptedTransport peer(data, size);
  std::string err;
  bool ok;
  if (client) {
    rgpu::proto::ClientHandshakeResult r;
    ok = rgpu::proto::client_handshake(peer, token, "fuzz@host pid=1 prog=fuzz", "fuzz-server", &r, &err);
  } else if (mode & 4) {
    // The accept loop's server: tenants (each token's hint picks one), an admission check, and a
    // first frame kOpResume handed back undecoded.
    rgpu::proto::ServerHandshake how;
    how.tenants = {{"alice", "s3cret"}, {"bob", "other"}};
    how.allow_resume = true;
    how.admit = [](const rgpu::proto::ServerHandshakeResult& so_far, std::string* reason) {
      if (so_far.identity.find('!') == std::string::npos) return true;
      *reason = "the fuzz server is full";
      return false;
    };
    rgpu::proto::ServerHandshakeResult r;
    ok = rgpu::proto::server_handshake(peer, how, &r, &err);
    if (ok && (r.identity.size() > 512 || (r.tenant != "alice" && r.tenant != "bob"))) std::abort();
    if (r.resume && (ok || r.resume_payload.size() > rgpu::proto::kMaxHandshakePayload)) std::abort();
    if (r.resume) return 0;  // the session directory's to decode (channel_fuzz: read_resume_hello)
  } else {
    rgpu::proto::ServerHandshakeResult r;
    ok = rgpu::proto::server_handshake(peer, token, &r, &err);
    if (ok && r.identity.size() > 512) std::abort();
  }
  if (!ok && err.empty()) std::abort();  // every failure says why
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
  seed(4, {frame(kOpHello, hello.buf()), frame(kOpAuth, auth)});
  for (uint8_t tok : {0, 2}) {
    seed(tok, {frame(kOpHello, hello.buf()), frame(kOpAuth, auth)});
    seed(tok, {frame(kOpHello, hello.buf())});
    seed(1 | tok, {frame(kOpChallenge, challenge.buf()), frame(kOpWelcome, welcome.buf())});
    seed(1 | tok, {frame(kOpChallenge, challenge.buf()), frame(kOpRefused, refused.buf())});
    seed(1 | tok, {frame(kOpRefused, refused.buf())});
  }
}
