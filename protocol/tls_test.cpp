// TLS (protocol/tls.h) over socket pairs: which certificates a client trusts and what it says
// when it does not, client certificates, the stream under the handshake, and the token proof's
// binding to the TLS connection (a relay that terminates TLS cannot pass it on). Certificates are
// made here with make_certificate; every wait is bounded.
#include "protocol/tls.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <thread>
#include <vector>

#include "common/net.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"

namespace rgpu::proto {
namespace {

constexpr auto kBound = std::chrono::seconds(10);

struct Pem {
  std::string cert, key;
};

Pem make(CertificateSpec spec) {
  Pem p;
  std::string err;
  EXPECT_TRUE(make_certificate(spec, &p.cert, &p.key, &err)) << err;
  return p;
}

Pem make_ca(const std::string& name = "test CA") {
  CertificateSpec s;
  s.common_name = name;
  s.ca = true;
  return make(s);
}

Pem make_leaf(const Pem* ca, std::vector<std::string> names, std::chrono::seconds not_before = std::chrono::seconds(-3600),
              std::chrono::seconds not_after = std::chrono::hours(24)) {
  CertificateSpec s;
  s.common_name = "leaf";
  s.names = std::move(names);
  s.not_before = not_before;
  s.not_after = not_after;
  if (ca) {
    s.issuer_cert_pem = ca->cert;
    s.issuer_key_pem = ca->key;
  }
  return make(s);
}

// A temporary directory for the PEM files, removed at the end.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rgpu-tls-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string file(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::shared_ptr<TlsContext> server_ctx(const Pem& leaf, const Pem* client_ca = nullptr) {
    static int n = 0;
    ++n;
    TlsServerConfig c{file("s" + std::to_string(n) + ".crt", leaf.cert), file("s" + std::to_string(n) + ".key", leaf.key),
                      client_ca ? file("clientca.crt", client_ca->cert) : ""};
    std::string err;
    auto ctx = tls_server_context(c, &err);
    EXPECT_TRUE(ctx) << err;
    return ctx;
  }
  std::shared_ptr<TlsContext> client_ctx(const Pem* ca, const std::string& pin = "", const Pem* cert = nullptr) {
    TlsClientConfig c;
    if (ca) c.ca_file = file("ca.crt", ca->cert);
    c.fingerprint = pin;
    if (cert) {
      c.cert_file = file("c.crt", cert->cert);
      c.key_file = file("c.key", cert->key);
    }
    std::string err;
    auto ctx = tls_client_context(c, &err);
    EXPECT_TRUE(ctx) << err;
    return ctx;
  }
  std::string dir_;
};

// The server's side of a connection as the accept loop runs it: the preamble, then TLS.
std::unique_ptr<TlsTransport> serve(const std::shared_ptr<TlsContext>& ctx, int fd, std::string* err,
                                    TlsPreamble* pre = nullptr) {
  uint32_t magic = 0;
  if (net::read_full(fd, &magic, 4) != 4 || magic != kTlsPreambleMagic) {
    *err = "no preamble";
    return nullptr;
  }
  TlsPreamble p;
  if (!read_tls_preamble_rest(fd, &p, Clock::now() + kBound)) {
    *err = "bad preamble";
    return nullptr;
  }
  if (pre) *pre = p;
  return tls_accept(ctx, fd, true, Clock::now() + kBound, err);
}

struct Pair {
  std::unique_ptr<TlsTransport> client, server;
  std::string client_err, server_err;
  TlsFailure failure = TlsFailure::kNone;
  TlsPreamble preamble;
};

Pair connect_pair(const std::shared_ptr<TlsContext>& server_ctx, const std::shared_ptr<TlsContext>& client_ctx,
                  const std::string& host = "127.0.0.1", uint8_t kind = kTlsNew, SessionId session = {}) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Pair p;
  std::thread server([&] {
    p.server = serve(server_ctx, sv[1], &p.server_err, &p.preamble);
    if (!p.server) close(sv[1]);
  });
  p.client = tls_connect(client_ctx, sv[0], true, host, kind, session, "rgpu-server at test", Clock::now() + kBound,
                         &p.client_err, &p.failure);
  if (!p.client) close(sv[0]);
  server.join();
  return p;
}

