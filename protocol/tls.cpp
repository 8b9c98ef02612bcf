// Implementation of protocol/tls.h.
#include "protocol/tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/tls_records.h"

namespace rgpu::proto {

class TlsContext {
 public:
  ~TlsContext() {
    if (ctx) SSL_CTX_free(ctx);
  }
  SSL_CTX* ctx = nullptr;
  bool server = false;
  std::string pin;        // client: the normalized RGPU_TLS_FINGERPRINT ("": verify a chain)
  std::string own_print;  // server: its certificate's fingerprint
};

namespace {

// The last OpenSSL error as a sentence fragment ("" when there is none), clearing the queue.
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    // "error:0A000086:SSL routines::certificate verify failed": keep the words.
    std::string s = buf;
    size_t at = s.rfind(':');
    if (at != std::string::npos && at + 1 < s.size()) s = s.substr(at + 1);
    if (!out.empty()) out += "; ";
    out += s;
  }
  return out;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += k[p[i] >> 4];
    s += k[p[i] & 15];
  }
  return s;
}

std::string fingerprint_of(X509* cert) {
  if (!cert) return "";
  unsigned char* der = nullptr;
  int n = i2d_X509(cert, &der);
  if (n <= 0) return "";
  std::string out = fingerprint_of_der(der, static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

// ---- A socket BIO that never raises SIGPIPE ----

int bio_write(BIO* b, const char* data, int n) {
  BIO_clear_retry_flags(b);
  ssize_t r;
  do r = ::send(static_cast<int>(BIO_get_fd(b, nullptr)), data, static_cast<size_t>(n), MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
  return static_cast<int>(r);
}

// Set by tls_connect while OpenSSL writes the ClientHello: reads then wait (as if nothing had
// come), so that the server's first bytes are looked at before OpenSSL takes them (a refusal in
// clear can arrive before the ClientHello has gone out: the server answers the preamble).
thread_local bool t_hold_reads = false;

int bio_read(BIO* b, char* data, int n) {
  BIO_clear_retry_flags(b);
  if (t_hold_reads) {
    BIO_set_retry_read(b);
    return -1;
  }
  ssize_t r;
  do r = ::recv(static_cast<int>(BIO_get_fd(b, nullptr)), data, static_cast<size_t>(n), 0);
  while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
  return static_cast<int>(r);
}

BIO_METHOD* socket_method() {
  // The standard socket BIO's controls (get_fd, flush, ...) with our read and write.
  static BIO_METHOD* m = [] {
    BIO_METHOD* meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "rgpu socket");
    const BIO_METHOD* base = BIO_s_socket();
    BIO_meth_set_write(meth, bio_write);
    BIO_meth_set_read(meth, bio_read);
    BIO_meth_set_ctrl(meth, BIO_meth_get_ctrl(base));
    BIO_meth_set_create(meth, BIO_meth_get_create(base));
    BIO_meth_set_destroy(meth, BIO_meth_get_destroy(base));
    return meth;
  }();
  return m;
}

// Waits until fd is readable (or writable), at most until deadline. False on timeout.
bool wait_fd(int fd, bool for_write, Clock::time_point deadline) {
  for (;;) {
    int ms = -1;
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left < 0) return false;
      ms = left == 0 ? 0 : static_cast<int>(std::min<long long>(left + 1, INT32_MAX));
    }
    pollfd p{fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the caller's read or write see the error
  }
}

// What the client's verification saw (SSL ex data), for the message when it fails.
struct VerifySeen {
  std::string fingerprint;  // the server's leaf certificate
  std::string error;        // the first verification error
};
int g_verify_index = -1;

// The two application traffic secrets of a handshake, as OpenSSL's key log gives them (SSL ex
// data while the handshake runs): the records after it are rgpu's own (protocol/tls_records.h).
struct TrafficSecrets {
  uint8_t client[48], server[48];
  size_t client_len = 0, server_len = 0;
};
int g_secrets_index = -1;

int unhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// OpenSSL's key log callback: "LABEL <client random, hex> <secret, hex>".
void keylog(const SSL* ssl, const char* line) {
  auto* sec = static_cast<TrafficSecrets*>(SSL_get_ex_data(ssl, g_secrets_index));
  if (!sec) return;
  uint8_t* out;
  size_t* len;
  if (std::strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24) == 0) {
    out = sec->client;
    len = &sec->client_len;
  } else if (std::strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24) == 0) {
    out = sec->server;
    len = &sec->server_len;
  } else {
    return;
  }
  const char* hexsecret = std::strrchr(line, ' ');
  if (!hexsecret) return;
  ++hexsecret;
  size_t n = std::strlen(hexsecret);
  if (n % 2 || n / 2 > sizeof sec->client) return;
  for (size_t i = 0; i < n / 2; ++i) {
    int hi = unhex(hexsecret[2 * i]), lo = unhex(hexsecret[2 * i + 1]);
    if (hi < 0 || lo < 0) return;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  *len = n / 2;
}

