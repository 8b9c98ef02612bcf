// TLS 1.3 for rgpu connections (issue 17), with OpenSSL: the server's and the client's contexts,
// the TLS byte stream as a Transport (so the handshake and the channel run over it unchanged),
// the clear preamble that says which process terminates a connection (protocol/messages.h,
// TlsPreamble), certificate fingerprints, and the self-signed certificate `--tls auto` makes.
//
// Trust, on the client (RGPU_SERVER=tls://host:port):
//   RGPU_TLS_FINGERPRINT=sha256:HEX  the server's certificate must have this SHA-256 fingerprint
//                                    (of its DER); nothing else is checked (a pin replaces a CA)
//   RGPU_TLS_CA=FILE                 the chain must verify against these CA certificates, and the
//                                    certificate must name the host dialled (DNS name or IP)
//   neither                          the system's CA store, and the name as above
// A certificate that does not verify is refused with its fingerprint and how to pin it. A client
// certificate (RGPU_TLS_CERT, RGPU_TLS_KEY) is sent when the server asks (--tls-client-ca).
//
// The stream: OpenSSL runs the handshake on a non-blocking socket (through a socket BIO of our own
// that sends with MSG_NOSIGNAL, so a peer gone mid-write is an error, never SIGPIPE in a client's
// process); the records after it are sealed and opened by protocol/tls_records.h, the writing
// and the reading side each with its own key, so one reader and one writer never wait for each
// other.
//
// Bulk is pipelined (issue 17): a write_held() of kSealAhead bytes or more goes to the
// transport's sealing thread, which encrypts and sends it while the caller copies the next chunk
// into the channel; the writes behind it queue there too, so the order stays. A small write with
// nothing queued is encrypted and sent by its caller, as before: a small call pays no thread hop.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/handshake.h"
#include "protocol/transport.h"

namespace rgpu::proto {

// An SSL_CTX with what verification needs beside it. Shared by every connection of a process.
class TlsContext;

struct TlsServerConfig {
  std::string cert_file;       // PEM: the certificate (and its chain)
  std::string key_file;        // PEM: its private key
  std::string client_ca_file;  // PEM: when given, clients must present a certificate it signed
};

struct TlsClientConfig {
  std::string ca_file;      // RGPU_TLS_CA
  std::string fingerprint;  // RGPU_TLS_FINGERPRINT, "sha256:HEX" (colons and case are ignored)
  std::string cert_file;    // RGPU_TLS_CERT
  std::string key_file;     // RGPU_TLS_KEY
  // RGPU_TLS_* from the environment (common/env.h).
  static TlsClientConfig from_env();
};

// nullptr with *err (naming the file and the cause, and what to do) when a file cannot be used.
std::shared_ptr<TlsContext> tls_server_context(const TlsServerConfig& config, std::string* err);
std::shared_ptr<TlsContext> tls_client_context(const TlsClientConfig& config, std::string* err);
// The server certificate's fingerprint ("sha256:HEX"), printed at start for clients to pin.
std::string tls_fingerprint(const TlsContext& server);

// The label of the exporter value mixed into the handshake's token proofs (protocol/handshake.h).
inline constexpr const char* kTokenProofExporter = "EXPORTER-rgpu-token-proof";
// ... and into the channel's resume proofs (protocol/channel.h).
inline constexpr const char* kResumeProofExporter = "EXPORTER-rgpu-resume-proof";

// A TLS connection, after its handshake.
class TlsTransport : public Transport {
 public:
  // Writes handed to the sealing thread: at least this many bytes, or any write while one is queued.
  static constexpr size_t kSealAhead = 128 << 10;

  ~TlsTransport() override;
  bool write(const iovec* iov, int count) override;
  bool write_held(const iovec* iov, int count, std::shared_ptr<const void> keep) override;
  ssize_t read_some(void* buf, size_t n, std::chrono::milliseconds timeout) override;
  void shutdown() override;
  bool export_key(const char* label, uint8_t out[32]) override;
  std::string failure() const override;

  // The peer's certificate's fingerprint ("" when it sent none).
  std::string peer_fingerprint() const;
  // A transport made over a borrowed socket (owns_fd false) takes it from now on: it closes it.
  void own_fd() { owns_fd_ = true; }
  // For tests: this side's key is updated after n records (protocol/tls_records.h kRecordsPerKey).
  void set_records_per_key(uint64_t n);

