// Tests of protocol/session_table.h: the limits that span a listener's processes. Rows are real
// processes (forked children that claim a row and wait), as in the accept loop; every wait is
// bounded.
#include "protocol/session_table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/accept_loop.h"

namespace rgpu::proto::table {
namespace {

class SessionTable : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(create()); }
  void SetUp() override { reset_for_test(); }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      release(pid);
    }
  }
  // A child that runs `setup` in its own process, says so, and waits to be killed (at most 30 s).
  pid_t child(const std::function<void()>& setup) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      setup();
      char c = 1;
      (void)!write(p[1], &c, 1);
      sleep(30);
      _exit(0);
    }
    close(p[1]);
    char c;
    EXPECT_EQ(read(p[0], &c, 1), 1);
    close(p[0]);
    children_.push_back(pid);
    return pid;
  }
  pid_t session(const std::string& host, const std::string& tenant, uint64_t gpu = 0) {
    return child([=] {
      claim(host);
      unsigned live;
      admit(tenant, 0, &live);
      std::string why;
      if (gpu) reserve(kGpu, gpu, {}, &why);
    });
  }
  pid_t pending(const std::string& host) {
    return child([=] { claim(host); });
  }
  std::vector<pid_t> children_;
};

// Issue 17, defect 4: 500 connections made 502 processes. A session past --max-sessions is refused;
// a session's end gives its place back.
TEST_F(SessionTable, MaxSessionsRefusesTheNextAndAReapedSessionGivesItsPlaceBack) {
  const pid_t first = session("10.0.0.1", "");
  session("10.0.0.2", "");
  EXPECT_EQ(live_sessions(), 2u);
  unsigned live = 0;
  ASSERT_TRUE(claim("10.0.0.3"));
  EXPECT_EQ(admit("", 2, &live), Admit::kFull);
  EXPECT_EQ(live, 2u);
  release(first);  // what the listener's reaper does
  EXPECT_EQ(admit("", 2, &live), Admit::kOk);
  EXPECT_EQ(live_sessions(), 2u);
}

TEST_F(SessionTable, PastTheCapTheOldestPendingHandshakeOfTheBusiestAddressIsEvicted) {
  const pid_t honest = pending("10.0.0.9");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const pid_t flood_oldest = pending("10.0.0.66");
  pending("10.0.0.66");
  pending("10.0.0.66");
  EXPECT_EQ(pending_handshakes(), 4u);
  EXPECT_EQ(evict_pending(4), 0);
  EXPECT_EQ(evict_pending(3), flood_oldest);  // not the older honest one: its address has one
  EXPECT_EQ(pending_handshakes(), 3u);
  EXPECT_EQ(evict_pending(1), children_[2]);
  EXPECT_EQ(evict_pending(1), honest);  // now every address has one: the oldest overall
  EXPECT_EQ(evict_pending(1), 0);
}