int verify_callback(int ok, X509_STORE_CTX* store) {
  SSL* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* seen = ssl ? static_cast<VerifySeen*>(SSL_get_ex_data(ssl, g_verify_index)) : nullptr;
  if (seen && seen->fingerprint.empty()) seen->fingerprint = fingerprint_of(X509_STORE_CTX_get0_cert(store));
  if (seen && seen->error.empty() && !ok)
    seen->error = X509_verify_cert_error_string(X509_STORE_CTX_get_error(store));
  return ok;
}

// A pinned client takes any chain during the handshake and compares the pin right after it.
int accept_any(int, X509_STORE_CTX*) { return 1; }

bool is_ip(const std::string& host) {
  return !host.empty() && (host.find(':') != std::string::npos ||
                           std::all_of(host.begin(), host.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }));
}

// Reads a clear frame (a refusal before TLS) from a non-blocking socket.
bool read_clear(int fd, void* dst, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (!wait_fd(fd, false, deadline)) return false;
  }
  return true;
}

}  // namespace

// ---- The stream ----

struct TlsTransport::State {
  SSL* ssl = nullptr;
  int fd = -1;
  mutable std::mutex mu;  // failure, and the SSL object (the exporter, the peer's certificate)
  std::atomic<bool> shut{false};
  std::string failure;
  // The application traffic secrets, from OpenSSL's key log during the handshake (keylog()).
  TrafficSecrets secrets;

  // Writing: one write at a time (write_mu), sealed into one buffer while the one before is sent.
  std::mutex write_mu;  // taken after queue_mu
  std::unique_ptr<tls13::Sealer> sealer;
  std::vector<uint8_t> sealed[2];
  std::atomic<bool> key_update_owed{false};  // the peer's KeyUpdate asked for ours

  // Reading: the one reading thread. Raw bytes from the socket in rbuf[rbeg, rend).
  std::unique_ptr<tls13::Opener> opener;
  std::unique_ptr<uint8_t[]> rbuf;
  size_t rbeg = 0, rend = 0;
  std::chrono::milliseconds timeout = kForever;  // the socket's SO_RCVTIMEO (prepare_read_timeout)

  // The sealing thread's queue (write_held). queue_mu is taken before write_mu.
  struct Held {
    std::vector<iovec> iov;
    std::shared_ptr<const void> keep;
    size_t bytes = 0;
  };
  std::mutex queue_mu;
  std::condition_variable queue_cv;  // an item queued or done, a failure, shutdown
  std::deque<Held> queue;
  size_t queued_bytes = 0;
  bool sealing = false;       // the thread holds an item taken from the queue
  bool seal_failed = false;   // a queued write failed: later writes fail too
  std::thread sealer_thread;  // started by the first write it takes

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = why;
  }
};

namespace {
// Raw bytes read at most at once: many records, opened together (protocol/tls_records.h).
constexpr size_t kReadRaw = (1u << 20) + tls13::kHeader + tls13::kMaxCipherText;
// A write is sealed and sent in slices of this much data: one is sent while the next is sealed.
constexpr size_t kSlice = 256u << 10;
// Writes of at least this much are sealed by several threads (tls13::parallel_for), each slice
// while the one before is sent.
constexpr size_t kParallelWrite = 512u << 10;
}  // namespace

