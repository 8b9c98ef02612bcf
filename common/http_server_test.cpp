// Tests of common/http_server.h: the strict parser, and the server's loop against peers that send
// garbage, too much, or nothing.
#include "common/http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "common/net.h"

namespace rgpu::http {
namespace {

Parse parse(const std::string& head, Request* req, Response* err) { return parse_request(head, req, err); }

TEST(HttpParse, TakesAGetWithHostAndDropsTheQuery) {
  Request req;
  Response err;
  ASSERT_EQ(parse("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n", &req, &err), Parse::kOk);
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.path, "/metrics");
  ASSERT_EQ(parse("HEAD /healthz HTTP/1.0\r\n\r\n", &req, &err), Parse::kOk);
  EXPECT_EQ(req.method, "HEAD");
}

TEST(HttpParse, WaitsForTheBlankLine) {
  Request req;
  Response err;
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nHost: a\r\n", &req, &err), Parse::kIncomplete);
  EXPECT_EQ(parse("", &req, &err), Parse::kIncomplete);
}

TEST(HttpParse, RefusesWhatIsNotAStrictRequest) {
  const std::pair<std::string, int> cases[] = {
      {"GET /metrics HTTP/1.1\nHost: a\n\n", 400},             // bare LF
      {"GET  /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400},       // two spaces
      {"GET metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400},         // not a path
      {"GET http://x/metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"GET /metrics HTTP/2.0\r\nHost: a\r\n\r\n", 505},
      {"GET /metrics HTTPS/1.1\r\nHost: a\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n\r\n", 400},                   // no Host
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405},
      {std::string("GET /me\0trics HTTP/1.1\r\nHost: a\r\n\r\n", 35), 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
  };
  for (const auto& [head, status] : cases) {
    Request req;
    Response err;
    EXPECT_EQ(parse(head, &req, &err), Parse::kError) << head;
    EXPECT_EQ(err.status, status) << head;
  }
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 70; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  Request req;
  Response err;
  EXPECT_EQ(parse(many + "\r\n", &req, &err), Parse::kError);
  EXPECT_EQ(err.status, 431);
  EXPECT_EQ(parse("GET /" + std::string(kMaxHead, 'a'), &req, &err), Parse::kError);
  EXPECT_EQ(err.status, 431);
}

TEST(HttpParse, AnswersA405WithAllow) {
  Request req;
  Response err;
  ASSERT_EQ(parse("DELETE / HTTP/1.1\r\nHost: a\r\n\r\n", &req, &err), Parse::kError);
  std::string text = format_response(err, false);
  EXPECT_NE(text.find("HTTP/1.1 405 Method Not Allowed\r\n"), std::string::npos);
  EXPECT_NE(text.find("Allow: GET, HEAD\r\n"), std::string::npos);
}

// The server on a loopback port; `talk` sends bytes and reads the answer until the server closes.
class HttpServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ASSERT_EQ(listen(fd, 64), 0);
    socklen_t len = sizeof sa;
    getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    serve(fd, [](const Request& r) {
      Response out;
      if (r.path != "/hello") out.status = 404;
      out.body = "hi\n";
      return out;
    });
  }
  int dial() {
    net::Address a;
    std::string err;
    EXPECT_TRUE(net::parse_address("127.0.0.1:" + std::to_string(port_), 0, &a, &err));
    return net::connect_tcp(a, &err, 2000);
  }
  std::string talk(const std::string& bytes) {
    int fd = dial();
    EXPECT_GE(fd, 0);
    if (!bytes.empty()) {
      EXPECT_TRUE(net::write_full(fd, bytes.data(), bytes.size()));
    }
    shutdown(fd, SHUT_WR);  // all said: the server need not wait for more after answering
    std::string out;
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 8000) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  }
  static inline uint16_t port_ = 0;
};

TEST_F(HttpServe, AnswersAGetAndCloses) {
  std::string out = talk("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Content-Length: 3\r\n"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 3), "hi\n");
  EXPECT_EQ(talk("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  std::string head = talk("HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

TEST_F(HttpServe, SurvivesGarbageFloodsAndSilentPeers) {
  // Peers that send nothing hold a slot until the oldest-first eviction or the timeout.
  std::vector<int> silent;
  for (size_t i = 0; i < kMaxConnections + 4; ++i) silent.push_back(dial());
  // Random bytes, an endless head, binary junk: each gets an error or a close, never a hang.
  uint32_t x = 12345;
  for (int round = 0; round < 40; ++round) {
    std::string junk;
    for (int i = 0; i < 64 + round * 97; ++i) {
      x = x * 1103515245 + 12345;
      junk.push_back(static_cast<char>(x >> 16));
    }
    std::string out = talk(junk);
    EXPECT_TRUE(out.empty() || out.rfind("HTTP/1.1 4", 0) == 0 || out.rfind("HTTP/1.1 5", 0) == 0) << out;
  }
  EXPECT_EQ(talk("GET /" + std::string(100000, 'a')).rfind("HTTP/1.1 431", 0), 0u);
  for (int fd : silent) close(fd);
  // And it still answers.
  EXPECT_EQ(talk("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
}

}  // namespace
}  // namespace rgpu::http