TEST_F(SessionTable, AnEvictedHandshakeCannotBecomeASession) {
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t pid = fork();
  if (pid == 0) {  // a handshake that finishes after the listener evicted it, before the kill came
    claim("10.0.0.5");
    char c = 1;
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    unsigned live;
    _exit(admit("", 0, &live) == Admit::kEvicted ? 7 : 0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(evict_pending(0), pid);
  ASSERT_EQ(write(go[1], &c, 1), 1);
  int st = 0;
  waitpid(pid, &st, 0);
  release(pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << st;
  EXPECT_EQ(live_sessions(), 0u);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

// Issue 17, the quotas: per session, per tenant across processes, and in total.
TEST_F(SessionTable, MemoryIsCountedPerSessionPerTenantAndInTotalAcrossProcesses) {
  session("10.0.0.1", "alice", 600);
  session("10.0.0.2", "bob", 300);
  ASSERT_TRUE(claim("10.0.0.3"));
  unsigned live;
  ASSERT_EQ(admit("alice", 0, &live), Admit::kOk);
  std::string why;
  Limits l{500, 1000, 2000, "--memory-limit-mb", "--tenant-memory-limit-mb", "--total"};
  EXPECT_TRUE(reserve(kGpu, 300, l, &why)) << why;
  EXPECT_FALSE(reserve(kGpu, 300, l, &why));  // 600 > 500 for this session
  EXPECT_NE(why.find("--memory-limit-mb"), std::string::npos) << why;
  EXPECT_TRUE(reserve(kGpu, 100, l, &why)) << why;  // alice: 600 + 400 = 1000
  EXPECT_FALSE(reserve(kGpu, 1, l, &why));           // alice would pass 1000
  EXPECT_NE(why.find("tenant 'alice'"), std::string::npos) << why;
  EXPECT_NE(why.find("--tenant-memory-limit-mb"), std::string::npos) << why;
  EXPECT_EQ(held(kGpu), 400u);
  unreserve(kGpu, 400);
  EXPECT_EQ(held(kGpu), 0u);
  Limits total{0, 0, 1000, "", "", "--host-memory-limit-mb"};
  EXPECT_TRUE(reserve(kGpu, 100, total, &why)) << why;  // 600 + 300 + 100
  EXPECT_FALSE(reserve(kGpu, 1, total, &why));
  EXPECT_NE(why.find("--host-memory-limit-mb"), std::string::npos) << why;
  // The host count is apart from the GPU's.
  EXPECT_TRUE(reserve(kHost, 900, total, &why)) << why;
}

// Scans stop at the rows ever taken (Table::used), not at the first free one: a session whose row
// lies behind rows given back still counts. And without limits nothing is scanned, yet what a
// session holds is still counted (rgpu-smi, metrics).
TEST_F(SessionTable, SessionsBehindGivenBackRowsStillCountAndNoLimitStillCounts) {
  pid_t a = session("10.0.0.1", "alice", 100);
  pid_t b = session("10.0.0.2", "alice", 100);
  session("10.0.0.3", "alice", 700);
  for (pid_t p : {a, b}) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
    release(p);
  }
  ASSERT_TRUE(claim("10.0.0.4"));
  unsigned live;
  ASSERT_EQ(admit("alice", 0, &live), Admit::kOk);
  EXPECT_EQ(live, 1u);  // the third session, behind the two free rows
  Limits tenant{0, 1000, 0, "", "--tenant-memory-limit-mb", ""};
  EXPECT_EQ(headroom(kGpu, tenant), 300u);
  std::string why;
  EXPECT_FALSE(reserve(kGpu, 301, tenant, &why));
  EXPECT_EQ(headroom(kGpu, Limits{}), UINT64_MAX);
  EXPECT_TRUE(reserve(kGpu, 5000, Limits{}, &why)) << why;
  EXPECT_EQ(held(kGpu), 5000u);
}

TEST_F(SessionTable, WhatACrashedSessionHeldIsGivenBackWhenItIsReaped) {
  const pid_t crashed = session("10.0.0.1", "alice", 900);
  ASSERT_TRUE(claim("10.0.0.2"));
  unsigned live;
  ASSERT_EQ(admit("alice", 0, &live), Admit::kOk);
  Limits l{0, 1000, 0, "", "--tenant-memory-limit-mb", ""};
  std::string why;
  EXPECT_FALSE(reserve(kGpu, 200, l, &why));
  kill(crashed, SIGKILL);
  waitpid(crashed, nullptr, 0);
  release(crashed);
  EXPECT_TRUE(reserve(kGpu, 200, l, &why)) << why;
}

// Issue 17, defect 7: wrong tokens counted per address across processes.
TEST_F(SessionTable, FailedTokenProofsAreCountedPerAddressAcrossProcesses) {
  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      note_failure("192.0.2.7");
      _exit(0);
    }
    waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(failures("192.0.2.7").count, 3u);
  EXPECT_GT(failures("192.0.2.7").seconds_left, 50);
  EXPECT_EQ(failures("192.0.2.8").count, 0u);
  EXPECT_EQ(note_failure("192.0.2.7"), 4u);
  EXPECT_TRUE(take_ended_minutes(3).empty());  // its minute has not ended
}

// A process killed while it holds the table's lock (an evicted handshake, a crash) must not stop
// every other process at their next check.
TEST_F(SessionTable, AProcessKilledHoldingTheLockLeavesTheTableUsable) {
  session("10.0.0.1", "");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    char c = 1;
    (void)!write(ready[1], &c, 1);  // just before the lock: the parent waits a moment more
    hang_holding_the_lock_for_test();
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  std::atomic<bool> done{false};
  unsigned live = 0;
  std::thread t([&] {
    live = live_sessions();
    done = true;
  });
  for (int i = 0; i < 50 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(done.load()) << "the table stayed locked by a dead process";
  t.join();
  EXPECT_EQ(live, 1u);
  close(ready[0]);
  close(ready[1]);
}

// The listener's summary: an address whose minute ended with more failures than were logged one
// by one is reported once with its count, and its count starts again.
TEST_F(SessionTable, AnEndedMinuteWithMoreFailuresThanLoggedIsSummedUpOnceAndForgotten) {
  set_minute_for_test(1);
  for (int i = 0; i < 5; ++i) note_failure("198.51.100.1");
  note_failure("198.51.100.2");  // under the logged count: no summary
  EXPECT_TRUE(take_ended_minutes(3).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto ended = take_ended_minutes(3);
  set_minute_for_test(60);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first, "198.51.100.1");
  EXPECT_EQ(ended[0].second, 5u);
  EXPECT_TRUE(take_ended_minutes(3).empty());
  EXPECT_EQ(failures("198.51.100.1").count, 0u);
  EXPECT_EQ(note_failure("198.51.100.1"), 1u);
}

TEST(SessionTableHost, TheAddressOfAPeerNameDropsThePort) {
  EXPECT_EQ(host_of("10.1.2.3:5000"), "10.1.2.3");
  EXPECT_EQ(host_of("::1:5000"), "::1");
  EXPECT_EQ(host_of("[fe80::1]:5000"), "fe80::1");
  EXPECT_EQ(host_of("unknown peer"), "unknown peer");
}

// The token file (protocol/accept_loop.h parse_token_file).
TEST(TokenFile, HoldsATokenALineOrNameAndTokenSkippingCommentsAndBlankLines) {
  std::vector<Tenant> t;
  std::string err;
  ASSERT_TRUE(parse_token_file("# tenants\n\nalice  tok-a\r\n\tbob\ttok-b  \nunnamed-token\n", "f", &t, &err)) << err;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "alice");
  EXPECT_EQ(t[0].token, "tok-a");
  EXPECT_EQ(t[1].name, "bob");
  EXPECT_EQ(t[1].token, "tok-b");
  EXPECT_EQ(t[2].name, "");
  EXPECT_EQ(t[2].token, "unnamed-token");
  ServerHandshakeResult hs;
  hs.token_index = 1;
  EXPECT_EQ(proved_token(t, hs), "tok-b");
  hs.token_index = 7;
  EXPECT_EQ(proved_token(t, hs), "");
}

// Token files before tenants held a passphrase on their first line: it still is one token.
TEST(TokenFile, ALineOfMoreThanTwoWordsIsOnePassphraseToken) {
  std::vector<Tenant> t;
  std::string err;
  ASSERT_TRUE(parse_token_file("correct horse battery staple \r\n", "f", &t, &err)) << err;
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "");
  EXPECT_EQ(t[0].token, "correct horse battery staple");
}

TEST(TokenFile, RefusesWhatItCannotReadSayingWhereAndWhy) {
  std::vector<Tenant> t;
  std::string err;
  EXPECT_FALSE(parse_token_file("ok-token\nal/ice tok\n", "/etc/rgpu/tokens", &t, &err));
  EXPECT_NE(err.find("/etc/rgpu/tokens line 2: the tenant name 'al/ice'"), std::string::npos) << err;
  EXPECT_FALSE(parse_token_file("alice same\nbob same\n", "f", &t, &err));
  EXPECT_NE(err.find("same token as tenant 'alice'"), std::string::npos) << err;
  EXPECT_FALSE(parse_token_file("# only a comment\n\n", "f", &t, &err));
  EXPECT_NE(err.find("holds no token"), std::string::npos) << err;
}

}  // namespace
}  // namespace rgpu::proto::table
