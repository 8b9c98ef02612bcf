// The handshake that opens every connection (protocol/messages.h, step 1).
//
//   client → Hello      u32 magic, u16 version, u64 capabilities, str identity
//                       ("user@host pid=N prog=NAME"), 16 bytes token hint (zero without a
//                       token; below), 32 bytes client nonce
//   server → Challenge  u32 magic, u16 version, u64 capabilities, u8 token_required,
//                       32 bytes server nonce, 32 bytes server proof
//   client → Auth       32 bytes client proof
//   server → Welcome    16 bytes session id, u64 agreed capabilities
//          | Refused    str reason (then the server closes)
// A server without a token sends Welcome right behind Challenge, before Auth arrives (there is
// nothing to check), so the client's wait for it costs no round trip; the client sends Auth all
// the same. With kCapPushedSnapshot agreed, the device snapshot follows Welcome at once (a reply
// frame to kOpSnapshot with request id 0): with no token a process start takes two round trips
// before its first call (TCP's and Hello's), with one three.
//
// Proofs (the token never crosses the wire):
//   server proof = HMAC-SHA256(token, "rgpu-server-proof" || client nonce || server nonce)
//   client proof = HMAC-SHA256(token, "rgpu-client-proof" || server nonce || client nonce)
// Each side proves it holds the token over the other's fresh nonce, so neither proof can be
// replayed and a client with a token also knows it reached the right server.
// Over TLS (protocol/tls.h) both proofs end with the connection's TLS exporter value
// (label kTokenProofExporter, 32 bytes) after the nonces: a relay that terminates TLS, and so
// holds two TLS sessions with different exporter values, cannot pass a proof from one side to the
// other. Over plain TCP the proofs are as above. A server without a
// token sends token_required = 0 and zero proofs. A version mismatch is refused by the server
// with a reason naming both versions.
//
// Tenants: a server may hold several tokens (--token-file, one a line), each a tenant whose
// sessions and modules are kept apart from the others'. The server must prove the client's token
// before the client proves it, so Hello names which token without revealing it:
//   token hint = the first 16 bytes of HMAC-SHA256(token, "rgpu-token-hint" || client nonce)
// The server takes the tenant whose hint matches; with none matching (a wrong token, or a release
// that sent zeros here) it takes the first tenant, whose proofs then fail as a wrong token's do.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "protocol/transport.h"

namespace rgpu::proto {

using SessionId = std::array<uint8_t, 16>;

struct ClientHandshakeResult {
  SessionId session{};
  uint64_t capabilities = 0;
  // On failure: the server closed the connection mid-way (it may be restarting: worth another
  // attempt), as opposed to an answer (a refusal, a wrong proof) that another attempt would repeat.
  bool closed = false;
};

// Runs the client side on a connected stream (a socket, or a TLS stream), asking for
// `capabilities`, waiting for each answer until `deadline` at most (max: as the stream waits). On
// failure returns false with *err a sentence for the user (e.g. that the server refused the token
// and what to do).
bool client_handshake(Transport& t, const std::string& token, const std::string& identity,
                      const std::string& server_name, ClientHandshakeResult* out, std::string* err,
                      uint64_t capabilities = kOurCapabilities, Clock::time_point deadline = Clock::time_point::max());
// The same on a socket (which stays the caller's).
bool client_handshake(int fd, const std::string& token, const std::string& identity, const std::string& server_name,
                      ClientHandshakeResult* out, std::string* err, uint64_t capabilities = kOurCapabilities);

struct ServerHandshakeResult {
  SessionId session{};
  uint64_t capabilities = 0;
  std::string identity;
  // The tenant whose token the client proved (--token-file's NAME; "" with one unnamed token or
  // none). Sessions, modules and quotas are kept apart per tenant.
  std::string tenant;
  // Which of ServerHandshake::tenants the client proved (a tenant may have several tokens; the
  // session secret mixes the one proved). 0 without tokens.
  size_t token_index = 0;
  // On failure: the peer closed before sending anything (a port check, such as rgpu-run's).
  bool said_nothing = false;
  // On failure: the client's proof did not match its tenant's token (rate-limited per address).
  bool wrong_token = false;
  // On failure: the client closed the connection after its Hello, before its proof (a client with
  // another token does: it checks the server's proof first and gives up).
  bool client_closed = false;
  // On "failure" with allow_resume: the first frame was kOpResume (a client resuming a session
  // whose connection broke, protocol/channel.h), not Hello; its payload. No handshake ran.
  bool resume = false;
  std::vector<uint8_t> resume_payload;
  // On failure: the first bytes were a TLS preamble (protocol/messages.h) and this server speaks
  // no TLS; the client has been refused with a reason that says so.
  bool tls_preamble = false;
  // The TLS stream the handshake ran on (protocol/tls.h), which the session must run on too;
  // nullptr on plain TCP (the session takes the socket). Set by the accept loop.
  std::shared_ptr<Transport> transport;
};

// Runs after Welcome is written, with the agreed capabilities: what the server sends unasked
// (kCapPushedSnapshot). False when the connection is gone.
using Welcomed = std::function<bool(Transport& t, uint64_t agreed)>;

// A token clients may prove, and the tenant it makes them ("" for an unnamed token).
struct Tenant {
  std::string name;
  std::string token;
};
// Runs once the client is known (its proof checked, or at once without a token), before Welcome:
// false refuses it with *reason (e.g. the server is at --max-sessions).
using Admit = std::function<bool(const ServerHandshakeResult& so_far, std::string* reason)>;

struct ServerHandshake {
  std::vector<Tenant> tenants;  // empty: no token
  uint64_t capabilities = kOurCapabilities;
  Welcomed welcomed;
  Admit admit;
  // Optional: runs when the client's proof failed, before the refusal is sent, so that a count of
  // failures (the accept loop's rate limit) has it before the client can try again.
  std::function<void()> on_wrong_token;
  bool allow_resume = false;  // a first frame kOpResume returns false with out->resume set
  Clock::time_point deadline = Clock::time_point::max();  // each read waits until then at most
};
// Runs the server side as `how` says. On failure returns false with *err saying why (for the
// server's log); the client has already been sent a Refused message where one applies.
// A first message that is a TLS preamble (a tls:// client at a server without TLS) is refused with
// a reason that says to drop tls:// (out->tls_preamble).
bool server_handshake(Transport& t, const ServerHandshake& how, ServerHandshakeResult* out, std::string* err);
bool server_handshake(int fd, const ServerHandshake& how, ServerHandshakeResult* out, std::string* err);

// The same with one token (or none), offering `capabilities`.
bool server_handshake(Transport& t, const std::string& token, ServerHandshakeResult* out, std::string* err,
                      uint64_t capabilities = kOurCapabilities, const Welcomed& welcomed = nullptr,
                      bool allow_resume = false, Clock::time_point deadline = Clock::time_point::max());
// The same on a socket (which stays the caller's).
bool server_handshake(int fd, const std::string& token, ServerHandshakeResult* out, std::string* err,
                      uint64_t capabilities = kOurCapabilities, const Welcomed& welcomed = nullptr,
                      bool allow_resume = false);
// Tells a peer no (kOpRefused with the reason), as the handshake does.
void refuse(Transport& t, const std::string& reason);
void refuse(int fd, const std::string& reason);

}  // namespace rgpu::proto