bool send_text(Transport& t, const std::string& s) {
  iovec v{const_cast<char*>(s.data()), s.size()};
  return t.write(&v, 1);
}

std::string read_text(Transport& t, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = t.read_some(out.data() + got, n - got, std::chrono::seconds(5));
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return out.substr(0, got);
}

TEST_F(TlsTest, AServerWhoseCertificateTheCaSignedIsTrustedAndCarriesBytesBothWays) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"localhost", "127.0.0.1"});
  Pair p = connect_pair(server_ctx(leaf), client_ctx(&ca));
  ASSERT_TRUE(p.client) << p.client_err;
  ASSERT_TRUE(p.server) << p.server_err;
  EXPECT_EQ(p.preamble.kind, kTlsNew);
  ASSERT_TRUE(send_text(*p.client, "hello over tls"));
  EXPECT_EQ(read_text(*p.server, 14), "hello over tls");
  // A write larger than a record, in pieces small and large (gathered and not).
  std::string big(300000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  std::thread writer([&] {
    iovec v[3] = {{const_cast<char*>("hdr!"), 4}, {big.data(), 1000}, {big.data() + 1000, big.size() - 1000}};
    EXPECT_TRUE(p.server->write(v, 3));
  });
  EXPECT_EQ(read_text(*p.client, 4 + big.size()), "hdr!" + big);
  writer.join();
  // Nothing more: a read with a timeout times out.
  char c;
  EXPECT_EQ(p.client->read_some(&c, 1, std::chrono::milliseconds(50)), Transport::kTimedOut);
  // The host name works as well as the address.
  Pair q = connect_pair(server_ctx(leaf), client_ctx(&ca), "localhost");
  EXPECT_TRUE(q.client) << q.client_err;
}

// Records go out many to a send() (TlsTransport::flush_locked), with the SSL lock let go while
// the socket is full: both ends writing megabytes at once, neither reading until its own write is
// under way, must not wait on each other; and two threads writing on one end keep each write
// whole, as the channel's threads (calls, acknowledgements) do.
TEST_F(TlsTest, BothEndsWriteMegabytesAtOnceAndConcurrentWritesStayWhole) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"localhost", "127.0.0.1"});
  Pair p = connect_pair(server_ctx(leaf), client_ctx(&ca));
  ASSERT_TRUE(p.client) << p.client_err;
  ASSERT_TRUE(p.server) << p.server_err;
  const size_t kBig = 8 << 20;  // far more than the socket buffers hold
  std::string up(kBig, 0), down(kBig, 0);
  for (size_t i = 0; i < kBig; ++i) {
    up[i] = static_cast<char>('a' + i % 26);
    down[i] = static_cast<char>('A' + i % 23);
  }
  std::string got_up, got_down;
  std::thread client_reader([&] { got_down = read_text(*p.client, kBig); });
  std::thread server_reader([&] { got_up = read_text(*p.server, kBig); });
  std::thread server_writer([&] { EXPECT_TRUE(send_text(*p.server, down)); });
  EXPECT_TRUE(send_text(*p.client, up));
  server_writer.join();
  client_reader.join();
  server_reader.join();
  EXPECT_TRUE(got_up == up) << "client to server: " << got_up.size() << " bytes of " << kBig;
  EXPECT_TRUE(got_down == down) << "server to client: " << got_down.size() << " bytes of " << kBig;

  // Two writers, each sending 64 messages of its own letter in sizes across the record and the
  // send sizes: every message arrives whole (its letter throughout), none interleaved.
  const size_t sizes[] = {7, 4000, 16384, 16385, 70000, 300000};
  auto writer = [&](char letter) {
    for (int i = 0; i < 64; ++i) {
      std::string m(sizes[i % 6], letter);
      uint32_t n = static_cast<uint32_t>(m.size());
      iovec v[2] = {{&n, sizeof n}, {m.data(), m.size()}};
      EXPECT_TRUE(p.client->write(v, 2));
    }
  };
  std::thread a(writer, 'x'), b(writer, 'y');
  int whole = 0;
  for (int i = 0; i < 128; ++i) {
    std::string len = read_text(*p.server, 4);
    ASSERT_EQ(len.size(), 4u);
    uint32_t n;
    std::memcpy(&n, len.data(), 4);
    ASSERT_LE(n, 300000u);
    std::string m = read_text(*p.server, n);
    ASSERT_EQ(m.size(), n);
    whole += m.find_first_not_of(m[0]) == std::string::npos;
  }
  a.join();
  b.join();
  EXPECT_EQ(whole, 128);
}

