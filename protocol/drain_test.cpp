// Tests of protocol/drain.h: the notice's codec, and a session process's drain (each in a forked
// child, since the drain's signal handling is process-wide): asked by the listener's request, the
// client gets the draining notice, then at the deadline the ended one and a closed channel; two
// plain signals end it at once.
#include "protocol/drain.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "protocol/channel.h"
#include "protocol/messages.h"
#include "protocol/transport.h"

namespace rgpu::proto {
namespace {

TEST(Notice, RoundTripsAndRefusesWhatIsMalformed) {
  Writer w;
  encode(Notice{kNoticeDraining, 60, "rgpu-server at 1.2.3.4:9713 is shutting down; 60 s to finish"}, &w);
  Notice n;
  Reader r(w.buf().data(), w.buf().size());
  ASSERT_TRUE(decode(r, &n));
  EXPECT_EQ(n.kind, kNoticeDraining);
  EXPECT_EQ(n.seconds, 60u);
  EXPECT_EQ(n.text, "rgpu-server at 1.2.3.4:9713 is shutting down; 60 s to finish");

  Writer unknown;
  encode(Notice{7, 0, "x"}, &unknown);
  Reader r2(unknown.buf().data(), unknown.buf().size());
  EXPECT_FALSE(decode(r2, &n));

  Writer long_text;
  encode(Notice{kNoticeEnded, 0, std::string(kMaxNoticeText + 1, 'a')}, &long_text);
  Reader r3(long_text.buf().data(), long_text.buf().size());
  EXPECT_FALSE(decode(r3, &n));

  std::vector<uint8_t> trailing = w.buf();
  trailing.push_back(0);
  Reader r4(trailing.data(), trailing.size());
  EXPECT_FALSE(decode(r4, &n));
  Reader r5(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(decode(r5, &n));
}

// The text is the server's word, logged on the client: a hostile server cannot forge log lines.
TEST(Notice, ControlCharactersInTheTextBecomeQuestionMarks) {
  Writer w;
  encode(Notice{kNoticeEnded, 0, "bye\nrgpu: forged line\t\x7f"}, &w);
  Notice n;
  Reader r(w.buf().data(), w.buf().size());
  ASSERT_TRUE(decode(r, &n));
  EXPECT_EQ(n.text, "bye?rgpu: forged line??");
}

// Found by channel_fuzz (its input 9): a notice with no text ended the session with an empty
// reason, the only explanation the program's failing calls would give.
TEST(Notice, OneWithoutTextStillGivesTheUserAReason) {
  for (uint8_t kind : {kNoticeEnded, kNoticeDraining}) {
    auto [mine, peer] = memory_pair(1 << 16);
    Channel ch(Side::kClient, SessionId{}, "", ChannelOptions{});
    ASSERT_TRUE(ch.start(std::move(mine)));
    Writer w;
    encode(Notice{kind, 5, ""}, &w);
    std::string why;
    NoticeAction a = take_notice(ch, w.buf().data(), w.buf().size(), &why);
    if (kind == kNoticeEnded) {
      EXPECT_EQ(a, NoticeAction::kEnded);
      EXPECT_EQ(why, "the server ended this session (it gave no reason)");
      EXPECT_TRUE(ch.lost());
      EXPECT_EQ(ch.why(), why);
    } else {
      EXPECT_EQ(a, NoticeAction::kDraining);
      EXPECT_FALSE(ch.lost());
    }
  }
}

// The next notice the client gets within `timeout`; kind 255 when none came.
Notice next_notice(Channel& client, std::chrono::milliseconds timeout) {
  FrameHeader h{};
  Bytes payload;
  if (client.receive_frame(&h, &payload, Wait::kPassive, timeout) != Status::kOk || h.op != kOpNotice)
    return Notice{255, 0, ""};
  Notice n;
  Reader r(payload.data(), payload.size());
  if (!decode(r, &n)) return Notice{254, 0, ""};
  return n;
}

// Runs body in a forked child; the child's exit status is the number of the first check that
// failed (0: all passed). Bounded: the child is killed after 20 s.
int in_child(int (*body)()) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  for (int i = 0; i < 200; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
    usleep(100 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return 99;
}

struct Session {
  Channel server{Side::kServer, SessionId{}, "", ChannelOptions{}};
  Channel client{Side::kClient, SessionId{}, "", ChannelOptions{}};
  Session() {
    auto [s, c] = memory_pair();
    server.start(std::move(s));
    client.start(std::move(c));
    drain_attach(&server);
  }
  ~Session() { drain_attach(nullptr); }
};

int drains_at_the_listeners_request_then_ends_at_the_deadline() {
  start_drain_watch(DrainSettings{"test-server at here", std::chrono::seconds(60)});
  Session s;
  const auto start = Clock::now();
  if (!request_drain(getpid(), 1)) return 1;  // the listener's request: 1 s, not the 60 s default
  Notice n = next_notice(s.client, std::chrono::seconds(5));
  if (n.kind != kNoticeDraining || n.seconds != 1) return 2;
  if (n.text != "test-server at here is shutting down; 1 s to finish") return 3;
  if (!draining()) return 4;
  n = next_notice(s.client, std::chrono::seconds(5));
  const auto took = Clock::now() - start;
  if (n.kind != kNoticeEnded) return 5;
  if (n.text.find("test-server at here shut down (it was stopped, and its drain time of 1 s ran out)") != 0) return 6;
  if (took < std::chrono::milliseconds(900) || took > std::chrono::seconds(3)) return 7;
  // The server's channel is closed with the reason (its session's loop ends on it).
  for (int i = 0; i < 100 && !s.server.lost(); ++i) usleep(10 * 1000);
  if (!s.server.lost() || s.server.why().find("drain time of 1 s ran out") == std::string::npos) return 8;
  return 0;
}

int a_second_plain_signal_ends_at_once() {
  start_drain_watch(DrainSettings{"test-server at here", std::chrono::seconds(60)});
  Session s;
  kill(getpid(), SIGINT);  // Ctrl-C: the session's own drain time
  Notice n = next_notice(s.client, std::chrono::seconds(5));
  if (n.kind != kNoticeDraining || n.seconds != 60) return 1;
  const auto start = Clock::now();
  kill(getpid(), SIGTERM);
  n = next_notice(s.client, std::chrono::seconds(5));
  if (n.kind != kNoticeEnded || n.text.find("ended this session at once") == std::string::npos) return 2;
  if (Clock::now() - start > std::chrono::seconds(2)) return 3;
  return 0;
}

int a_listeners_end_now_request_ends_at_once() {
  start_drain_watch(DrainSettings{"test-server at here", std::chrono::seconds(60)});
  Session s;
  if (!request_drain(getpid(), 30)) return 1;
  if (next_notice(s.client, std::chrono::seconds(5)).seconds != 30) return 2;
  if (!request_drain(getpid(), kEndNow)) return 3;
  if (next_notice(s.client, std::chrono::seconds(2)).kind != kNoticeEnded) return 4;
  return 0;
}

TEST(Drain, AtTheListenersRequestTheClientIsToldThenTheSessionEndsAtTheDeadline) {
  EXPECT_EQ(in_child(drains_at_the_listeners_request_then_ends_at_the_deadline), 0);
}

TEST(Drain, ASecondPlainSignalEndsTheSessionAtOnce) { EXPECT_EQ(in_child(a_second_plain_signal_ends_at_once), 0); }

TEST(Drain, TheListenersEndNowEndsTheSessionAtOnce) {
  EXPECT_EQ(in_child(a_listeners_end_now_request_ends_at_once), 0);
}

}  // namespace
}  // namespace rgpu::proto