struct TlsHandshake {
  static std::unique_ptr<TlsTransport> make(SSL* ssl, int fd, bool owns_fd) {
    std::unique_ptr<TlsTransport> t(new TlsTransport());
    t->s_ = std::make_unique<TlsTransport::State>();
    t->s_->ssl = ssl;
    t->s_->fd = fd;
    t->owns_fd_ = owns_fd;
    SSL_set_ex_data(ssl, g_secrets_index, &t->s_->secrets);
    return t;
  }
  // Once the handshake is done, rgpu seals and opens the records itself (protocol/tls_records.h)
  // with the traffic secrets OpenSSL logged. False (with *err) when they are missing or OpenSSL
  // read past its Finished.
  static bool take_records(TlsTransport& t, bool server, std::string* err) {
    TlsTransport::State& st = *t.s_;
    SSL_set_ex_data(st.ssl, g_secrets_index, nullptr);
    TrafficSecrets& sec = st.secrets;
    tls13::Suite suite;
    const SSL_CIPHER* cipher = SSL_get_current_cipher(st.ssl);
    tls13::TrafficKey wkey, rkey;
    const bool ok = cipher && tls13::suite_of(SSL_CIPHER_get_protocol_id(cipher), &suite) && sec.client_len &&
                    sec.server_len && SSL_has_pending(st.ssl) == 0 &&
                    wkey.init(suite, server ? sec.server : sec.client, server ? sec.server_len : sec.client_len) &&
                    rkey.init(suite, server ? sec.client : sec.server, server ? sec.client_len : sec.server_len);
    OPENSSL_cleanse(&sec, sizeof sec);
    if (!ok) {
      *err = "the TLS connection could not be set up after its handshake (" +
             std::string(cipher ? SSL_CIPHER_get_name(cipher) : "no cipher") + "): " + ssl_errors();
      return false;
    }
    st.sealer = std::make_unique<tls13::Sealer>(std::move(wkey));
    st.opener = std::make_unique<tls13::Opener>(std::move(rkey));
    st.rbuf.reset(new uint8_t[kReadRaw]);
    // Blocking from now on: reads wait in recv (read_some), sends never block (MSG_DONTWAIT).
    fcntl(st.fd, F_SETFL, fcntl(st.fd, F_GETFL) & ~O_NONBLOCK);
    return true;
  }
};

void TlsTransport::set_records_per_key(uint64_t n) {
  std::lock_guard<std::mutex> whole(s_->write_mu);
  s_->sealer->set_records_per_key(n);
}

TlsTransport::~TlsTransport() {
  if (!s_) return;
  if (s_->sealer_thread.joinable()) {
    {
      // What is queued still goes (a last reply written just before the session ends), unless
      // the peer takes more than a moment to read it.
      std::unique_lock<std::mutex> q(s_->queue_mu);
      s_->queue_cv.wait_for(q, std::chrono::seconds(2), [&] {
        return (s_->queue.empty() && !s_->sealing) || s_->shut;
      });
      s_->shut = true;
    }
    s_->queue_cv.notify_all();
    s_->sealer_thread.join();
  }
  if (s_->ssl) SSL_free(s_->ssl);
  if (owns_fd_) ::close(s_->fd);
}

bool TlsTransport::send_all(const std::vector<uint8_t>& bytes) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n) {
    if (s_->shut) return false;
    ssize_t r = ::send(s_->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // In slices, so that a shutdown (the destructor stopping the sealing thread) is seen.
      wait_fd(s_->fd, true, Clock::now() + std::chrono::milliseconds(100));
    } else {
      s_->fail(r < 0 ? std::string("sending failed: ") + std::strerror(errno) : "sending failed");
      return false;
    }
  }
  return true;
}

bool TlsTransport::write(const iovec* iov, int count) {
  // After what is queued for the sealing thread: the caller's buffers are only lent until return.
  std::unique_lock<std::mutex> q(s_->queue_mu);
  s_->queue_cv.wait(q, [&] { return (s_->queue.empty() && !s_->sealing) || s_->seal_failed || s_->shut; });
  if (s_->seal_failed || s_->shut) return false;
  std::lock_guard<std::mutex> whole(s_->write_mu);
  q.unlock();
  return write_now(iov, count);
}

bool TlsTransport::write_held(const iovec* iov, int count, std::shared_ptr<const void> keep) {
  // Bulk is queued for the sealing thread, and so is anything behind it (the order stays); a
  // small write with nothing queued is written here, with no thread hop. The queue holds at most
  // kMaxQueued bytes of bulk, so a caller runs ahead by a few chunks, no more; small writes never
  // wait for room (the channel's reading thread answers pings with them and must never wait for
  // a writer, protocol/channel.h).
  constexpr size_t kMaxQueued = 4u << 20;
  size_t bytes = 0;
  for (int i = 0; i < count; ++i) bytes += iov[i].iov_len;
  std::unique_lock<std::mutex> q(s_->queue_mu);
  if (s_->seal_failed || s_->shut) return false;
  if (s_->queue.empty() && !s_->sealing && bytes < kSealAhead) {
    std::lock_guard<std::mutex> whole(s_->write_mu);
    q.unlock();
    return write_now(iov, count);
  }
  if (bytes >= kSealAhead)
    s_->queue_cv.wait(q, [&] { return s_->queued_bytes < kMaxQueued || s_->seal_failed || s_->shut; });
  if (s_->seal_failed || s_->shut) return false;
  if (!s_->sealer_thread.joinable()) s_->sealer_thread = std::thread([this] { seal_loop(); });
  s_->queue.push_back({std::vector<iovec>(iov, iov + count), std::move(keep), bytes});
  s_->queued_bytes += bytes;
  s_->queue_cv.notify_all();
  return true;
}

