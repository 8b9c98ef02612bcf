// Tests of rgpu-faultproxy's engine against an echo server on loopback: each fault happens as
// asked, at the byte count or time asked. Every wait is bounded by a socket timeout.
#include "tools/faultproxy/faultproxy.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

namespace rgpu::faultproxy {
namespace {

using namespace std::chrono_literals;

uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Echoes every connection; counts the bytes it received and whether a connection saw its end.
class Echo {
 public:
  Echo() {
    std::string err;
    fd_ = net::listen_tcp({"127.0.0.1", 0}, &err);
    thread_ = std::thread([this] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      net::set_recv_timeout(c, 5);
      char buf[65536];
      ssize_t r;
      int err = 0;
      while ((r = ::recv(c, buf, sizeof buf, 0)) > 0) {
        received += static_cast<uint64_t>(r);
        if (!net::write_full(c, buf, static_cast<size_t>(r))) {
          // The RST may arrive while the echo writes back: the write sees it then, not the read.
          err = errno;
          break;
        }
      }
      if (r <= 0) err = r == 0 ? 0 : errno;
      saw_end = r == 0;
      saw_reset = err == ECONNRESET || err == EPIPE;
      ::close(c);
    });
  }
  ~Echo() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_of(fd_); }
  std::atomic<uint64_t> received{0};
  std::atomic<bool> saw_end{false}, saw_reset{false};
  std::thread thread_;

 private:
  int fd_;
};