TEST_F(TlsTest, HeldWritesKeepTheirOrderWithDirectWritesAndLetTheirBuffersGoOnceSent) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"127.0.0.1"});
  Pair p = connect_pair(server_ctx(leaf), client_ctx(&ca));
  ASSERT_TRUE(p.client) << p.client_err;
  ASSERT_TRUE(p.server) << p.server_err;
  // Messages of sizes below and above the hand-over size, each held (the sealing thread may send
  // it after write_held returns) or direct, alternating: the server reads them in the order written.
  const size_t sizes[] = {9, TlsTransport::kSealAhead, 3 << 20, 100, TlsTransport::kSealAhead - 1, 700000};
  std::vector<std::weak_ptr<const void>> kept;
  std::string want;
  for (int i = 0; i < 24; ++i) want += std::string(sizes[i % 6], static_cast<char>('a' + i));
  std::string got;
  std::thread reader([&] { got = read_text(*p.server, want.size()); });
  for (int i = 0; i < 24; ++i) {
    auto m = std::make_shared<std::string>(sizes[i % 6], static_cast<char>('a' + i));
    iovec v{m->data(), m->size()};
    if (i % 4 == 3) {
      ASSERT_TRUE(p.client->write(&v, 1));
    } else {
      kept.push_back(m);
      ASSERT_TRUE(p.client->write_held(&v, 1, std::move(m)));
    }
  }
  reader.join();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the bytes differ from byte " << std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
  // Read whole, so sent whole: every buffer has been let go (the sealing thread's last drop of
  // one comes right after its send; give it a moment).
  for (int i = 0; i < 100 && std::any_of(kept.begin(), kept.end(), [](auto& w) { return !w.expired(); }); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& w : kept) EXPECT_TRUE(w.expired());
  // A break while bulk is queued: the writes after it fail, none hangs.
  std::string big(8 << 20, 'z');
  iovec v{big.data(), big.size()};
  auto keep = std::make_shared<int>(0);
  EXPECT_TRUE(p.client->write_held(&v, 1, keep));  // the server does not read: it stays queued
  p.server->shutdown();
  p.client->shutdown();
  EXPECT_FALSE(p.client->write_held(&v, 1, keep));
  EXPECT_FALSE(p.client->write(&v, 1));
}

TEST_F(TlsTest, BothEndsAgreeOnTheExporterValueAndEachConnectionHasItsOwn) {
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(leaf);
  const std::string pin = tls_fingerprint(*sctx);
  Pair a = connect_pair(sctx, client_ctx(nullptr, pin));
  Pair b = connect_pair(sctx, client_ctx(nullptr, pin));
  ASSERT_TRUE(a.client && a.server && b.client && b.server) << a.client_err << b.client_err;
  uint8_t ac[32], as[32], bc[32];
  ASSERT_TRUE(a.client->export_key(kTokenProofExporter, ac));
  ASSERT_TRUE(a.server->export_key(kTokenProofExporter, as));
  ASSERT_TRUE(b.client->export_key(kTokenProofExporter, bc));
  EXPECT_EQ(0, memcmp(ac, as, 32));
  EXPECT_NE(0, memcmp(ac, bc, 32));
  // A plain socket has none: its proofs stay as they were.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_FALSE(socket_transport(sv[0])->export_key(kTokenProofExporter, ac));
  close(sv[1]);
}

