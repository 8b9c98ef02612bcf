// protocol/wire/mapped.h: every mapped- and managed-memory message survives the trip.
#include "protocol/wire/mapped.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rgpu::proto::wire {
namespace {

TEST(WireMapped, AllocationsFreesAndCopiesRoundTrip) {
  Writer w;
  put_mapped_alloc(w, {0x7f0000001000, 1 << 16, 2});
  put_mapped_alloc_reply(w, {0xd000, 0x7f0000001000});
  put_managed_alloc(w, {4096, 1});
  put_managed_alloc_reply(w, 0x600000000000);
  put_mapped_free(w, 0x7f0000001000);
  put_mapped_copy(w, {321, 0xd000, 5, 0x7f0000001008, 64});
  Reader r(w.buf().data(), w.buf().size());
  MappedAlloc a;
  MappedAllocReply ar;
  ManagedAlloc m;
  uint64_t managed = 0, freed = 0;
  MappedCopy c;
  ASSERT_TRUE(read_mapped_alloc(r, &a));
  ASSERT_TRUE(read_mapped_alloc_reply(r, &ar));
  ASSERT_TRUE(read_managed_alloc(r, &m));
  ASSERT_TRUE(read_managed_alloc_reply(r, &managed));
  ASSERT_TRUE(read_mapped_free(r, &freed));
  ASSERT_TRUE(read_mapped_copy(r, &c));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(a.address, 0x7f0000001000u);
  EXPECT_EQ(a.size, 1u << 16);
  EXPECT_EQ(a.flags, 2u);
  EXPECT_EQ(ar.dptr, 0xd000u);
  EXPECT_EQ(ar.server_address, 0x7f0000001000u);
  EXPECT_EQ(m.size, 4096u);
  EXPECT_EQ(m.flags, 1u);
  EXPECT_EQ(managed, 0x600000000000u);
  EXPECT_EQ(freed, 0x7f0000001000u);
  EXPECT_EQ(c.op, 321u);
  EXPECT_EQ(c.stream, 5u);
  EXPECT_EQ(c.host, 0x7f0000001008u);
  EXPECT_EQ(c.n, 64u);
  for (size_t n = 0; n < 20; ++n) {
    Reader cut(w.buf().data(), n);
    EXPECT_FALSE(read_mapped_alloc(cut, &a)) << n;
  }
}

TEST(WireMapped, BytesRunToTheEndOfThePayloadAndTheHeadMatchesTheWriter) {
  Writer w;
  put_mapped_bytes(w, 0x1000, 8, "abc", 3);
  uint8_t head[kMappedBytesHead];
  put_mapped_bytes_head(head, 0x1000, 8);
  EXPECT_EQ(std::memcmp(head, w.buf().data(), sizeof head), 0);
  Reader r(w.buf().data(), w.buf().size());
  MappedBytes got;
  ASSERT_TRUE(read_mapped_bytes(r, &got));
  EXPECT_EQ(got.address, 0x1000u);
  EXPECT_EQ(got.offset, 8u);
  ASSERT_EQ(got.n, 3u);
  EXPECT_EQ(std::memcmp(got.bytes, "abc", 3), 0);

  Writer freed;
  put_mapped_bytes(freed, 0x2000, kManagedFreed, nullptr, 0);
  Reader rf(freed.buf().data(), freed.buf().size());
  ASSERT_TRUE(read_mapped_bytes(rf, &got));
  EXPECT_EQ(got.offset, kManagedFreed);
  EXPECT_EQ(got.n, 0u);
  Reader cut(freed.buf().data(), 15);
  EXPECT_FALSE(read_mapped_bytes(cut, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