 private:
  friend struct TlsHandshake;
  TlsTransport() = default;
  // Sends sealed records, write_mu held. False when the socket failed or the transport shut.
  bool send_all(const std::vector<uint8_t>& bytes);
  // Seals and sends iov, write_mu held.
  bool write_now(const iovec* iov, int count);
  // The sealing thread: writes what write_held queued, in order, until shutdown.
  void seal_loop();
  struct State;
  std::unique_ptr<State> s_;
  bool owns_fd_ = false;
};

// How a TLS client's connect failed: kClosed, the connection closed mid-way (worth another
// attempt: the server may be restarting); kRefused, an answer another attempt would repeat (a
// certificate that does not verify, a refusal, a server without TLS).
enum class TlsFailure { kNone, kClosed, kRefused };

// Client: sends the preamble (kind kTlsNew, or kTlsResume with the session to resume) and runs
// the TLS handshake on fd, verifying the server as TlsClientConfig says for `host` (the name
// dialled). `server` names it in messages ("rgpu-server at 10.0.0.2:9713"). A clear kOpRefused in
// place of the ServerHello (a server without TLS, or one refusing before TLS) is reported with
// its reason. nullptr with *err and *failure when it failed (fd is then still the caller's).
std::unique_ptr<TlsTransport> tls_connect(const std::shared_ptr<TlsContext>& ctx, int fd, bool owns_fd,
                                          const std::string& host, uint8_t kind, const SessionId& session,
                                          const std::string& server, Clock::time_point deadline, std::string* err,
                                          TlsFailure* failure);
// Server: runs the TLS handshake on fd (its preamble already read). nullptr with *err (for the
// log) when it failed (fd is then still the caller's). ask_client_certificate false: no client
// certificate is asked for even where the context asks clients for one (--tls-client-ca): the
// copy links between servers, whose dialler proves itself with a ticket instead.
std::unique_ptr<TlsTransport> tls_accept(const std::shared_ptr<TlsContext>& ctx, int fd, bool owns_fd,
                                         Clock::time_point deadline, std::string* err,
                                         bool ask_client_certificate = true);

struct TlsPreamble {
  uint8_t kind = kTlsNew;
  SessionId session{};
};
// Reads the rest of a preamble whose 4 magic bytes have been read. False on a short or malformed one.
bool read_tls_preamble_rest(int fd, TlsPreamble* out, Clock::time_point deadline);
// What a TLS listener reads before TLS begins: the whole preamble, its magic first.
//   kOk         *out holds it
//   kClosed     the peer closed before sending a byte (a port check, such as rgpu-run's)
//   kNotTls     its first 4 bytes are not the magic, or never came (a client without tls://)
//   kMalformed  the magic, then a preamble cut short or malformed
enum class TlsOpening { kOk, kClosed, kNotTls, kMalformed };
TlsOpening read_tls_opening(int fd, TlsPreamble* out, Clock::time_point deadline);
// Decodes those 20 bytes: false for an unknown kind, reserved bytes that are not zero, or n != 20.
bool decode_tls_preamble_rest(const uint8_t* rest, size_t n, TlsPreamble* out);

// "sha256:" and the lowercase hex SHA-256 of a DER certificate.
std::string fingerprint_of_der(const uint8_t* der, size_t n);
// A fingerprint as the user wrote it ("sha256:AB:CD:...", any case) in the form above; "" when it
// is not a SHA-256 fingerprint.
std::string normalize_fingerprint(const std::string& s);
// The fingerprint of the first certificate in a PEM file ("" with *err when it has none).
std::string fingerprint_of_pem_file(const std::string& path, std::string* err);

// A certificate to make (for --tls auto, and for tests): an EC P-256 key and an X.509 v3
// certificate valid from `not_before` to `not_after` (offsets from now), naming `names` (DNS names
// or IP addresses) as subjectAltName, self-signed unless an issuer is given.
struct CertificateSpec {
  std::string common_name = "rgpu";
  std::vector<std::string> names;
  std::chrono::seconds not_before{-3600};
  std::chrono::seconds not_after{std::chrono::hours(24 * 3650)};
  bool ca = false;
  std::string issuer_cert_pem, issuer_key_pem;  // empty: self-signed
};
bool make_certificate(const CertificateSpec& spec, std::string* cert_pem, std::string* key_pem, std::string* err);

// --tls auto: <state_dir>/tls-cert.pem and tls-key.pem, made the first time (the key mode 0600),
// reused after, so the fingerprint clients pinned stays. False with *err naming the path.
bool ensure_auto_certificate(const std::string& state_dir, std::string* cert_file, std::string* key_file,
                             std::string* err);
// The state directory when none is given: $XDG_STATE_HOME/rgpu, else $HOME/.local/state/rgpu,
// else /var/lib/rgpu.
std::string default_state_dir();

}  // namespace rgpu::proto
