// rgpu's own TLS 1.3 records (protocol/tls_records.h): sealed and opened in any sizes and pieces,
// with keys updated on the way; every changed, reordered or malformed record refused; and, over
// sockets, OpenSSL's record layer reading what rgpu writes and rgpu reading what OpenSSL writes,
// padding and key updates (requested or not) included. Every wait is bounded.
#include "protocol/tls_records.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/net.h"
#include "protocol/messages.h"
#include "protocol/tls.h"

namespace rgpu::proto {
namespace {

using tls13::Opener;
using tls13::Sealer;
using tls13::Suite;
using tls13::TrafficKey;

constexpr auto kBound = std::chrono::seconds(10);

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TrafficKey key(Suite suite, uint8_t fill) {
  uint8_t secret[48];
  std::memset(secret, fill, sizeof secret);
  TrafficKey k;
  EXPECT_TRUE(k.init(suite, secret, suite == Suite::kAes256Gcm ? 48 : 32));
  return k;
}

// Seals each write (its records numbered on from the last) into one stream.
std::vector<uint8_t> seal_all(Sealer& s, const std::vector<std::vector<uint8_t>>& writes, bool parallel) {
  std::vector<uint8_t> wire;
  for (const auto& w : writes) {
    iovec v{const_cast<uint8_t*>(w.data()), w.size()};
    const size_t records = (w.size() + tls13::kMaxPlain - 1) / tls13::kMaxPlain;
    const size_t at = wire.size();
    wire.resize(at + s.key_update_size(records) + Sealer::sealed_size(w.size()));
    EXPECT_TRUE(s.seal(&v, 1, 0, w.size(), wire.data() + at, parallel));
  }
  return wire;
}

// Opens a stream given `feed` bytes at a time into a buffer of `cap`; what came out, and how it ended.
struct Opened {
  std::vector<uint8_t> data;
  Opener::Status status = Opener::Status::kOk;
  std::string why;
  bool update_requested = false;
};
Opened open_all(Opener& o, const std::vector<uint8_t>& wire, size_t feed, size_t cap, bool parallel = true) {
  Opened r;
  std::vector<uint8_t> in, dst(cap);
  size_t given = 0;
  for (int guard = 0; guard < 10000000; ++guard) {
    auto out = o.open(in.data(), in.size(), dst.data(), cap, parallel);
    in.erase(in.begin(), in.begin() + static_cast<long>(out.consumed));
    r.data.insert(r.data.end(), dst.begin(), dst.begin() + static_cast<long>(out.produced));
    r.update_requested |= out.update_requested;
    if (out.status != Opener::Status::kOk) {
      r.status = out.status;
      r.why = o.why();
      return r;
    }
    if (out.produced || out.consumed) continue;
    if (given == wire.size()) break;
    const size_t n = std::min(feed, wire.size() - given);
    in.insert(in.end(), wire.begin() + static_cast<long>(given), wire.begin() + static_cast<long>(given + n));
    given += n;
  }
  EXPECT_TRUE(in.empty()) << in.size() << " bytes left unopened";
  return r;
}

std::vector<uint8_t> joined(const std::vector<std::vector<uint8_t>>& writes) {
  std::vector<uint8_t> all;
  for (const auto& w : writes) all.insert(all.end(), w.begin(), w.end());
  return all;
}

TEST(TlsRecords, TheThreadsAreThoseAskedFor) {
  // ctest sets RGPU_TLS_THREADS=3 (protocol/CMakeLists.txt), so that the many-threads path runs.
  if (const char* n = std::getenv("RGPU_TLS_THREADS")) EXPECT_EQ(tls13::parallel_threads(), std::atoi(n));
  std::vector<std::atomic<int>> hits(1000);
  tls13::parallel_for(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(TlsRecords, EverySizeComesBackWholeReadInAnyPieces) {
  for (Suite suite : {Suite::kAes128Gcm, Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    std::vector<std::vector<uint8_t>> writes;
    uint32_t seed = 1;
    // 511 and 512: the last record sealed and opened with Nettle, and the first with OpenSSL (a
    // record of n bytes of data has n + 1 of inner plaintext).
    for (size_t n : {size_t{1}, size_t{100}, size_t{511}, size_t{512}, size_t{16383}, size_t{16384}, size_t{16385},
                     size_t{3} << 20 | 7})
      writes.push_back(pattern(n, seed++));
    for (bool parallel : {false, true}) {
      Sealer s(key(suite, 7));
      const auto wire = seal_all(s, writes, parallel);
      for (size_t feed : {size_t{1} << 30, size_t{16411}, size_t{4096}})
        for (size_t cap : {size_t{4} << 20, size_t{16384}, size_t{1000}}) {
          Opener o(key(suite, 7));
          Opened r = open_all(o, wire, feed, cap, parallel);
          EXPECT_EQ(r.status, Opener::Status::kOk) << r.why;
          EXPECT_TRUE(r.data == joined(writes)) << "suite " << static_cast<int>(suite) << " feed " << feed << " cap " << cap;
          EXPECT_EQ(o.key().seq, s.key().seq);
        }
    }
  }
  // Byte by byte, into a one-byte buffer, for the small ones.
  Sealer s(key(Suite::kAes128Gcm, 3));
  std::vector<std::vector<uint8_t>> small = {pattern(5, 1), pattern(16390, 2)};
  Opener o(key(Suite::kAes128Gcm, 3));
  EXPECT_TRUE(open_all(o, seal_all(s, small, false), 1, 1).data == joined(small));
}

TEST(TlsRecords, KeysAreUpdatedOnTheWayAndTheReaderFollows) {
  Sealer s(key(Suite::kAes128Gcm, 9));
  s.set_records_per_key(2);
  std::vector<std::vector<uint8_t>> writes;
  for (int i = 0; i < 6; ++i) writes.push_back(pattern(40000, 10 + i));  // 3 records each
  s.owe_key_update();  // as when the peer asked for one: the first write begins with it
  const auto wire = seal_all(s, writes, true);
  // Six KeyUpdate records (the owed one, then one before each later write), 18 of data.
  EXPECT_EQ(wire.size(), 6 * tls13::kKeyUpdateRecord + 6 * Sealer::sealed_size(40000));
  Opener o(key(Suite::kAes128Gcm, 9));
  const uint64_t first = o.key().serial;
  Opened r = open_all(o, wire, 1 << 20, 1 << 20);
  EXPECT_EQ(r.status, Opener::Status::kOk) << r.why;
  EXPECT_TRUE(r.data == joined(writes));
  EXPECT_NE(o.key().serial, first);
  EXPECT_EQ(o.key().seq, s.key().seq);
  EXPECT_EQ(0, std::memcmp(o.key().key, s.key().key, 16));
}

TEST(TlsRecords, AChangedByteAnywhereIsRefused) {
  Sealer s(key(Suite::kAes128Gcm, 1));
  std::vector<std::vector<uint8_t>> writes = {pattern(50000, 1)};
  const auto wire = seal_all(s, writes, false);
  // In the second record's header (its length aside), body and tag; and in the first's body.
  const size_t second = tls13::kMaxPlain + tls13::kOverhead;
  for (size_t at : {size_t{1}, size_t{2}, size_t{100}, second + 1, second + 10, second + 5000, second + second - 1}) {
    auto bad = wire;
    bad[at] ^= 0x20;
    Opener o(key(Suite::kAes128Gcm, 1));
    Opened r = open_all(o, bad, 1 << 20, 1 << 20);
    EXPECT_EQ(r.status, Opener::Status::kFailed) << "byte " << at;
    EXPECT_NE(r.why.find("did not authenticate"), std::string::npos) << r.why;
    EXPECT_LT(r.data.size(), at < second ? 1u : second) << "no data of the changed record is given";
  }
  // The wrong key.
  Opener stranger(key(Suite::kAes128Gcm, 2));
  EXPECT_EQ(open_all(stranger, wire, 1 << 20, 1 << 20).status, Opener::Status::kFailed);
}

TEST(TlsRecords, AChangedByteInASmallRecordIsRefused) {
  // Records of a call's size, which Nettle seals and opens where the build has it (the one above
  // is OpenSSL's): a byte of the header, the data, the content type or the tag.
  for (Suite suite : {Suite::kAes128Gcm, Suite::kAes256Gcm, Suite::kChaCha20Poly1305})
    for (size_t n : {size_t{1}, size_t{100}, size_t{511}}) {
      Sealer s(key(suite, 6));
      const auto wire = seal_all(s, {pattern(n, 3)}, false);
      ASSERT_EQ(wire.size(), n + tls13::kOverhead);
      for (size_t at : {size_t{2}, tls13::kHeader, tls13::kHeader + n - 1, tls13::kHeader + n, wire.size() - 1}) {
        auto bad = wire;
        bad[at] ^= 0x01;
        for (size_t cap : {size_t{1} << 20, n}) {  // with room for the content type in dst, and without
          Opener o(key(suite, 6));
          Opened r = open_all(o, bad, 1 << 20, cap);
          EXPECT_EQ(r.status, Opener::Status::kFailed) << "suite " << static_cast<int>(suite) << " n " << n << " byte " << at;
          EXPECT_TRUE(r.data.empty());
        }
      }
      Opener o(key(suite, 6));
      EXPECT_TRUE(open_all(o, wire, 1 << 20, n).data == pattern(n, 3)) << "the record itself opens";
    }
}

TEST(TlsRecords, RecordsReorderedReplayedOrDroppedAreRefused) {
  Sealer s(key(Suite::kAes128Gcm, 4));
  std::vector<std::vector<uint8_t>> writes = {pattern(100, 1), pattern(100, 2), pattern(100, 3)};
  const auto wire = seal_all(s, writes, false);
  const size_t rec = Sealer::sealed_size(100);
  auto piece = [&](int i) { return std::vector<uint8_t>(wire.begin() + i * rec, wire.begin() + (i + 1) * rec); };
  for (auto order : {std::vector<int>{1, 0, 2}, std::vector<int>{0, 0, 1}, std::vector<int>{0, 2}}) {
    std::vector<uint8_t> bad;
    for (int i : order) {
      auto p = piece(i);
      bad.insert(bad.end(), p.begin(), p.end());
    }
    Opener o(key(Suite::kAes128Gcm, 4));
    Opened r = open_all(o, bad, 1 << 20, 1 << 20);
    EXPECT_EQ(r.status, Opener::Status::kFailed);
  }
}

TEST(TlsRecords, MalformedRecordsAreRefusedWithAReason) {
  struct Case {
    std::vector<uint8_t> bytes;
    const char* says;
  } cases[] = {
      {{22, 3, 3, 0, 40}, "of type 22"},                      // a handshake record in clear
      {{23, 3, 3, 0x41, 0x01}, "bytes long"},                 // longer than 2^14 + 256
      {{23, 3, 3, 0, 16}, "bytes long"},                      // shorter than a tag and a type
      {{'G', 'E', 'T', ' ', '/'}, "of type 71"},              // not TLS at all
  };
  for (const auto& c : cases) {
    Opener o(key(Suite::kAes128Gcm, 5));
    uint8_t dst[64];
    auto out = o.open(c.bytes.data(), c.bytes.size(), dst, sizeof dst, false);
    EXPECT_EQ(out.status, Opener::Status::kFailed);
    EXPECT_NE(o.why().find(c.says), std::string::npos) << o.why();
    // And it stays failed.
    EXPECT_EQ(o.open(c.bytes.data(), c.bytes.size(), dst, sizeof dst, false).status, Opener::Status::kFailed);
  }
}

// ---- Against OpenSSL's own record layer ----

// A TLS 1.3 endpoint that is plain OpenSSL (SSL_read, SSL_write) on a blocking socket.
struct RawPeer {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~RawPeer() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
  }
};

std::vector<uint8_t> raw_read(SSL* ssl, size_t n) {
  std::vector<uint8_t> out(n);
  size_t got = 0;
  while (got < n) {
    size_t r = 0;
    if (SSL_read_ex(ssl, out.data() + got, n - got, &r) != 1) break;
    got += r;
  }
  out.resize(got);
  return out;
}

// Reads n bytes into a buffer with room to spare (nothing more is sent meanwhile), so that a
// padded record is opened straight into it, as bulk is, and not whole and then copied.
std::vector<uint8_t> read_exactly(Transport& t, size_t n) {
  constexpr size_t kRoom = 64 << 10;
  std::vector<uint8_t> out(n + kRoom);
  size_t got = 0;
  while (got < n) {
    ssize_t r = t.read_some(out.data() + got, n - got + kRoom, kBound);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

bool write_bytes(Transport& t, const std::vector<uint8_t>& b) {
  iovec v{const_cast<uint8_t*>(b.data()), b.size()};
  return t.write(&v, 1);
}

void write_pem(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  fputs(text.c_str(), f);
  fclose(f);
}

class TlsInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    CertificateSpec spec;
    spec.names = {"127.0.0.1"};
    std::string err;
    ASSERT_TRUE(make_certificate(spec, &cert_, &key_, &err)) << err;
    char tmpl[] = "/tmp/rgpu-tls-records-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    write_pem(dir_ + "/c.pem", cert_);
    write_pem(dir_ + "/k.pem", key_);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // OpenSSL as the server, rgpu's client (pinning its certificate) as the other end.
  void rgpu_client_raw_server(RawPeer* raw, std::unique_ptr<TlsTransport>* client) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    raw->ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_min_proto_version(raw->ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(raw->ctx, 0);
    ASSERT_EQ(SSL_CTX_use_certificate_chain_file(raw->ctx, (dir_ + "/c.pem").c_str()), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey_file(raw->ctx, (dir_ + "/k.pem").c_str(), SSL_FILETYPE_PEM), 1);
    raw->ssl = SSL_new(raw->ctx);
    SSL_set_fd(raw->ssl, sv[1]);
    std::thread server([&] {
      uint8_t pre[kTlsPreambleSize];
      ASSERT_EQ(net::read_full(sv[1], pre, sizeof pre), static_cast<ssize_t>(sizeof pre));
      EXPECT_EQ(SSL_accept(raw->ssl), 1);
    });
    std::string err;
    auto sctx = tls_server_context({dir_ + "/c.pem", dir_ + "/k.pem", ""}, &err);
    TlsClientConfig cc;
    cc.fingerprint = tls_fingerprint(*sctx);
    auto cctx = tls_client_context(cc, &err);
    TlsFailure failure;
    *client = tls_connect(cctx, sv[0], true, "127.0.0.1", kTlsNew, SessionId{}, "raw OpenSSL", Clock::now() + kBound,
                          &err, &failure);
    server.join();
    ASSERT_TRUE(*client) << err;
    fds_.push_back(sv[1]);
  }

  // OpenSSL as the client, rgpu's server as the other end.
  // `suites`: the only cipher suites the client offers (TLS 1.3's names), else OpenSSL's.
  void raw_client_rgpu_server(RawPeer* raw, std::unique_ptr<TlsTransport>* server, const char* suites = nullptr) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    raw->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(raw->ctx, TLS1_3_VERSION);
    if (suites) ASSERT_EQ(SSL_CTX_set_ciphersuites(raw->ctx, suites), 1);
    raw->ssl = SSL_new(raw->ctx);
    SSL_set_fd(raw->ssl, sv[0]);
    std::thread client([&] {
      uint8_t pre[kTlsPreambleSize] = {};
      std::memcpy(pre, &kTlsPreambleMagic, 4);
      pre[4] = kTlsNew;
      ASSERT_TRUE(net::write_full(sv[0], pre, sizeof pre));
      EXPECT_EQ(SSL_connect(raw->ssl), 1);
    });
    std::string err;
    auto sctx = tls_server_context({dir_ + "/c.pem", dir_ + "/k.pem", ""}, &err);
    TlsPreamble p;
    uint32_t magic;
    ASSERT_EQ(net::read_full(sv[1], &magic, 4), 4);
    ASSERT_TRUE(read_tls_preamble_rest(sv[1], &p, Clock::now() + kBound));
    *server = tls_accept(sctx, sv[1], true, Clock::now() + kBound, &err);
    client.join();
    ASSERT_TRUE(*server) << err;
    fds_.push_back(sv[0]);
  }
  ~TlsInterop() override {
    for (int fd : fds_) close(fd);
  }
  std::string cert_, key_, dir_;
  std::vector<int> fds_;
};

// Both ways, with OpenSSL padding its records and updating its keys (asking for ours once), and
// rgpu updating its keys every few records.
void exchange(SSL* raw, TlsTransport& ours) {
  ours.set_records_per_key(5);
  SSL_set_block_padding(raw, 512);
  // A side that reads something wrong ends both streams, so that the writer waiting on it fails
  // and the test ends instead of hanging.
  auto end_both = [&] {
    ours.shutdown();
    ::shutdown(SSL_get_fd(raw), SHUT_RDWR);
  };
  for (size_t n : {size_t{1}, size_t{3000}, size_t{16384}, size_t{1} << 20, size_t{5} << 20}) {
    const auto a = pattern(n, static_cast<uint32_t>(n));
    std::thread w([&] { EXPECT_TRUE(write_bytes(ours, a)); });
    const bool a_ok = raw_read(raw, n) == a;
    if (!a_ok) end_both();
    w.join();
    ASSERT_TRUE(a_ok) << n << " bytes rgpu -> OpenSSL";
    const auto b = pattern(n, static_cast<uint32_t>(n + 1));
    if (n == 3000) EXPECT_EQ(SSL_key_update(raw, SSL_KEY_UPDATE_REQUESTED), 1);
    if (n == 16384) EXPECT_EQ(SSL_key_update(raw, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    std::thread r([&] {
      size_t done = 0;
      while (done < n) {
        size_t put = 0;
        if (SSL_write_ex(raw, b.data() + done, n - done, &put) != 1) break;
        done += put;
      }
    });
    const bool b_ok = read_exactly(ours, n) == b;
    if (!b_ok) end_both();
    r.join();
    ASSERT_TRUE(b_ok) << n << " bytes OpenSSL -> rgpu: " << ours.failure();
  }
  // rgpu answered the requested update (OpenSSL read the rest under its own new key, which it
  // could only do had rgpu's KeyUpdate come); a last word.
  const auto last = pattern(10, 99);
  EXPECT_TRUE(write_bytes(ours, last));
  EXPECT_TRUE(raw_read(raw, 10) == last);
}

TEST_F(TlsInterop, OpenSslServerAndRgpuClientReadEachOther) {
  RawPeer raw;
  std::unique_ptr<TlsTransport> client;
  rgpu_client_raw_server(&raw, &client);
  ASSERT_TRUE(client);
  exchange(raw.ssl, *client);
}

TEST_F(TlsInterop, OpenSslClientAndRgpuServerReadEachOther) {
  RawPeer raw;
  std::unique_ptr<TlsTransport> server;
  raw_client_rgpu_server(&raw, &server);
  ASSERT_TRUE(server);
  exchange(raw.ssl, *server);
}

TEST_F(TlsInterop, EveryCipherSuiteReadsEachOther) {
  // rgpu's servers prefer AES-128-GCM (the tests above); a client may offer only another.
  for (const char* suite : {"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}) {
    RawPeer raw;
    std::unique_ptr<TlsTransport> server;
    raw_client_rgpu_server(&raw, &server, suite);
    ASSERT_TRUE(server);
    EXPECT_STREQ(SSL_CIPHER_get_name(SSL_get_current_cipher(raw.ssl)), suite);
    exchange(raw.ssl, *server);
  }
}

TEST_F(TlsInterop, AnAlertFromThePeerIsReportedAndACloseNotifyEndsTheStream) {
  RawPeer raw;
  std::unique_ptr<TlsTransport> client;
  rgpu_client_raw_server(&raw, &client);
  ASSERT_TRUE(client);
  EXPECT_EQ(SSL_shutdown(raw.ssl), 0);  // close_notify sent
  uint8_t c;
  EXPECT_EQ(client->read_some(&c, 1, kBound), Transport::kBroken);
  EXPECT_EQ(client->failure(), "");
}

}  // namespace
}  // namespace rgpu::proto
