// The handshake over a real socket pair: tokens, refusals and what each side is told.
#include "protocol/handshake.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/wire.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace rgpu::proto {
namespace {

struct Outcome {
  bool client_ok = false, server_ok = false;
  std::string client_err, server_err;
  ClientHandshakeResult client;
  ServerHandshakeResult server;
};

Outcome run(const std::string& client_token, const std::string& server_token,
            const std::string& identity = "tester@host pid=1 prog=t") {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Outcome o;
  std::thread server([&] {
    o.server_ok = server_handshake(sv[1], server_token, &o.server, &o.server_err);
    close(sv[1]);
  });
  o.client_ok = client_handshake(sv[0], client_token, identity, "test-server", &o.client, &o.client_err);
  close(sv[0]);  // a client that gave up closes, which ends the server's wait
  server.join();
  return o;
}

TEST(Handshake, SucceedsWithMatchingTokensAndAgreesOnSession) {
  Outcome o = run("s3cret", "s3cret");
  ASSERT_TRUE(o.client_ok) << o.client_err;
  ASSERT_TRUE(o.server_ok) << o.server_err;
  EXPECT_EQ(o.client.session, o.server.session);
  EXPECT_EQ(o.server.identity, "tester@host pid=1 prog=t");
  EXPECT_EQ(o.client.capabilities, kOurCapabilities);
}

TEST(Handshake, SucceedsWithoutTokenWhenServerHasNone) {
  Outcome o = run("", "");
  EXPECT_TRUE(o.client_ok) << o.client_err;
  EXPECT_TRUE(o.server_ok) << o.server_err;
}

TEST(Handshake, AClientWithATokenRefusesAServerThatAsksForNone) {
  // Such a server cannot prove it holds the token: it may be an impostor.
  Outcome o = run("s3cret", "");
  EXPECT_FALSE(o.client_ok);
  EXPECT_NE(o.client_err.find("does not ask for a token"), std::string::npos) << o.client_err;
  EXPECT_NE(o.client_err.find("RGPU_TOKEN"), std::string::npos) << o.client_err;
}

TEST(Handshake, ControlCharactersInTheClientsIdentityBecomeQuestionMarks) {
  Outcome o = run("", "", "eve\tfake-peer\nrgpu-server: forged line\x7f");
  ASSERT_TRUE(o.server_ok) << o.server_err;
  EXPECT_EQ(o.server.identity, "eve?fake-peer?rgpu-server: forged line?");
}

TEST(Handshake, AClientRefusesAServerOfAnotherProtocolVersion) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread server([&] {
    FrameHeader h;
    std::vector<uint8_t> payload;
    std::string why;
    if (read_frame(sv[1], kMaxHandshakePayload, &h, &payload, &why) != ReadResult::kOk) return;
    Writer challenge;  // a tokenless server's Challenge, from a later release
    challenge.put_u32(kMagic);
    challenge.put_u16(kProtocolVersion + 3);
    challenge.put_u64(kOurCapabilities);
    challenge.put_u8(0);
    uint8_t zeros[64] = {0};
    challenge.append(zeros, sizeof zeros);
    write_frame(sv[1], kOpChallenge, 0, 0, 0, challenge.buf().data(), challenge.size());
  });
  ClientHandshakeResult r;
  std::string err;
  EXPECT_FALSE(client_handshake(sv[0], "", "tester", "test-server", &r, &err));
  EXPECT_NE(err.find(std::to_string(kProtocolVersion + 3)), std::string::npos) << err;
  EXPECT_NE(err.find("same rgpu release"), std::string::npos) << err;
  server.join();
  close(sv[0]);
  close(sv[1]);
}

TEST(Handshake, WrongTokenIsRefusedWithAMessageSayingSo) {
  Outcome o = run("wrong", "right");
  EXPECT_FALSE(o.client_ok);
  EXPECT_FALSE(o.server_ok);
  // The client notices first: the server's proof does not match its token. (The server's side
  // of a wrong token is ServerRefusesAClientProofMadeWithTheWrongToken.)
  EXPECT_NE(o.client_err.find("token"), std::string::npos) << o.client_err;
}

TEST(Handshake, MissingTokenIsRefusedWithAHintToSetIt) {
  Outcome o = run("", "right");
  EXPECT_FALSE(o.client_ok);
  EXPECT_NE(o.client_err.find("RGPU_TOKEN"), std::string::npos) << o.client_err;
}

