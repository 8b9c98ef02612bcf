// Implementation of protocol/handshake.h.
#include "protocol/handshake.h"

#include <cstring>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/tls.h"

namespace rgpu::proto {
namespace {

using Nonce = std::array<uint8_t, 32>;

// The TLS exporter value that binds the proofs to this connection (handshake.h), when it is TLS.
struct Binding {
  uint8_t value[32];
  bool tls = false;
};

Binding binding_of(Transport& t) {
  Binding b;
  b.tls = t.export_key(kTokenProofExporter, b.value);
  return b;
}

crypto::Digest proof(const std::string& token, const char* label, const Nonce& first, const Nonce& second,
                     const Binding& binding) {
  std::vector<uint8_t> msg(label, label + std::strlen(label));
  msg.insert(msg.end(), first.begin(), first.end());
  msg.insert(msg.end(), second.begin(), second.end());
  if (binding.tls) msg.insert(msg.end(), binding.value, binding.value + sizeof binding.value);
  return crypto::hmac_sha256(token, msg.data(), msg.size());
}

// Hello's token hint (handshake.h, "Tenants").
std::array<uint8_t, 16> token_hint(const std::string& token, const Nonce& client_nonce) {
  std::array<uint8_t, 16> hint{};
  if (token.empty()) return hint;
  std::vector<uint8_t> msg{'r', 'g', 'p', 'u', '-', 't', 'o', 'k', 'e', 'n', '-', 'h', 'i', 'n', 't'};
  msg.insert(msg.end(), client_nonce.begin(), client_nonce.end());
  crypto::Digest d = crypto::hmac_sha256(token, msg.data(), msg.size());
  std::memcpy(hint.data(), d.data(), hint.size());
  return hint;
}

bool send(Transport& t, uint16_t op, Writer& w) { return write_frame(t, op, 0, 0, 0, w.buf().data(), w.size()); }

// Reads one handshake message of the expected op (or Refused, whose reason goes to *err).
// *closed (when given) tells a peer that closed before the message began.
bool expect(Transport& t, uint16_t op, std::vector<uint8_t>* payload, std::string* err, const std::string& peer,
            Clock::time_point deadline, bool* closed = nullptr, bool* resume = nullptr, bool* tls_preamble = nullptr) {
  FrameHeader h{};
  std::string why;
  ReadResult rr = read_frame(t, kMaxHandshakePayload, &h, payload, &why, deadline);
  if (tls_preamble && rr == ReadResult::kError && h.length == kTlsPreambleMagic) {
    *tls_preamble = true;
    *err = peer + " asked for TLS (tls://), which this server does not speak";
    return false;
  }
  if (rr == ReadResult::kClosed) {
    *err = peer + " closed the connection during the handshake";
    if (closed) *closed = true;
    return false;
  }
  if (rr != ReadResult::kOk) {
    *err = "handshake with " + peer + " failed: " + why;
    return false;
  }
  if (h.op == kOpRefused) {
    Reader r(payload->data(), payload->size());
    std::string reason = log::printable(r.str(kMaxHandshakePayload));  // the server's word, shown to the user
    *err = peer + " refused the connection: " + (r.ok() ? reason : std::string("(no reason given)"));
    return false;
  }
  if (resume && h.op == kOpResume) {
    *resume = true;
    return false;
  }
  if (h.op != op) {
    *err = log::format("handshake with %s failed: expected message %u, got %u (is this an rgpu peer?)", peer.c_str(),
                       op, h.op);
    return false;
  }
  return true;
}

}  // namespace

void refuse(Transport& t, const std::string& reason) {
  Writer w;
  w.put_str(reason);
  send(t, kOpRefused, w);
}

void refuse(int fd, const std::string& reason) {
  auto t = socket_transport(fd, false);
  refuse(*t, reason);
}

bool client_handshake(int fd, const std::string& token, const std::string& identity, const std::string& server_name,
                      ClientHandshakeResult* out, std::string* err, uint64_t capabilities) {
  auto t = socket_transport(fd, false);
  return client_handshake(*t, token, identity, server_name, out, err, capabilities);
}

bool server_handshake(int fd, const std::string& token, ServerHandshakeResult* out, std::string* err,
                      uint64_t capabilities, const Welcomed& welcomed, bool allow_resume) {
  auto t = socket_transport(fd, false);
  return server_handshake(*t, token, out, err, capabilities, welcomed, allow_resume);
}

bool server_handshake(int fd, const ServerHandshake& how, ServerHandshakeResult* out, std::string* err) {
  auto t = socket_transport(fd, false);
  return server_handshake(*t, how, out, err);
}

bool server_handshake(Transport& t, const std::string& token, ServerHandshakeResult* out, std::string* err,
                      uint64_t capabilities, const Welcomed& welcomed, bool allow_resume, Clock::time_point deadline) {
  ServerHandshake how;
  if (!token.empty()) how.tenants.push_back({"", token});
  how.capabilities = capabilities;
  how.welcomed = welcomed;
  how.allow_resume = allow_resume;
  how.deadline = deadline;
  return server_handshake(t, how, out, err);
}

bool client_handshake(Transport& t, const std::string& token, const std::string& identity,
                      const std::string& server_name, ClientHandshakeResult* out, std::string* err,
                      uint64_t capabilities, Clock::time_point deadline) {
  const Binding binding = binding_of(t);
  Nonce client_nonce;
  crypto::random_bytes(client_nonce.data(), client_nonce.size());
  Writer hello;
  hello.put_u32(kMagic);
  hello.put_u16(kProtocolVersion);
  hello.put_u64(capabilities);
  hello.put_str(identity.substr(0, 512));
  const std::array<uint8_t, 16> hint = token_hint(token, client_nonce);
  hello.append(hint.data(), hint.size());
  hello.append(client_nonce.data(), client_nonce.size());
  if (!send(t, kOpHello, hello)) {
    out->closed = true;
    *err = "cannot talk to rgpu-server at " + server_name + ": the connection closed while sending the greeting";
    return false;
  }

  std::vector<uint8_t> payload;
  if (!expect(t, kOpChallenge, &payload, err, "rgpu-server at " + server_name, deadline, &out->closed)) return false;
  Reader r(payload.data(), payload.size());
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  uint64_t caps = r.u64();
  bool token_required = r.u8() != 0;
  Nonce server_nonce, server_proof;
  r.take(server_nonce.data(), server_nonce.size());
  r.take(server_proof.data(), server_proof.size());
  if (!r.ok() || magic != kMagic) {
    *err = "the peer at " + server_name + " does not speak the rgpu protocol; is RGPU_SERVER pointing at rgpu-server?";
    return false;
  }
  if (version != kProtocolVersion) {
    *err = log::format("rgpu-server at %s speaks protocol version %u and this client %u; use the same rgpu release on "
                       "both sides",
                       server_name.c_str(), version, kProtocolVersion);
    return false;
  }
  if (!token_required && !token.empty()) {
    // Only a server holding the token can prove it: one that asks for none may be an impostor,
    // to whom this program would hand its data and code.
    *err = "rgpu-server at " + server_name +
           " does not ask for a token, but RGPU_TOKEN is set, so it cannot prove it holds the token: it may not be the "
           "server you mean. Give that server the token (--token-file), or unset RGPU_TOKEN to use a server without one";
    return false;
  }
  if (token_required && token.empty()) {
    *err = "rgpu-server at " + server_name + " requires a token; set RGPU_TOKEN to the server's token";
    return false;
  }
  if (token_required) {
    crypto::Digest expected = proof(token, "rgpu-server-proof", client_nonce, server_nonce, binding);
    if (!crypto::equal_constant_time(expected.data(), server_proof.data(), expected.size())) {
      *err = "rgpu-server at " + server_name +
             " does not hold the same token as RGPU_TOKEN (its proof did not match); check the token on both sides" +
             (binding.tls ? ". Over TLS the proof is bound to the TLS connection: a proxy that terminates TLS "
                            "between here and the server also makes it fail"
                          : "");
      return false;
    }
  }
  Writer auth;
  crypto::Digest p{};
  if (token_required) p = proof(token, "rgpu-client-proof", server_nonce, client_nonce, binding);
  auth.append(p.data(), p.size());
  if (!send(t, kOpAuth, auth)) {
    out->closed = true;
    *err = "rgpu-server at " + server_name + " closed the connection during the handshake";
    return false;
  }
  if (!expect(t, kOpWelcome, &payload, err, "rgpu-server at " + server_name, deadline, &out->closed)) return false;
  Reader w(payload.data(), payload.size());
  w.take(out->session.data(), out->session.size());
  out->capabilities = w.u64() & caps;
  if (!w.ok()) {
    *err = "rgpu-server at " + server_name + " sent a malformed welcome";
    return false;
  }
  return true;
}

bool server_handshake(Transport& t, const ServerHandshake& how, ServerHandshakeResult* out, std::string* err) {
  const uint64_t capabilities = how.capabilities;
  const Welcomed& welcomed = how.welcomed;
  const bool allow_resume = how.allow_resume;
  const Clock::time_point deadline = how.deadline;
  const Binding binding = binding_of(t);
  std::vector<uint8_t> payload;
  if (!expect(t, kOpHello, &payload, err, "client", deadline, &out->said_nothing,
              allow_resume ? &out->resume : nullptr, binding.tls ? nullptr : &out->tls_preamble)) {
    if (out->resume) out->resume_payload = std::move(payload);
    if (out->tls_preamble)
      refuse(t, "this server does not speak TLS; use host:port without tls:// (in RGPU_SERVER or RGPU_OPSERVER)");
    return false;
  }
  Reader r(payload.data(), payload.size());
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  uint64_t caps = r.u64();
  std::string identity = r.str(512);
  std::array<uint8_t, 16> hint{};
  Nonce client_nonce;
  r.take(hint.data(), hint.size());
  r.take(client_nonce.data(), client_nonce.size());
  if (!r.ok() || magic != kMagic) {
    *err = "the client's greeting is not an rgpu Hello (bad magic or truncated)";
    return false;
  }
  // The identity is the client's word, shown in logs and the session list.
  identity = log::printable(std::move(identity));
  out->identity = identity;
  if (version != kProtocolVersion) {
    std::string reason = log::format(
        "protocol version %u is not supported by this server (it speaks %u); use the same rgpu release on both sides",
        version, kProtocolVersion);
    refuse(t, reason);
    *err = "refused " + identity + ": " + reason;
    return false;
  }

  // The tenant whose hint matches, else the first (handshake.h, "Tenants"); every hint is
  // computed, so the time taken does not say which one matched.
  const Tenant* tenant = how.tenants.empty() ? nullptr : &how.tenants[0];
  bool matched = false;
  for (const Tenant& candidate : how.tenants) {
    const std::array<uint8_t, 16> h = token_hint(candidate.token, client_nonce);
    if (crypto::equal_constant_time(h.data(), hint.data(), h.size()) && !matched) {
      tenant = &candidate;
      matched = true;
    }
  }
  const std::string token = tenant ? tenant->token : std::string();
  if (tenant) {
    out->tenant = tenant->name;
    out->token_index = static_cast<size_t>(tenant - how.tenants.data());
  }
  std::string refusal;
  auto admitted = [&] {
    if (!how.admit || how.admit(*out, &refusal)) return true;
    refuse(t, refusal);
    *err = "refused " + identity + ": " + refusal;
    return false;
  };

  Nonce server_nonce;
  crypto::random_bytes(server_nonce.data(), server_nonce.size());
  Writer ch;
  ch.put_u32(kMagic);
  ch.put_u16(kProtocolVersion);
  ch.put_u64(capabilities);
  ch.put_u8(token.empty() ? 0 : 1);
  ch.append(server_nonce.data(), server_nonce.size());
  crypto::Digest sp{};
  if (!token.empty()) sp = proof(token, "rgpu-server-proof", client_nonce, server_nonce, binding);
  ch.append(sp.data(), sp.size());
  crypto::random_bytes(out->session.data(), out->session.size());
  out->capabilities = caps & capabilities;
  Writer wel;
  wel.append(out->session.data(), out->session.size());
  wel.put_u64(out->capabilities);
  // Without a token nothing in Auth can change the answer, so Welcome goes right behind
  // Challenge: the client finds it waiting when it has sent Auth, one round trip fewer per
  // connection (30 ms of every process start at a 30 ms round trip). With a token, Welcome waits
  // for the client's proof.
  const bool welcome_early = token.empty();
  auto welcome = [&] { return send(t, kOpWelcome, wel) && (!welcomed || welcomed(t, out->capabilities)); };
  // Refused before the Challenge: the client reads the refusal where the Challenge would be.
  if (welcome_early && !admitted()) return false;
  if (!send(t, kOpChallenge, ch) || (welcome_early && !welcome())) {
    *err = "client " + identity + " went away during the handshake";
    return false;
  }

  if (!expect(t, kOpAuth, &payload, err, "client " + identity, deadline, &out->client_closed)) return false;
  Reader a(payload.data(), payload.size());
  crypto::Digest cp{};
  a.take(cp.data(), cp.size());
  if (!a.ok()) {
    *err = "client " + identity + " sent a truncated Auth message";
    return false;
  }
  if (!token.empty()) {
    crypto::Digest expected = proof(token, "rgpu-client-proof", server_nonce, client_nonce, binding);
    if (!crypto::equal_constant_time(expected.data(), cp.data(), cp.size())) {
      if (how.on_wrong_token) how.on_wrong_token();
      refuse(t, "the token was refused: RGPU_TOKEN does not match the server's token");
      *err = "refused " + identity + ": wrong token" +
             (binding.tls ? " (or a proxy that terminates TLS relayed the proof: it is bound to the TLS connection)"
                          : "");
      out->wrong_token = true;
      return false;
    }
  }
  if (!welcome_early && !admitted()) return false;
  if (!welcome_early && !welcome()) {
    *err = "client " + identity + " went away during the handshake";
    return false;
  }
  return true;
}

}  // namespace rgpu::proto
