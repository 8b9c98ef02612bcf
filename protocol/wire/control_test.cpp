// protocol/wire/control.h: allocations ahead, host-callback frames, the session list and session
// control survive
// the trip, and the readers refuse counts over the limits.
#include "protocol/wire/control.h"

#include <gtest/gtest.h>

#include "protocol/messages.h"

namespace rgpu::proto::wire {
namespace {

TEST(WireControl, AnAllocAheadRequestAndItsReplyRoundTrip) {
  Writer w;
  put_alloc_ahead(w, {4096, 3});
  put_alloc_ahead_reply(w, 0xd000, {0xe000, 0xf000});
  Reader r(w.buf().data(), w.buf().size());
  AllocAhead req;
  uint64_t first = 0;
  std::vector<uint64_t> more;
  ASSERT_TRUE(read_alloc_ahead(r, &req));
  ASSERT_TRUE(read_alloc_ahead_reply(r, &first, &more));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(req.size, 4096u);
  EXPECT_EQ(req.extra, 3u);
  EXPECT_EQ(first, 0xd000u);
  EXPECT_EQ(more, (std::vector<uint64_t>{0xe000, 0xf000}));
  Writer big;
  big.put_u64(0xd000);
  big.put_u32(kMaxAllocAhead + 1);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_alloc_ahead_reply(rb, &first, &more));
}

TEST(WireControl, AnAllocManyRequestAndItsReplyRoundTrip) {
  Writer w;
  put_alloc_many(w, {{512, 2}, {4096, 1}});
  put_alloc_many_reply(w, {{0xa000, 0xa200}, {}});
  Reader r(w.buf().data(), w.buf().size());
  AllocSizes want;
  std::vector<std::vector<uint64_t>> made;
  ASSERT_TRUE(read_alloc_many(r, &want));
  ASSERT_TRUE(read_alloc_many_reply(r, &made));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(want, (AllocSizes{{512, 2}, {4096, 1}}));
  EXPECT_EQ(made, (std::vector<std::vector<uint64_t>>{{0xa000, 0xa200}, {}}));
}

TEST(WireControl, AllocManyReadersRefuseCountsThePayloadOrTheLimitsDoNotAllow) {
  Writer sizes;  // k entries announced, one present
  sizes.put_u32(2);
  sizes.put_u64(512);
  sizes.put_u32(1);
  Reader rs(sizes.buf().data(), sizes.buf().size());
  AllocSizes want;
  EXPECT_FALSE(read_alloc_many(rs, &want));
  // Over kMaxAllocMany sizes is the server's to refuse (CUDA_ERROR_INVALID_VALUE), not malformed.
  Writer many;
  put_alloc_many(many, AllocSizes(kMaxAllocMany + 1, {512, 1}));
  Reader rm(many.buf().data(), many.buf().size());
  ASSERT_TRUE(read_alloc_many(rm, &want));
  EXPECT_EQ(want.size(), kMaxAllocMany + 1);
  std::vector<std::vector<uint64_t>> made;
  Writer k;
  k.put_u32(kMaxAllocMany + 1);
  Reader rk(k.buf().data(), k.buf().size());
  EXPECT_FALSE(read_alloc_many_reply(rk, &made));
  Writer total;  // two entries that together announce more addresses than allowed
  total.put_u32(2);
  total.put_u32(kMaxAllocManyCount);
  Reader rt(total.buf().data(), total.buf().size());
  EXPECT_FALSE(read_alloc_many_reply(rt, &made));
}

TEST(WireControl, CallbackFramesHaveTheirExactSizes) {
  Writer cb;
  put_callback(cb, {77, 700, 1});
  ASSERT_EQ(cb.buf().size(), kCallbackFrame);
  Reader r(cb.buf().data(), cb.buf().size());
  Callback got;
  ASSERT_TRUE(read_callback(r, &got));
  EXPECT_EQ(got.id, 77u);
  EXPECT_EQ(got.status, 700);
  EXPECT_EQ(got.run, 1u);
  Writer done;
  put_callback_done(done, 77);
  ASSERT_EQ(done.buf().size(), kCallbackDoneFrame);
  Reader rd(done.buf().data(), done.buf().size());
  uint64_t id = 0;
  ASSERT_TRUE(read_callback_done(rd, &id));
  EXPECT_EQ(id, 77u);
  done.put_u8(0);  // a byte too many
  Reader rl(done.buf().data(), done.buf().size());
  EXPECT_FALSE(read_callback_done(rl, &id));
  Reader rs(cb.buf().data(), cb.buf().size() - 1);
  EXPECT_FALSE(read_callback(rs, &got));
}

TEST(WireControl, TheSessionListRoundTrips) {
  Writer w;
  put_sessions(w, {{12, "alice@host", "127.0.0.1:5", 1700000000, true}, {13, "", "", 0, false}});
  Reader r(w.buf().data(), w.buf().size());
  std::vector<SessionEntry> got;
  ASSERT_TRUE(read_sessions(r, &got));
  EXPECT_EQ(r.left(), 0u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].pid, 12u);
  EXPECT_EQ(got[0].identity, "alice@host");
  EXPECT_EQ(got[0].peer, "127.0.0.1:5");
  EXPECT_EQ(got[0].start, 1700000000u);
  EXPECT_TRUE(got[0].self);
  EXPECT_FALSE(got[1].self);
  EXPECT_FALSE(got[0].counted);