// A client that skips its own check still cannot get in: the server checks the client proof.
TEST(Handshake, ServerRefusesAClientProofMadeWithTheWrongToken) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  bool ok = true;
  std::string err;
  std::thread server([&] {
    ServerHandshakeResult r;
    ok = server_handshake(sv[1], "right", &r, &err);
  });
  Writer hello;
  hello.put_u32(kMagic);
  hello.put_u16(kProtocolVersion);
  hello.put_u64(0);
  hello.put_str("forger");
  uint8_t zeros[48] = {0};
  hello.append(zeros, sizeof zeros);
  ASSERT_TRUE(write_frame(sv[0], kOpHello, 0, 0, 0, hello.buf().data(), hello.size()));
  FrameHeader h;
  std::vector<uint8_t> payload;
  std::string why;
  ASSERT_EQ(read_frame(sv[0], kMaxHandshakePayload, &h, &payload, &why), ReadResult::kOk);
  EXPECT_EQ(h.op, kOpChallenge);
  uint8_t forged[32] = {0};
  ASSERT_TRUE(write_frame(sv[0], kOpAuth, 0, 0, 0, forged, sizeof forged));
  ASSERT_EQ(read_frame(sv[0], kMaxHandshakePayload, &h, &payload, &why), ReadResult::kOk);
  EXPECT_EQ(h.op, kOpRefused);
  server.join();
  EXPECT_FALSE(ok);
  close(sv[0]);
  close(sv[1]);
}

TEST(Handshake, VersionMismatchIsRefusedNamingBothVersions) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread server([&] {
    ServerHandshakeResult r;
    std::string err;
    server_handshake(sv[1], "", &r, &err);
  });
  Writer hello;
  hello.put_u32(kMagic);
  hello.put_u16(kProtocolVersion + 7);
  hello.put_u64(0);
  hello.put_str("future");
  uint8_t zeros[48] = {0};
  hello.append(zeros, sizeof zeros);
  ASSERT_TRUE(write_frame(sv[0], kOpHello, 0, 0, 0, hello.buf().data(), hello.size()));
  FrameHeader h;
  std::vector<uint8_t> payload;
  std::string why;
  ASSERT_EQ(read_frame(sv[0], kMaxHandshakePayload, &h, &payload, &why), ReadResult::kOk);
  ASSERT_EQ(h.op, kOpRefused);
  Reader r(payload.data(), payload.size());
  std::string reason = r.str();
  EXPECT_NE(reason.find(std::to_string(kProtocolVersion + 7)), std::string::npos) << reason;
  server.join();
  close(sv[0]);
  close(sv[1]);
}

TEST(Frame, LengthOverTheLimitIsRefusedBeforeReadingThePayload) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  FrameHeader h = make_header(300, 0, 1, 1, 1u << 31);
  ASSERT_EQ(write(sv[0], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  FrameHeader got;
  std::vector<uint8_t> payload;
  std::string why;
  EXPECT_EQ(read_frame(sv[1], kMaxPayload, &got, &payload, &why), ReadResult::kError);
  EXPECT_NE(why.find("over the limit"), std::string::npos) << why;
  EXPECT_TRUE(payload.empty());
  close(sv[0]);
  close(sv[1]);
}

TEST(Frame, TruncatedFrameIsAnErrorAndCleanEofIsClosed) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  FrameHeader h = make_header(300, 0, 1, 1, 100);
  ASSERT_EQ(write(sv[0], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  ASSERT_EQ(write(sv[0], "abc", 3), 3);
  close(sv[0]);
  FrameHeader got;
  std::vector<uint8_t> payload;
  std::string why;
  EXPECT_EQ(read_frame(sv[1], kMaxPayload, &got, &payload, &why), ReadResult::kError);
  EXPECT_EQ(read_frame(sv[1], kMaxPayload, &got, &payload, &why), ReadResult::kClosed);
  close(sv[1]);
}

TEST(Handshake, PeerThatSaysNothingIsToldApartFromABrokenHandshake) {
  for (bool say_something : {false, true}) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    if (say_something) {
      const uint8_t half_header[5] = {1, 2, 3, 4, 5};
      ASSERT_EQ(write(sv[0], half_header, sizeof half_header), 5);
    }
    close(sv[0]);
    ServerHandshakeResult r;
    std::string err;
    EXPECT_FALSE(server_handshake(sv[1], "", &r, &err));
    EXPECT_EQ(r.said_nothing, !say_something) << err;
    close(sv[1]);
  }
}

// Issue 17, defect 1: tenants. The client's token hint picks the tenant whose token the server
// proves; the result names it, and the admit step sees it before Welcome.
Outcome run_tenants(const std::string& client_token, const ServerHandshake& how) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Outcome o;
  std::thread server([&] {
    o.server_ok = server_handshake(sv[1], how, &o.server, &o.server_err);
    close(sv[1]);
  });
  o.client_ok = client_handshake(sv[0], client_token, "tester@host pid=1 prog=t", "test-server", &o.client, &o.client_err);
  close(sv[0]);
  server.join();
  return o;
}