struct Relayed {
  Echo echo;
  std::unique_ptr<Proxy> proxy;
  std::thread runner;
  int client = -1;
  explicit Relayed(Fault f, uint64_t bytes = 0, std::chrono::milliseconds ms = 0ms, bool on_request = false) {
    std::string err;
    Options o;
    o.target = {"127.0.0.1", echo.port()};
    o.fault = f;
    o.after_bytes = bytes;
    o.after_ms = ms;
    o.on_request = on_request;
    proxy = std::make_unique<Proxy>(net::listen_tcp({"127.0.0.1", 0}, &err), o);
    runner = std::thread([this] { proxy->run(); });
    client = net::connect_tcp({"127.0.0.1", proxy->port()}, &err);
    EXPECT_GE(client, 0) << err;
    timeval tv{1, 0};  // no test waits longer than a second for one read or write
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~Relayed() {
    proxy->stop();
    runner.join();
    proxy.reset();
    if (client >= 0) ::close(client);
  }
  // Sends n bytes; how many went before an error or timeout.
  size_t send_bytes(size_t n) {
    std::vector<uint8_t> data(n, 5);
    size_t sent = 0;
    while (sent < n) {
      ssize_t w = ::send(client, data.data() + sent, n - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += static_cast<size_t>(w);
    }
    return sent;
  }
  // Reads until end, error or a second's silence; the bytes read and what ended it.
  size_t read_all(int* end_errno) {
    char buf[65536];
    size_t got = 0;
    for (;;) {
      ssize_t r = ::recv(client, buf, sizeof buf, 0);
      if (r > 0) {
        got += static_cast<size_t>(r);
        continue;
      }
      *end_errno = r == 0 ? 0 : errno;
      return got;
    }
  }
};

TEST(FaultProxy, PassesEverythingWithoutAFault) {
  Relayed s(Fault::kNone);
  EXPECT_EQ(s.send_bytes(100000), 100000u);
  ::shutdown(s.client, SHUT_WR);
  int e = -1;
  EXPECT_EQ(s.read_all(&e), 100000u);
  EXPECT_EQ(e, 0);
}

TEST(FaultProxy, CutsAfterExactlyNBytesFromTheClient) {
  Relayed s(Fault::kCut, 3000);
  s.send_bytes(10000);
  int e = -1;
  s.read_all(&e);
  EXPECT_TRUE(e == 0 || e == ECONNRESET) << e;  // the stream ended, not a timeout
  for (int i = 0; i < 100 && !s.echo.saw_end; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.echo.received.load(), 3000u);
  EXPECT_TRUE(s.echo.saw_end);
  EXPECT_EQ(s.proxy->faults_struck(), 1);
}

TEST(FaultProxy, CutsAfterNMilliseconds) {
  auto start = std::chrono::steady_clock::now();
  Relayed s(Fault::kCut, 0, 300ms);
  int e = -1;
  s.read_all(&e);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(e, 0);
  EXPECT_GE(took, 280ms);
  EXPECT_LE(took, 900ms);
}

TEST(FaultProxy, CutsWhenAskedAndNotBefore) {
  Relayed s(Fault::kCut, 0, 0ms, /*on_request=*/true);
  // Relayed both ways while nobody asks.
  EXPECT_EQ(s.send_bytes(5000), 5000u);
  char buf[5000];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t r = ::recv(s.client, buf + got, sizeof buf - got, 0);
    ASSERT_GT(r, 0) << "the echo did not come back through the proxy";
    got += static_cast<size_t>(r);
  }
  EXPECT_EQ(s.proxy->faults_struck(), 0);
  s.proxy->strike_now();
  int e = -1;
  s.read_all(&e);
  EXPECT_TRUE(e == 0 || e == ECONNRESET) << e;  // the stream ended, not a timeout
  EXPECT_EQ(s.proxy->faults_struck(), 1);
  EXPECT_EQ(s.echo.received.load(), 5000u);
}

TEST(FaultProxy, ResetsBothSidesWithRst) {
  Relayed s(Fault::kReset, 1000);
  s.send_bytes(5000);
  int e = -1;
  s.read_all(&e);
  EXPECT_EQ(e, ECONNRESET);
  // Up to 5 s: on a loaded 2-core machine (CI) the echo thread may not run for a while.
  for (int i = 0; i < 500 && !s.echo.saw_reset; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s.echo.saw_reset);
}

TEST(FaultProxy, AStallForwardsNothingAndLetsTheSendersBuffersFill) {
  Relayed s(Fault::kStall, 100);
  s.send_bytes(100);
  // Nothing comes back, and the connection does not end: the read times out.
  int e = -1;
  EXPECT_EQ(s.read_all(&e), 0u);
  EXPECT_TRUE(e == EAGAIN || e == EWOULDBLOCK) << e;
  // Nobody reads: a large send blocks (and times out) long before it is all sent.
  EXPECT_LT(s.send_bytes(64 << 20), size_t(64) << 20);
}

TEST(FaultProxy, ABlackHoleSwallowsEverythingAndKeepsTheConnectionOpen) {
  Relayed s(Fault::kBlackhole, 100);
  s.send_bytes(100);
  EXPECT_EQ(s.send_bytes(16 << 20), size_t(16) << 20);  // read and dropped: the sender never blocks
  int e = -1;
  EXPECT_LE(s.read_all(&e), 100u);  // at most the echo of what passed before the fault
  EXPECT_TRUE(e == EAGAIN || e == EWOULDBLOCK) << e;
  EXPECT_LE(s.echo.received.load(), 100u);
}

TEST(FaultProxy, AHalfCloseEndsTheServersDirectionOnly) {
  Relayed s(Fault::kHalfClose, 0, 0ms);
  int e = -1;
  EXPECT_EQ(s.read_all(&e), 0u);
  EXPECT_EQ(e, 0);  // the client sees the end of the stream ...
  EXPECT_EQ(s.send_bytes(5000), 5000u);
  for (int i = 0; i < 100 && s.echo.received < 5000; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.echo.received.load(), 5000u);  // ... and what it sends still arrives
}

TEST(FaultProxy, NamesEveryFault) {
  for (const char* n : {"none", "cut", "reset", "stall", "blackhole", "half-close"}) {
    Fault f;
    ASSERT_TRUE(parse_fault(n, &f)) << n;
    EXPECT_STREQ(fault_name(f), n);
  }
  Fault f;
  EXPECT_FALSE(parse_fault("melt", &f));
}

}  // namespace
}  // namespace rgpu::faultproxy