TEST_F(TlsTest, APinnedFingerprintIsTrustedWithoutACa) {
  Pem leaf = make_leaf(nullptr, {"some.other.name"});  // self-signed, and naming another host
  auto sctx = server_ctx(leaf);
  const std::string print = tls_fingerprint(*sctx);
  ASSERT_EQ(print.rfind("sha256:", 0), 0u);
  ASSERT_EQ(print.size(), 7u + 64u);
  // Written as the user may copy it: upper case, with colons.
  std::string pin = "SHA256:";
  for (size_t i = 7; i < print.size(); i += 2) pin += (i > 7 ? ":" : "") + print.substr(i, 2);
  for (char& c : pin) c = static_cast<char>(toupper(c));
  Pair p = connect_pair(sctx, client_ctx(nullptr, pin));
  ASSERT_TRUE(p.client) << p.client_err;
  EXPECT_EQ(p.client->peer_fingerprint(), print);
}

TEST_F(TlsTest, AWrongPinnedFingerprintIsRefusedShowingTheOneSeenAndHowToPinIt) {
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(leaf);
  const std::string seen = tls_fingerprint(*sctx);
  Pair p = connect_pair(sctx, client_ctx(nullptr, "sha256:" + std::string(64, 'a')));
  ASSERT_FALSE(p.client);
  EXPECT_EQ(p.failure, TlsFailure::kRefused);  // not worth another attempt
  EXPECT_NE(p.client_err.find("has fingerprint " + seen), std::string::npos) << p.client_err;
  EXPECT_NE(p.client_err.find("set RGPU_TLS_FINGERPRINT=" + seen + " to trust it"), std::string::npos) << p.client_err;
}

TEST_F(TlsTest, ASelfSignedCertificateIsRefusedWithItsFingerprintAndHowToPinIt) {
  Pem other_ca = make_ca("another CA");
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(leaf);
  Pair p = connect_pair(sctx, client_ctx(&other_ca));
  ASSERT_FALSE(p.client);
  EXPECT_EQ(p.failure, TlsFailure::kRefused);
  EXPECT_NE(p.client_err.find("is not trusted (self-signed certificate)"), std::string::npos) << p.client_err;
  EXPECT_NE(p.client_err.find("set RGPU_TLS_FINGERPRINT=" + tls_fingerprint(*sctx) + " to trust it"),
            std::string::npos)
      << p.client_err;
  EXPECT_FALSE(p.server);  // the server's handshake failed too (the client's alert)
}

TEST_F(TlsTest, AnExpiredCertificateIsRefused) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"127.0.0.1"}, std::chrono::hours(-48), std::chrono::hours(-24));
  Pair p = connect_pair(server_ctx(leaf), client_ctx(&ca));
  ASSERT_FALSE(p.client);
  EXPECT_NE(p.client_err.find("certificate has expired"), std::string::npos) << p.client_err;
  EXPECT_NE(p.client_err.find("RGPU_TLS_FINGERPRINT=sha256:"), std::string::npos) << p.client_err;
}

TEST_F(TlsTest, ACertificateForAnotherNameIsRefused) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"gpu.example.com"});
  Pair by_ip = connect_pair(server_ctx(leaf), client_ctx(&ca), "127.0.0.1");
  ASSERT_FALSE(by_ip.client);
  EXPECT_NE(by_ip.client_err.find("IP address mismatch"), std::string::npos) << by_ip.client_err;
  Pair by_name = connect_pair(server_ctx(leaf), client_ctx(&ca), "localhost");
  ASSERT_FALSE(by_name.client);
  EXPECT_NE(by_name.client_err.find("hostname mismatch"), std::string::npos) << by_name.client_err;
}

TEST_F(TlsTest, AServerAskingForClientCertificatesTakesOneItsCaSigned) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"127.0.0.1"});
  Pem client_ca = make_ca("client CA");
  Pem client = make_leaf(&client_ca, {"client"});
  Pair p = connect_pair(server_ctx(leaf, &client_ca), client_ctx(&ca, "", &client));
  ASSERT_TRUE(p.client) << p.client_err;
  ASSERT_TRUE(p.server) << p.server_err;
  std::string err;
  EXPECT_EQ(p.server->peer_fingerprint(), fingerprint_of_pem_file(dir_ + "/c.crt", &err));
  ASSERT_TRUE(send_text(*p.client, "ping"));
  EXPECT_EQ(read_text(*p.server, 4), "ping");
}