  SessionEntry counted{14, "bob@host", "127.0.0.1:6", 1700000001, false, true, 64 << 20, 1234, 56789};
  Writer wc;
  put_sessions(wc, {counted});
  Reader rc(wc.buf().data(), wc.buf().size());
  ASSERT_TRUE(read_sessions(rc, &got));
  EXPECT_EQ(rc.left(), 0u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].counted);
  EXPECT_EQ(got[0].gpu_bytes, 64u << 20);
  EXPECT_EQ(got[0].calls, 1234u);
  EXPECT_EQ(got[0].calls_per_s_milli, 56789u);
  // An older server's list ends after the entries: read without counts.
  Writer old;
  old.put_u32(1);
  old.put_u32(15);
  old.put_str("carol");
  old.put_str("peer");
  old.put_u64(1);
  old.put_u8(0);
  Reader ro(old.buf().data(), old.buf().size());
  ASSERT_TRUE(read_sessions(ro, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].counted);
  Writer big;
  big.put_u32(kMaxSessions + 1);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_sessions(rb, &got));
}

// Seen in wire_control_fuzz's slow runs: counts within the limits with nothing behind them made
// a few bytes size thousands of entries before the read failed.
TEST(WireControl, ReadersRefuseCountsTheBytesBehindThemCannotHold) {
  std::vector<SessionEntry> sessions;
  Writer s;
  s.put_u32(kMaxSessions);
  s.append(std::vector<uint8_t>(40, 0).data(), 40);  // room for one entry, not 4096
  Reader rs(s.buf().data(), s.buf().size());
  EXPECT_FALSE(read_sessions(rs, &sessions));
  EXPECT_LE(sessions.size(), 2u);

  std::vector<std::vector<uint64_t>> made;
  Writer k;
  k.put_u32(kMaxAllocMany);
  k.put_u32(0);
  Reader rk(k.buf().data(), k.buf().size());
  EXPECT_FALSE(read_alloc_many_reply(rk, &made));
  EXPECT_LE(made.size(), 1u);
  Writer n;
  n.put_u32(1);
  n.put_u32(kMaxAllocManyCount);
  n.put_u64(0x1000);
  Reader rn(n.buf().data(), n.buf().size());
  made.clear();
  EXPECT_FALSE(read_alloc_many_reply(rn, &made));
  for (const auto& m : made) EXPECT_LE(m.size(), 1u);
}

TEST(WireControl, ASessionControlRequestHasItsExactSizeAndItsReplyRoundTrips) {
  Writer w;
  put_session_control(w, {kSessionMigrate, 4321, 1});
  ASSERT_EQ(w.buf().size(), kSessionControlFrame);
  Reader r(w.buf().data(), w.buf().size());
  SessionControl got;
  ASSERT_TRUE(read_session_control(r, &got));
  EXPECT_EQ(got.action, kSessionMigrate);
  EXPECT_EQ(got.pid, 4321u);
  EXPECT_EQ(got.gpu, 1);
  Reader shorter(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(read_session_control(shorter, &got));

  Writer reply;
  put_session_control_reply(reply, {"session 4321 is not suspended", 0});
  Reader rr(reply.buf().data(), reply.buf().size());
  SessionControlReply back;
  ASSERT_TRUE(read_session_control_reply(rr, &back));
  EXPECT_EQ(back.message, "session 4321 is not suspended");
  EXPECT_EQ(back.state, 0);
  EXPECT_EQ(rr.left(), 0u);
  // A message over the limit is cut by the writer and refused by the reader.
  Writer cut;
  put_session_control_reply(cut, {std::string(kMaxSessionControlMessage + 10, 'x'), kSessionStateUnknown});
  Reader rc(cut.buf().data(), cut.buf().size());
  ASSERT_TRUE(read_session_control_reply(rc, &back));
  EXPECT_EQ(back.message.size(), kMaxSessionControlMessage);
  Writer big;
  big.put_u32(kMaxSessionControlMessage + 1);
  big.append(std::string(kMaxSessionControlMessage + 1, 'x').data(), kMaxSessionControlMessage + 1);
  big.put_u8(0);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_session_control_reply(rb, &back));
}

}  // namespace
}  // namespace rgpu::proto::wire