void TlsTransport::seal_loop() {
  std::unique_lock<std::mutex> q(s_->queue_mu);
  for (;;) {
    s_->queue_cv.wait(q, [&] { return !s_->queue.empty() || s_->shut; });
    if (s_->shut) break;
    State::Held h = std::move(s_->queue.front());
    s_->queue.pop_front();
    s_->sealing = true;
    bool ok;
    {
      std::lock_guard<std::mutex> whole(s_->write_mu);
      q.unlock();
      ok = write_now(h.iov.data(), static_cast<int>(h.iov.size()));
      h.keep.reset();  // the caller may reuse its buffers once it sees the queue shrink
      q.lock();
    }
    s_->sealing = false;
    s_->queued_bytes -= h.bytes;
    if (!ok) {
      // Nobody waits for this write's answer: fail the ones after it, and end the stream so that
      // the reader sees the break (the channel then resumes on a new connection and resends).
      s_->seal_failed = true;
      q.unlock();
      shutdown();
      q.lock();
    }
    s_->queue_cv.notify_all();
  }
  s_->queue.clear();  // drops the callers' buffers; the channel resends them after a resume
  s_->queued_bytes = 0;
  s_->queue_cv.notify_all();
}

bool TlsTransport::write_now(const iovec* iov, int count) {
  // In slices of kSlice bytes: the first is sealed here; while each is sent, the next is sealed
  // (its records by several threads at once: protocol/tls_records.h). A small write is one record,
  // sealed and sent by this thread.
  tls13::Sealer& sealer = *s_->sealer;
  if (s_->key_update_owed.exchange(false)) sealer.owe_key_update();
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  // Only a bulk write (a copy's chunk) is sealed by several threads: waking them costs more than
  // it saves on a batch of calls, whose latency matters (a PyTorch training step over TLS was
  // 1.26x plain TCP with every write of two records or more spread over the threads).
  const bool bulk = total >= kParallelWrite;
  auto seal_slice = [&](size_t from, std::vector<uint8_t>& out) {
    const size_t n = std::min(kSlice, total - from);
    out.resize(sealer.key_update_size((n + tls13::kMaxPlain - 1) / tls13::kMaxPlain) + tls13::Sealer::sealed_size(n));
    return sealer.seal(iov, count, from, n, out.data(), bulk);
  };
  std::vector<uint8_t>* now = &s_->sealed[0];
  std::vector<uint8_t>* next = &s_->sealed[1];
  if (!seal_slice(0, *now)) {
    s_->fail("sealing a TLS record failed: " + ssl_errors());
    return false;
  }
  for (size_t from = std::min(kSlice, total);; from += std::min(kSlice, total - from)) {
    bool next_ok = true;
    std::unique_ptr<tls13::ParallelRun> ahead;
    if (from < total && bulk) ahead = tls13::parallel_start(1, [&](size_t) { next_ok = seal_slice(from, *next); });
    const bool sent = send_all(*now);
    if (ahead) ahead->wait();
    if (!sent) return false;
    if (from >= total) break;
    if (!ahead) next_ok = seal_slice(from, *next);
    if (!next_ok) {
      s_->fail("sealing a TLS record failed: " + ssl_errors());
      return false;
    }
    std::swap(now, next);
  }
  traffic().written.fetch_add(total, std::memory_order_relaxed);
  return true;
}

ssize_t TlsTransport::read_some(void* buf, size_t n, std::chrono::milliseconds timeout) {
  // As the plain socket's (protocol/transport.cpp): a zero timeout is a look, one recv that does
  // not block; otherwise recv blocks, for at most the timeout (SO_RCVTIMEO, set when it changes),
  // one system call where a look, a poll and a recv were three.
  State& st = *s_;
  const bool look = prepare_read_timeout(st.fd, timeout, &st.timeout);
  for (;;) {
    if (st.shut) return kBroken;
    if (st.rend > st.rbeg || st.opener->pending()) {
      auto o = st.opener->open(st.rbuf.get() + st.rbeg, st.rend - st.rbeg, static_cast<uint8_t*>(buf), n, true);
      st.rbeg += o.consumed;
      if (o.update_requested) st.key_update_owed = true;
      if (o.produced) {
        traffic().read.fetch_add(o.produced, std::memory_order_relaxed);
        return static_cast<ssize_t>(o.produced);
      }
      if (o.status == tls13::Opener::Status::kClosed) return kBroken;
      if (o.status == tls13::Opener::Status::kFailed) {
        st.fail(st.opener->why());
        return kBroken;
      }
      if (o.consumed) continue;  // a KeyUpdate, taken
    }
    // No whole record: read more, after the part of one already here.
    if (st.rbeg == st.rend) {
      st.rbeg = st.rend = 0;
    } else if (st.rbeg > 0 && kReadRaw - st.rend < tls13::kHeader + tls13::kMaxCipherText) {
      std::memmove(st.rbuf.get(), st.rbuf.get() + st.rbeg, st.rend - st.rbeg);
      st.rend -= st.rbeg;
      st.rbeg = 0;
    }
    ssize_t r = ::recv(st.fd, st.rbuf.get() + st.rend, kReadRaw - st.rend, look ? MSG_DONTWAIT : 0);
    if (r > 0) {
      st.rend += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return kBroken;  // the peer's end, without close_notify
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      st.fail(std::string("reading failed: ") + std::strerror(errno));
      return kBroken;
    }
    return kTimedOut;  // a look found nothing, or the timeout passed
  }
}