TEST_F(TlsTest, AServerAskingForClientCertificatesRefusesAClientWithout) {
  Pem ca = make_ca();
  Pem leaf = make_leaf(&ca, {"127.0.0.1"});
  Pem client_ca = make_ca("client CA");
  Pair p = connect_pair(server_ctx(leaf, &client_ca), client_ctx(&ca));
  EXPECT_FALSE(p.server);
  EXPECT_NE(p.server_err.find("certificate"), std::string::npos) << p.server_err;
  // TLS 1.3 tells the client at its first read: the stream ends, and says why.
  if (p.client) {
    char c;
    EXPECT_EQ(p.client->read_some(&c, 1, std::chrono::seconds(5)), Transport::kBroken);
    EXPECT_NE(p.client->failure().find("certificate"), std::string::npos) << p.client->failure();
  }
  // A client certificate from another CA is refused as well.
  Pem stranger_ca = make_ca("stranger CA");
  Pem stranger = make_leaf(&stranger_ca, {"client"});
  Pair q = connect_pair(server_ctx(leaf, &client_ca), client_ctx(&ca, "", &stranger));
  EXPECT_FALSE(q.server);
}

TEST_F(TlsTest, TheResumePreambleCarriesTheSession) {
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(leaf);
  SessionId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 7 + 1);
  Pair p = connect_pair(sctx, client_ctx(nullptr, tls_fingerprint(*sctx)), "127.0.0.1", kTlsResume, id);
  ASSERT_TRUE(p.client) << p.client_err;
  EXPECT_EQ(p.preamble.kind, kTlsResume);
  EXPECT_EQ(p.preamble.session, id);
}

