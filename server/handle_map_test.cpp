// Tests of server/handle_map.h: what a client's handle ids may name, and the rules for binding,
// minting and forgetting them.
#include "server/handle_map.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace rgpu::server {
namespace {

constexpr uint64_t kId = proto::kFirstClientHandle;

void* handle(uintptr_t n) { return reinterpret_cast<void*>(n); }

TEST(HandleMap, NullAndTheTwoStreamSentinelsMapToThemselvesUnbound) {
  HandleMap m;
  for (uint64_t id : {0ull, 1ull, 2ull}) {
    void* p = handle(0xdead);
    ASSERT_TRUE(m.get_raw(id, &p));
    EXPECT_EQ(p, handle(id));
    EXPECT_EQ(m.id_for(handle(id)), id);
  }
}

TEST(HandleMap, IdsNeverBoundAreRefused) {
  HandleMap m;
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  void* p = nullptr;
  for (uint64_t id : {uint64_t{3}, kId - 1, kId + 1, proto::kServerMintedBit | 1, ~uint64_t{0}}) {
    EXPECT_FALSE(m.get_raw(id, &p)) << std::hex << id;
  }
  // A server-minted id is refused until the server mints it.
  const uint64_t minted = m.id_for(handle(0x6000));
  EXPECT_TRUE(m.get_raw(minted, &p));
  EXPECT_FALSE(m.get_raw(minted + 1, &p));
}

TEST(HandleMap, TypedGetGivesTheBoundHandle) {
  HandleMap m;
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  int* typed = nullptr;
  ASSERT_TRUE(m.get(kId, &typed));
  EXPECT_EQ(typed, static_cast<int*>(handle(0x5000)));
  int* untouched = reinterpret_cast<int*>(0x77);
  EXPECT_FALSE(m.get(kId + 1, &untouched));
  EXPECT_EQ(untouched, reinterpret_cast<int*>(0x77));
}

TEST(HandleMap, BindRefusesReservedServerMintedAndBoundIds) {
  HandleMap m;
  EXPECT_FALSE(m.bind(0, handle(0x5000)));
  EXPECT_FALSE(m.bind(2, handle(0x5000)));
  EXPECT_FALSE(m.bind(kId - 1, handle(0x5000)));
  EXPECT_FALSE(m.bind(proto::kServerMintedBit | kId, handle(0x5000)));
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  // A second bind of a bound id changes nothing: the first handle stays.
  EXPECT_FALSE(m.bind(kId, handle(0x6000)));
  void* p = nullptr;
  ASSERT_TRUE(m.get_raw(kId, &p));
  EXPECT_EQ(p, handle(0x5000));
  EXPECT_EQ(m.id_for(handle(0x5000)), kId);
  // The refused handle got no id of its own.
  EXPECT_NE(m.id_for(handle(0x6000)), kId);
}

TEST(HandleMap, IdForGivesTheClientsIdOrMintsOneServerIdPerHandle) {
  HandleMap m;
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  EXPECT_EQ(m.id_for(handle(0x5000)), kId);
  const uint64_t a = m.id_for(handle(0x6000));
  const uint64_t b = m.id_for(handle(0x7000));
  EXPECT_TRUE(a & proto::kServerMintedBit);
  EXPECT_TRUE(b & proto::kServerMintedBit);
  EXPECT_NE(a, b);
  EXPECT_EQ(m.id_for(handle(0x6000)), a);  // asked again: the same id
  void* p = nullptr;
  ASSERT_TRUE(m.get_raw(a, &p));
  EXPECT_EQ(p, handle(0x6000));
}

TEST(HandleMap, UnbindForgetsTheIdWhichMayThenBeBoundAgain) {
  HandleMap m;
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  m.unbind(kId);
  void* p = nullptr;
  EXPECT_FALSE(m.get_raw(kId, &p));
  // The driver's handle is forgotten too: asked for it, the server mints a new id.
  const uint64_t minted = m.id_for(handle(0x5000));
  EXPECT_NE(minted, kId);
  EXPECT_TRUE(minted & proto::kServerMintedBit);
  // The client may use the id again, for another handle.
  ASSERT_TRUE(m.bind(kId, handle(0x8000)));
  ASSERT_TRUE(m.get_raw(kId, &p));
  EXPECT_EQ(p, handle(0x8000));
  m.unbind(kId + 99);  // an id never bound: nothing happens
  EXPECT_TRUE(m.get_raw(kId, &p));
}

TEST(HandleMap, ServerMintedIdsAreNeverReusedAfterUnbind) {
  HandleMap m;
  const uint64_t a = m.id_for(handle(0x6000));
  m.unbind(a);
  void* p = nullptr;
  EXPECT_FALSE(m.get_raw(a, &p));
  const uint64_t b = m.id_for(handle(0x6000));
  EXPECT_NE(a, b);
}

TEST(HandleMap, TwoClientIdsForOneHandleEachStayValidWhenTheOtherGoes) {
  // cuModuleGetFunction twice for one name gives one CUfunction under two client ids.
  HandleMap m;
  ASSERT_TRUE(m.bind(kId, handle(0x5000)));
  ASSERT_TRUE(m.bind(kId + 1, handle(0x5000)));
  m.unbind(kId);
  void* p = nullptr;
  ASSERT_TRUE(m.get_raw(kId + 1, &p));
  EXPECT_EQ(p, handle(0x5000));
  EXPECT_EQ(m.id_for(handle(0x5000)), kId + 1);
}

TEST(HandleMap, ConcurrentBindsOfDistinctIdsAllLand) {
  HandleMap m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&m, t] {
      for (uint64_t i = 0; i < 1000; ++i) {
        const uint64_t id = kId + t * 1000 + i;
        m.bind(id, handle(0x100000 + id));
        m.id_for(handle(0x900000 + id));
      }
    });
  for (auto& th : threads) th.join();
  for (uint64_t id = kId; id < kId + 4000; ++id) {
    void* p = nullptr;
    ASSERT_TRUE(m.get_raw(id, &p));
    ASSERT_EQ(p, handle(0x100000 + id));
  }
}

TEST(HandleMap, MintsIdsThatCarryTheServerNumberItWasGiven) {
  HandleMap m;
  const uint64_t before = m.id_for(handle(0x6000));
  m.set_space(3);
  const uint64_t after = m.id_for(handle(0x7000));
  EXPECT_EQ((before & proto::kHandleServerMask) >> proto::kHandleServerShift, 0u);
  EXPECT_EQ((after & proto::kHandleServerMask) >> proto::kHandleServerShift, 3u);
  EXPECT_TRUE(after & proto::kServerMintedBit);
  void* p = nullptr;
  ASSERT_TRUE(m.get_raw(after, &p));
  EXPECT_EQ(p, handle(0x7000));
  // Client ids that carry a server number are client ids all the same.
  EXPECT_TRUE(m.bind(kId | (uint64_t{3} << proto::kHandleServerShift), handle(0x8000)));
}

}  // namespace
}  // namespace rgpu::server