void TlsTransport::shutdown() {
  {
    std::lock_guard<std::mutex> q(s_->queue_mu);  // so that a waiter on queue_cv cannot miss it
    s_->shut = true;
  }
  s_->queue_cv.notify_all();
  ::shutdown(s_->fd, SHUT_RDWR);
}

bool TlsTransport::export_key(const char* label, uint8_t out[32]) {
  std::lock_guard<std::mutex> lock(s_->mu);
  return SSL_export_keying_material(s_->ssl, out, 32, label, std::strlen(label), nullptr, 0, 0) == 1;
}

std::string TlsTransport::failure() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->failure;
}

std::string TlsTransport::peer_fingerprint() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  X509* cert = SSL_get0_peer_certificate(s_->ssl);
  return fingerprint_of(cert);
}

// ---- Contexts ----

TlsClientConfig TlsClientConfig::from_env() {
  const env::Settings& s = env::get();
  return TlsClientConfig{s.tls_ca, s.tls_fingerprint, s.tls_cert, s.tls_key};
}

namespace {

SSL_CTX* new_ctx(bool server, std::string* err) {
  static std::once_flag once;
  std::call_once(once, [] {
    g_verify_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    g_secrets_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  });
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) {
    *err = "cannot set up TLS: " + ssl_errors();
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // No session tickets: rgpu resumes its own sessions (protocol/channel.h), and a ticket would be
  // bytes and work after every handshake for nothing.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  // AES-128-GCM first: with AES-NI both AES suites are fast, and 128 is the faster. OpenSSL reads
  // no further than its Finished (no read-ahead): the records after it are rgpu's own
  // (protocol/tls_records.h), keyed with the traffic secrets its key log hands over.
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_keylog_callback(ctx, keylog);
  return ctx;
}

bool load_pair(SSL_CTX* ctx, const std::string& cert, const std::string& key, const char* what, std::string* err) {
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    *err = log::format("cannot use the certificate %s (%s): %s; give a PEM certificate file", what, cert.c_str(),
                       ssl_errors().c_str());
    return false;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    *err = log::format("cannot use the private key %s for the certificate %s: %s; give the PEM key of that "
                       "certificate",
                       key.c_str(), cert.c_str(), ssl_errors().c_str());
    return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<TlsContext> tls_server_context(const TlsServerConfig& c, std::string* err) {
  auto t = std::make_shared<TlsContext>();
  t->server = true;
  t->ctx = new_ctx(true, err);
  if (!t->ctx || !load_pair(t->ctx, c.cert_file, c.key_file, "--tls-cert", err)) return nullptr;
  t->own_print = fingerprint_of(SSL_CTX_get0_certificate(t->ctx));
  if (!c.client_ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(c.client_ca_file.c_str());
    if (!names || SSL_CTX_load_verify_locations(t->ctx, c.client_ca_file.c_str(), nullptr) != 1) {
      *err = log::format("cannot use --tls-client-ca %s: %s; give a PEM file of CA certificates",
                         c.client_ca_file.c_str(), ssl_errors().c_str());
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      return nullptr;
    }
    SSL_CTX_set_client_CA_list(t->ctx, names);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return t;
}

std::shared_ptr<TlsContext> tls_client_context(const TlsClientConfig& c, std::string* err) {
  auto t = std::make_shared<TlsContext>();
  t->ctx = new_ctx(false, err);
  if (!t->ctx) return nullptr;
  if (!c.fingerprint.empty()) {
    t->pin = normalize_fingerprint(c.fingerprint);
    if (t->pin.empty()) {
      *err = "RGPU_TLS_FINGERPRINT=" + c.fingerprint +
             " is not a SHA-256 fingerprint; give it as sha256: and 64 hex digits (rgpu-server prints its own at start)";
      return nullptr;
    }
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, accept_any);
  } else {
    bool loaded = c.ca_file.empty() ? SSL_CTX_set_default_verify_paths(t->ctx) == 1
                                    : SSL_CTX_load_verify_locations(t->ctx, c.ca_file.c_str(), nullptr) == 1;
    if (!loaded) {
      *err = c.ca_file.empty() ? "cannot load the system's CA certificates: " + ssl_errors() +
                                     "; set RGPU_TLS_CA or RGPU_TLS_FINGERPRINT"
                               : log::format("cannot use RGPU_TLS_CA=%s: %s; give a PEM file of CA certificates",
                                             c.ca_file.c_str(), ssl_errors().c_str());
      return nullptr;
    }
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, verify_callback);
  }
  if (c.cert_file.empty() != c.key_file.empty()) {
    *err = "RGPU_TLS_CERT and RGPU_TLS_KEY go together: set both (a client certificate and its key) or neither";
    return nullptr;
  }
  if (!c.cert_file.empty() && !load_pair(t->ctx, c.cert_file, c.key_file, "RGPU_TLS_CERT", err)) return nullptr;
  return t;
}

std::string tls_fingerprint(const TlsContext& server) { return server.own_print; }

// ---- Handshakes ----

std::unique_ptr<TlsTransport> tls_connect(const std::shared_ptr<TlsContext>& ctx, int fd, bool owns_fd,
                                          const std::string& host, uint8_t kind, const SessionId& session,
                                          const std::string& server, Clock::time_point deadline, std::string* err,
                                          TlsFailure* failure) {
  *failure = TlsFailure::kRefused;
  // The preamble goes out before the ClientHello, in the same packet when the kernel merges them
  // (TCP_NODELAY sends it alone; either way no round trip is added).
  uint8_t pre[kTlsPreambleSize] = {};
  std::memcpy(pre, &kTlsPreambleMagic, 4);  // little-endian hosts only, as the whole wire
  pre[4] = kind;
  std::memcpy(pre + 8, session.data(), session.size());
  if (::send(fd, pre, sizeof pre, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof pre)) {
    *failure = TlsFailure::kClosed;
    *err = server + " closed the connection before TLS began";
    return nullptr;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  SSL* ssl = SSL_new(ctx->ctx);
  BIO* bio = BIO_new(socket_method());
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_connect_state(ssl);
  VerifySeen seen;
  SSL_set_ex_data(ssl, g_verify_index, &seen);
  if (ctx->pin.empty()) {
    if (is_ip(host))
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    else
      SSL_set1_host(ssl, host.c_str());
  }
  if (!is_ip(host)) SSL_set_tlsext_host_name(ssl, host.c_str());
  auto t = TlsHandshake::make(ssl, fd, false);  // the caller keeps fd on failure
  bool first_read = true;
  for (;;) {
    t_hold_reads = first_read;
    int r = SSL_do_handshake(ssl);
    t_hold_reads = false;
    if (r == 1) break;
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!wait_fd(fd, e == SSL_ERROR_WANT_WRITE, deadline)) {
        *failure = TlsFailure::kClosed;
        *err = "the TLS handshake with " + server + " timed out";
        return nullptr;
      }
      if (e == SSL_ERROR_WANT_READ && first_read) {
        first_read = false;
        // The server's first bytes: a TLS record (handshake 0x16 or alert 0x15, version 3.x), or
        // a clear rgpu frame, a refusal before TLS (a server without TLS, or one that is full).
        uint8_t b[2] = {};
        ssize_t n = ::recv(fd, b, sizeof b, MSG_PEEK);
        if (n == 0) {
          *failure = TlsFailure::kClosed;
          *err = server + " closed the connection before the TLS handshake";
          return nullptr;
        }
        if (n > 0 && !((b[0] == 0x16 || b[0] == 0x15) && (n < 2 || b[1] == 0x03))) {
          FrameHeader h{};
          std::vector<uint8_t> payload;
          bool ok = read_clear(fd, &h, sizeof h, deadline) && h.length <= kMaxHandshakePayload;
          if (ok) {
            payload.resize(h.length);
            ok = read_clear(fd, payload.data(), payload.size(), deadline);
          }
          Reader rd(payload.data(), payload.size());
          std::string reason = ok && h.op == kOpRefused ? rd.str(kMaxHandshakePayload) : "";
          if (ok && h.op == kOpRefused && rd.ok())
            *err = server + " refused the connection before TLS (unauthenticated): " + reason;
          else
            *err = server + " does not answer with TLS; is it an rgpu server started with --tls? For a server "
                            "without TLS use host:port without tls://";
          return nullptr;
        }
      }
      continue;
    }
    std::string why = ssl_errors();
    if (!seen.error.empty()) {
      *err = log::format(
          "the TLS certificate of %s is not trusted (%s); it has fingerprint %s. If that is the server's "
          "certificate (rgpu-server prints its fingerprint at start), set RGPU_TLS_FINGERPRINT=%s to trust it, or "
          "RGPU_TLS_CA to the CA that signed it",
          server.c_str(), seen.error.c_str(), seen.fingerprint.c_str(), seen.fingerprint.c_str());
      return nullptr;
    }
    if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN || why.empty()) {
      *failure = TlsFailure::kClosed;
      *err = server + " closed the connection during the TLS handshake" + (why.empty() ? "" : ": " + why);
      return nullptr;
    }
    *err = "the TLS handshake with " + server + " failed: " + why;
    return nullptr;
  }
  if (!ctx->pin.empty()) {
    std::string got = fingerprint_of(SSL_get0_peer_certificate(ssl));
    if (got != ctx->pin) {
      *err = log::format(
          "the TLS certificate of %s has fingerprint %s, not the pinned RGPU_TLS_FINGERPRINT %s: the server's "
          "certificate changed, or this is not the server you mean. If it is (rgpu-server prints its fingerprint at "
          "start), set RGPU_TLS_FINGERPRINT=%s to trust it",
          server.c_str(), got.c_str(), ctx->pin.c_str(), got.c_str());
      return nullptr;
    }
  }
  SSL_set_ex_data(ssl, g_verify_index, nullptr);
  if (!TlsHandshake::take_records(*t, false, err)) return nullptr;
  *failure = TlsFailure::kNone;
  if (owns_fd) t->own_fd();
  return t;
}