TEST_F(TlsTest, AClearRefusalInPlaceOfTheServerHelloIsReportedWithItsReason) {
  // A server without TLS reads the preamble as a frame header, refuses it in clear and closes.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::thread server([&] {
    ServerHandshakeResult hs;
    std::string err;
    EXPECT_FALSE(server_handshake(sv[1], "", &hs, &err));
    EXPECT_TRUE(hs.tls_preamble);
    ::shutdown(sv[1], SHUT_WR);
    char sink[4096];
    while (recv(sv[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  });
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  std::string err;
  TlsFailure failure;
  auto t = tls_connect(client_ctx(nullptr, "sha256:" + std::string(64, '0')), sv[0], false, "127.0.0.1", kTlsNew, {},
                       "rgpu-server at test", Clock::now() + kBound, &err, &failure);
  server.join();
  EXPECT_FALSE(t);
  EXPECT_EQ(failure, TlsFailure::kRefused);
  EXPECT_NE(err.find("this server does not speak TLS; use host:port without tls://"), std::string::npos) << err;
  close(sv[0]);
  close(sv[1]);
}

// The handshake over TLS: runs as over a socket, with a token and without.
TEST_F(TlsTest, TheHandshakeRunsOverTlsWithAToken) {
  Pem leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(leaf);
  Pair p = connect_pair(sctx, client_ctx(nullptr, tls_fingerprint(*sctx)));
  ASSERT_TRUE(p.client && p.server) << p.client_err << p.server_err;
  ServerHandshakeResult shs;
  std::string serr;
  bool server_ok = false;
  std::thread server([&] { server_ok = server_handshake(*p.server, "tok", &shs, &serr); });
  ClientHandshakeResult chs;
  std::string cerr;
  bool client_ok = client_handshake(*p.client, "tok", "t@h pid=1 prog=t", "test", &chs, &cerr, kOurCapabilities,
                                    Clock::now() + kBound);
  server.join();
  ASSERT_TRUE(client_ok) << cerr;
  ASSERT_TRUE(server_ok) << serr;
  EXPECT_EQ(chs.session, shs.session);
}

// A relay in the middle: the client's TLS ends at the relay, which opens its own TLS to the
// server and copies the bytes between them. The client trusts the relay's certificate (pinned),
// so only the token proof's binding to the TLS connection can tell.
struct Relay {
  std::unique_ptr<Transport> a, b;
  std::thread up, down;
  static void pump(Transport* from, Transport* to) {
    char buf[4096];
    for (;;) {
      ssize_t n = from->read_some(buf, sizeof buf, std::chrono::seconds(5));
      if (n <= 0) break;
      iovec v{buf, static_cast<size_t>(n)};
      if (!to->write(&v, 1)) break;
    }
    to->shutdown();
    from->shutdown();
  }
  void start() {
    up = std::thread(pump, a.get(), b.get());
    down = std::thread(pump, b.get(), a.get());
  }
  ~Relay() {
    if (a) a->shutdown();
    if (b) b->shutdown();
    if (up.joinable()) up.join();
    if (down.joinable()) down.join();
  }
};

struct Relayed {
  bool client_ok = false, server_ok = false;
  std::string client_err, server_err;
};

Relayed handshake_through(Transport& client, Transport& server) {
  Relayed r;
  ServerHandshakeResult shs;
  std::thread s([&] { r.server_ok = server_handshake(server, "tok", &shs, &r.server_err, kOurCapabilities, nullptr, false, Clock::now() + kBound); });
  ClientHandshakeResult chs;
  r.client_ok = client_handshake(client, "tok", "t@h pid=1 prog=t", "test", &chs, &r.client_err, kOurCapabilities,
                                 Clock::now() + kBound);
  client.shutdown();  // a client that gave up closes, which ends the server's wait
  s.join();
  return r;
}

TEST_F(TlsTest, ATokenProofRelayedThroughAProxyThatTerminatesTlsIsRefused) {
  Pem server_leaf = make_leaf(nullptr, {"127.0.0.1"});
  Pem relay_leaf = make_leaf(nullptr, {"127.0.0.1"});
  auto sctx = server_ctx(server_leaf);
  auto rctx = server_ctx(relay_leaf);
  Pair client_side = connect_pair(rctx, client_ctx(nullptr, tls_fingerprint(*rctx)));
  Pair server_side = connect_pair(sctx, client_ctx(nullptr, tls_fingerprint(*sctx)));
  ASSERT_TRUE(client_side.client && client_side.server && server_side.client && server_side.server);
  Relay relay;
  relay.a = std::move(client_side.server);
  relay.b = std::move(server_side.client);
  relay.start();
  Relayed r = handshake_through(*client_side.client, *server_side.server);
  EXPECT_FALSE(r.client_ok);
  EXPECT_FALSE(r.server_ok);
  EXPECT_NE(r.client_err.find("proof did not match"), std::string::npos) << r.client_err;
  EXPECT_NE(r.client_err.find("a proxy that terminates TLS"), std::string::npos) << r.client_err;
}

TEST_F(TlsTest, TheSameRelayOverPlainTcpPassesTheProofOn) {
  // The control for the test above: the relay itself works; over TLS it is the binding that refuses.
  int c[2], s[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
  auto client = socket_transport(c[0]);
  auto server = socket_transport(s[1]);
  Relay relay;
  relay.a = socket_transport(c[1]);
  relay.b = socket_transport(s[0]);
  relay.start();
  Relayed r = handshake_through(*client, *server);
  EXPECT_TRUE(r.client_ok) << r.client_err;
  EXPECT_TRUE(r.server_ok) << r.server_err;
}

TEST(TlsPreambleDecode, TakesTheTwoKindsAndRefusesTheRest) {
  uint8_t rest[20] = {};
  TlsPreamble p;
  EXPECT_TRUE(decode_tls_preamble_rest(rest, 20, &p));
  EXPECT_EQ(p.kind, kTlsNew);
  rest[0] = kTlsResume;
  rest[4] = 0xab;
  EXPECT_TRUE(decode_tls_preamble_rest(rest, 20, &p));
  EXPECT_EQ(p.kind, kTlsResume);
  EXPECT_EQ(p.session[0], 0xab);
  rest[0] = 2;
  EXPECT_FALSE(decode_tls_preamble_rest(rest, 20, &p));  // an unknown kind
  rest[0] = kTlsNew;
  rest[2] = 1;
  EXPECT_FALSE(decode_tls_preamble_rest(rest, 20, &p));  // reserved bytes not zero
  rest[2] = 0;
  EXPECT_FALSE(decode_tls_preamble_rest(rest, 19, &p));  // short
}

// What a TLS listener reads first (read_tls_opening), as the accept loop tells its cases apart.
TlsOpening opening_of(const std::vector<uint8_t>& bytes, TlsPreamble* p) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  if (!bytes.empty()) EXPECT_TRUE(net::write_full(sv[1], bytes.data(), bytes.size()));
  shutdown(sv[1], SHUT_WR);
  TlsOpening o = read_tls_opening(sv[0], p, Clock::now() + std::chrono::seconds(5));
  close(sv[0]);
  close(sv[1]);
  return o;
}

TEST(TlsOpening, TellsAPortCheckAClearClientAndAMalformedPreambleFromAPreamble) {
  TlsPreamble p;
  EXPECT_EQ(opening_of({}, &p), TlsOpening::kClosed);
  std::vector<uint8_t> bytes(kTlsPreambleSize, 0);
  std::memcpy(bytes.data(), &kTlsPreambleMagic, 4);
  bytes[4] = kTlsResume;
  bytes[8] = 0xcd;
  EXPECT_EQ(opening_of(bytes, &p), TlsOpening::kOk);
  EXPECT_EQ(p.kind, kTlsResume);
  EXPECT_EQ(p.session[0], 0xcd);
  EXPECT_EQ(opening_of({bytes.begin(), bytes.begin() + 2}, &p), TlsOpening::kNotTls);  // magic cut short
  std::vector<uint8_t> hello = bytes;
  hello[0] ^= 1;  // a clear Hello's frame length
  EXPECT_EQ(opening_of(hello, &p), TlsOpening::kNotTls);
  EXPECT_EQ(opening_of({bytes.begin(), bytes.end() - 1}, &p), TlsOpening::kMalformed);  // cut short
  bytes[5] = 1;  // reserved
  EXPECT_EQ(opening_of(bytes, &p), TlsOpening::kMalformed);
}

TEST(TlsFingerprint, NormalizesWhatUsersWriteAndRejectsTheRest) {
  const std::string hex64(64, 'a');
  EXPECT_EQ(normalize_fingerprint("sha256:" + hex64), "sha256:" + hex64);
  EXPECT_EQ(normalize_fingerprint("SHA256:" + std::string(64, 'A')), "sha256:" + hex64);
  EXPECT_EQ(normalize_fingerprint(hex64), "sha256:" + hex64);
  EXPECT_EQ(normalize_fingerprint("sha256:abc"), "");
  EXPECT_EQ(normalize_fingerprint("sha256:" + std::string(63, 'a') + "g"), "");
  TlsClientConfig bad;
  bad.fingerprint = "md5:1234";
  std::string err;
  EXPECT_FALSE(tls_client_context(bad, &err));
  EXPECT_NE(err.find("not a SHA-256 fingerprint"), std::string::npos) << err;
}

TEST(TlsAuto, TheAutoCertificateIsMadeOnceAndKept) {
  char tmpl[] = "/tmp/rgpu-tls-auto-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/state/rgpu";
  std::string cert, key, err;
  ASSERT_TRUE(ensure_auto_certificate(dir, &cert, &key, &err)) << err;
  const std::string first = fingerprint_of_pem_file(cert, &err);
  ASSERT_FALSE(first.empty()) << err;
  struct stat st {};
  ASSERT_EQ(stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(ensure_auto_certificate(dir, &cert, &key, &err)) << err;
  EXPECT_EQ(fingerprint_of_pem_file(cert, &err), first);
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

}  // namespace
}  // namespace rgpu::proto