TEST(Handshake, EachTokenMakesItsTenantAndTheServerProvesTheClientsOwn) {
  ServerHandshake how;
  how.tenants = {{"alice", "token-a"}, {"bob", "token-b"}, {"", "token-c"}, {"alice", "token-a2"}};
  std::string admitted;
  how.admit = [&](const ServerHandshakeResult& r, std::string*) {
    admitted = r.tenant;
    return true;
  };
  for (const auto& [token, tenant] : {std::pair<std::string, std::string>{"token-b", "bob"}, {"token-a", "alice"},
                                      {"token-c", ""}, {"token-a2", "alice"}}) {
    admitted = "unset";
    Outcome o = run_tenants(token, how);
    ASSERT_TRUE(o.client_ok) << o.client_err;
    ASSERT_TRUE(o.server_ok) << o.server_err;
    EXPECT_EQ(o.server.tenant, tenant);
    EXPECT_EQ(admitted, tenant);
    EXPECT_EQ(how.tenants[o.server.token_index].token, token);  // the one proved: the session secret mixes it
  }
  Outcome o = run_tenants("token-nobody", how);
  EXPECT_FALSE(o.client_ok);
  EXPECT_FALSE(o.server_ok);
  EXPECT_FALSE(o.server.wrong_token);  // the client gave up first: the server's proof was not its token's
}

TEST(Handshake, AWrongProofIsFlaggedAsAWrongToken) {
  Outcome o = run("not-it", "s3cret");
  EXPECT_FALSE(o.server_ok);
  // The client stops at the server's proof (not its token); a forged Auth is what a server sees
  // from an attacker: the flag is set where the proof is checked.
  ServerHandshake how;
  how.tenants = {{"", "s3cret"}};
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ServerHandshakeResult r;
  std::string err;
  std::thread server([&] {
    server_handshake(sv[1], how, &r, &err);
    close(sv[1]);
  });
  Writer hello;
  hello.put_u32(kMagic);
  hello.put_u16(kProtocolVersion);
  hello.put_u64(kOurCapabilities);
  hello.put_str("attacker");
  uint8_t zeros[48] = {};
  hello.append(zeros, sizeof zeros);  // no hint, a zero nonce
  write_frame(sv[0], kOpHello, 0, 0, 0, hello.buf().data(), hello.size());
  FrameHeader h;
  std::vector<uint8_t> payload;
  std::string why;
  ASSERT_EQ(read_frame(sv[0], kMaxHandshakePayload, &h, &payload, &why), ReadResult::kOk);
  EXPECT_EQ(h.op, kOpChallenge);
  uint8_t forged[32] = {};
  write_frame(sv[0], kOpAuth, 0, 0, 0, forged, sizeof forged);
  ASSERT_EQ(read_frame(sv[0], kMaxHandshakePayload, &h, &payload, &why), ReadResult::kOk);
  EXPECT_EQ(h.op, kOpRefused);
  close(sv[0]);
  server.join();
  EXPECT_TRUE(r.wrong_token);
}

TEST(Handshake, AnAdmitThatSaysNoRefusesTheClientWithItsReasonBeforeWelcome) {
  for (const std::string token : {"", "s3cret"}) {
    ServerHandshake how;
    if (!token.empty()) how.tenants = {{"", token}};
    how.admit = [](const ServerHandshakeResult&, std::string* reason) {
      *reason = "rgpu-server at here has 2 sessions, its --max-sessions; try later";
      return false;
    };
    Outcome o = run_tenants(token, how);
    EXPECT_FALSE(o.client_ok);
    EXPECT_FALSE(o.server_ok);
    EXPECT_NE(o.client_err.find("its --max-sessions; try later"), std::string::npos) << o.client_err;
  }
}

}  // namespace
}  // namespace rgpu::proto