std::unique_ptr<TlsTransport> tls_accept(const std::shared_ptr<TlsContext>& ctx, int fd, bool owns_fd,
                                         Clock::time_point deadline, std::string* err, bool ask_client_certificate) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  SSL* ssl = SSL_new(ctx->ctx);
  if (!ask_client_certificate) SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
  BIO* bio = BIO_new(socket_method());
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_accept_state(ssl);
  auto t = TlsHandshake::make(ssl, fd, false);  // the caller keeps fd on failure
  for (;;) {
    int r = SSL_do_handshake(ssl);
    if (r == 1) {
      if (!TlsHandshake::take_records(*t, true, err)) return nullptr;
      if (owns_fd) t->own_fd();
      return t;
    }
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!wait_fd(fd, e == SSL_ERROR_WANT_WRITE, deadline)) {
        *err = "the client did not finish the TLS handshake in time";
        return nullptr;
      }
      continue;
    }
    std::string why = ssl_errors();
    *err = "TLS handshake failed: " + (why.empty() ? std::string("the client closed the connection") : why);
    return nullptr;
  }
}

bool read_tls_preamble_rest(int fd, TlsPreamble* out, Clock::time_point deadline) {
  uint8_t rest[kTlsPreambleSize - 4];
  size_t got = 0;
  while (got < sizeof rest) {
    if (!wait_fd(fd, false, deadline)) return false;
    ssize_t r = ::recv(fd, rest + got, sizeof rest - got, MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return decode_tls_preamble_rest(rest, sizeof rest, out);
}

TlsOpening read_tls_opening(int fd, TlsPreamble* out, Clock::time_point deadline) {
  uint32_t magic = 0;
  ssize_t n = net::read_full(fd, &magic, sizeof magic);
  if (n == 0) return TlsOpening::kClosed;
  if (n < 0 || magic != kTlsPreambleMagic) return TlsOpening::kNotTls;
  return read_tls_preamble_rest(fd, out, deadline) ? TlsOpening::kOk : TlsOpening::kMalformed;
}

bool decode_tls_preamble_rest(const uint8_t* rest, size_t n, TlsPreamble* out) {
  if (n != kTlsPreambleSize - 4) return false;
  out->kind = rest[0];
  std::memcpy(out->session.data(), rest + 4, out->session.size());
  return (out->kind == kTlsNew || out->kind == kTlsResume) && rest[1] == 0 && rest[2] == 0 && rest[3] == 0;
}

// ---- Certificates ----

std::string fingerprint_of_der(const uint8_t* der, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(der, n, md, &len, EVP_sha256(), nullptr);
  return "sha256:" + hex(md, len);
}

std::string normalize_fingerprint(const std::string& s) {
  std::string body = s;
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("sha256:", 0) == 0) body = s.substr(7);
  std::string out;
  for (char c : body) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out.size() == 64 ? "sha256:" + out : "";
}

std::string fingerprint_of_pem_file(const std::string& path, std::string* err) {
  FILE* f = fopen(path.c_str(), "r");
  if (!f) {
    *err = "cannot read " + path + ": " + std::strerror(errno);
    return "";
  }
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  fclose(f);
  if (!cert) {
    *err = path + " holds no PEM certificate";
    return "";
  }
  std::string out = fingerprint_of(cert);
  X509_free(cert);
  return out;
}

namespace {

std::string bio_string(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  return std::string(data, static_cast<size_t>(n));
}

bool add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  if (!ext) return false;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return true;
}

}  // namespace

bool make_certificate(const CertificateSpec& spec, std::string* cert_pem, std::string* key_pem, std::string* err) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509* issuer = nullptr;
  EVP_PKEY* issuer_key = nullptr;
  auto done = [&](bool ok) {
    if (!ok) *err = "cannot make a certificate: " + ssl_errors();
    EVP_PKEY_free(key);
    X509_free(cert);
    X509_free(issuer);
    EVP_PKEY_free(issuer_key);
    return ok;
  };
  if (!key || !cert) return done(false);
  if (!spec.issuer_cert_pem.empty()) {
    BIO* b = BIO_new_mem_buf(spec.issuer_cert_pem.data(), static_cast<int>(spec.issuer_cert_pem.size()));
    issuer = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    b = BIO_new_mem_buf(spec.issuer_key_pem.data(), static_cast<int>(spec.issuer_key_pem.size()));
    issuer_key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    if (!issuer || !issuer_key) return done(false);
  }
  X509_set_version(cert, 2);
  uint8_t serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return done(false);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert), static_cast<long>(spec.not_before.count()));
  X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(spec.not_after.count()));
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(spec.common_name.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
  std::string san;
  for (const std::string& n : spec.names) {
    if (!san.empty()) san += ",";
    san += (is_ip(n) ? "IP:" : "DNS:") + n;
  }
  X509* signer = issuer ? issuer : cert;
  if ((!san.empty() && !add_ext(cert, signer, NID_subject_alt_name, san)) ||
      !add_ext(cert, signer, NID_basic_constraints, spec.ca ? "critical,CA:TRUE" : "critical,CA:FALSE") ||
      !add_ext(cert, signer, NID_key_usage, spec.ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature") ||
      !add_ext(cert, signer, NID_subject_key_identifier, "hash"))
    return done(false);
  if (!spec.ca && !add_ext(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth")) return done(false);
  if (X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256()) == 0) return done(false);
  BIO* cb = BIO_new(BIO_s_mem());
  BIO* kb = BIO_new(BIO_s_mem());
  bool ok = PEM_write_bio_X509(cb, cert) == 1 && PEM_write_bio_PrivateKey(kb, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (ok) {
    *cert_pem = bio_string(cb);
    *key_pem = bio_string(kb);
  }
  BIO_free(cb);
  BIO_free(kb);
  return done(ok);
}

std::string default_state_dir() {
  const env::Settings& s = env::get();
  if (!s.xdg_state_home.empty()) return s.xdg_state_home + "/rgpu";
  if (!s.home.empty()) return s.home + "/.local/state/rgpu";
  return "/var/lib/rgpu";
}

bool ensure_auto_certificate(const std::string& state_dir, std::string* cert_file, std::string* key_file,
                             std::string* err) {
  *cert_file = state_dir + "/tls-cert.pem";
  *key_file = state_dir + "/tls-key.pem";
  if (access(cert_file->c_str(), R_OK) == 0 && access(key_file->c_str(), R_OK) == 0) return true;
  for (size_t i = 1; i <= state_dir.size(); ++i) {
    if (i != state_dir.size() && state_dir[i] != '/') continue;
    std::string part = state_dir.substr(0, i);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *err = log::format("cannot make the state directory %s for --tls auto's certificate: %s; give --state-dir DIR",
                         part.c_str(), std::strerror(errno));
      return false;
    }
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  CertificateSpec spec;
  spec.common_name = std::string("rgpu ") + host;
  spec.names = {host, "localhost", "127.0.0.1", "::1"};
  std::string cert, key;
  if (!make_certificate(spec, &cert, &key, err)) return false;
  auto write = [&](const std::string& path, const std::string& data, mode_t mode) {
    std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    bool ok = fd >= 0 && ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    if (fd >= 0) ::close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      *err = log::format("cannot write %s for --tls auto: %s; give --state-dir DIR", path.c_str(), std::strerror(errno));
      return false;
    }
    return true;
  };
  // The key first: a certificate without its key would be taken for a whole pair next time.
  return write(*key_file, key, 0600) && write(*cert_file, cert, 0644);
}

}  // namespace rgpu::proto
