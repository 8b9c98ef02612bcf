// protocol/wire/copy.h: copy heads survive the trip with their bytes; hostile sizes are refused.
#include "protocol/wire/copy.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rgpu::proto::wire {
namespace {

TEST(WireCopy, HostToDeviceCarriesItsBytesAfterTheHead) {
  for (bool async : {false, true}) {
    Writer w;
    const char data[5] = "abcd";
    put_htod_head(w, async, 0x1000, 7, 4);
    w.append(data, 4);  // what Call::attach sends behind the head
    Reader r(w.buf().data(), w.buf().size());
    HtoD got;
    ASSERT_TRUE(read_htod(r, async, &got));
    EXPECT_EQ(got.dst, 0x1000u);
    EXPECT_EQ(got.stream, async ? 7u : 0u);
    ASSERT_EQ(got.n, 4u);
    EXPECT_EQ(std::memcmp(got.data, data, 4), 0);
    EXPECT_EQ(r.left(), 0u);
    Reader short_r(w.buf().data(), w.buf().size() - 1);
    EXPECT_FALSE(read_htod(short_r, async, &got));
  }
}

TEST(WireCopy, DeviceToHostRoundTripsAndRefusesMoreThanAFrame) {
  for (bool async : {false, true}) {
    Writer w;
    put_dtoh(w, async, {0x2000, 3, 1 << 20, 9});
    Reader r(w.buf().data(), w.buf().size());
    DtoH got;
    ASSERT_TRUE(read_dtoh(r, async, &got));
    EXPECT_EQ(got.src, 0x2000u);
    EXPECT_EQ(got.n, 1u << 20);
    EXPECT_EQ(got.stream, async ? 3u : 0u);
    EXPECT_EQ(got.delivery, async ? 9u : 0u);
    EXPECT_EQ(r.left(), 0u);
    Writer big;
    put_dtoh(big, async, {0, 0, kMaxCopyBytes + 1, 0});
    Reader rb(big.buf().data(), big.buf().size());
    EXPECT_FALSE(read_dtoh(rb, async, &got));
  }
}

TEST(WireCopy, AsyncDataHeadRoundTrips) {
  uint8_t head[kAsyncDataHead];
  put_async_data_head(head, 0x1122334455667788ull, -3);
  Reader r(head, sizeof head);
  uint64_t id = 0;
  int32_t status = 0;
  ASSERT_TRUE(read_async_data_head(r, &id, &status));
  EXPECT_EQ(id, 0x1122334455667788ull);
  EXPECT_EQ(status, -3);
}

TEST(WireCopy, APitchedCopyFromHostCarriesExactlyItsBox) {
  PitchedCopy c;
  c.stream = 4;
  c.src.kind = CopySide::kHost;
  c.src.pitch = 8, c.src.height = 2;
  c.dst.kind = CopySide::kArray;
  c.dst.value = 77;
  c.dst.x = 1, c.dst.y = 2, c.dst.z = 3, c.dst.lod = 0;
  c.width = 8, c.height = 2, c.depth = 1;
  Writer w;
  put_pitched_copy_head(w, true, c);
  std::vector<uint8_t> box(16, 0x5a);
  w.append(box.data(), box.size());
  Reader r(w.buf().data(), w.buf().size());
  PitchedCopy got;
  ASSERT_TRUE(read_pitched_copy(r, true, false, &got));
  EXPECT_EQ(got.stream, 4u);
  EXPECT_EQ(got.dst.kind, static_cast<uint32_t>(CopySide::kArray));
  EXPECT_EQ(got.dst.value, 77u);
  EXPECT_EQ(got.dst.z, 3u);
  EXPECT_EQ(got.host_bytes, 16u);
  ASSERT_NE(got.data, nullptr);
  EXPECT_EQ(got.data[15], 0x5a);
  EXPECT_EQ(r.left(), 0u);
}

TEST(WireCopy, PitchedCopiesRefuseUnknownKindsBadDepthsAndHostileSizes) {
  auto refused = [](const PitchedCopy& c, bool three_d, size_t extra_bytes) {
    Writer w;
    put_pitched_copy_head(w, false, c);
    w.buf().resize(w.buf().size() + extra_bytes);
    Reader r(w.buf().data(), w.buf().size());
    PitchedCopy got;
    return !read_pitched_copy(r, false, three_d, &got);
  };
  PitchedCopy c;
  c.width = 4, c.height = 1, c.depth = 2;
  EXPECT_TRUE(refused(c, false, 0));   // a 2D copy of depth 2
  EXPECT_FALSE(refused(c, true, 0));   // fine in 3D, device to device
  c.src.kind = 3;                      // no such kind
  EXPECT_TRUE(refused(c, true, 0));
  c.src.kind = CopySide::kDevice;
  c.dst.kind = CopySide::kHost;
  c.width = 1ull << 32, c.height = 1ull << 32, c.depth = 1;  // W*H overflows 64 bits' sense
  EXPECT_TRUE(refused(c, true, 0));
  c.width = 0;  // a host side of no bytes
  EXPECT_TRUE(refused(c, true, 0));
  c.width = 4, c.height = 1, c.depth = 1;
  c.src.kind = CopySide::kHost;
  c.dst.kind = CopySide::kDevice;
  EXPECT_TRUE(refused(c, true, 3));   // fewer bytes than W*H*D
  EXPECT_FALSE(refused(c, true, 4));  // exactly W*H*D
}

TEST(WireCopy, CopiesBetweenServersRoundTripAndRefuseTruncation) {
  PeerSend send{7, "gpu-b.example", 9713, {}, 0x7f0000001000, (16u << 20) + 3, true, 0x2001};
  send.ticket[0] = 0xab, send.ticket[31] = 0xcd;
  Writer w;
  put_peer_send(w, send);
  Reader r(w.buf().data(), w.buf().size());
  PeerSend got;
  ASSERT_TRUE(read_peer_send(r, &got));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(got.copy, 7u);
  EXPECT_EQ(got.host, "gpu-b.example");
  EXPECT_EQ(got.port, 9713);
  EXPECT_EQ(got.ticket, send.ticket);
  EXPECT_EQ(got.src, send.src);
  EXPECT_EQ(got.n, send.n);
  EXPECT_TRUE(got.has_stream);
  EXPECT_EQ(got.stream, 0x2001u);
  Reader cut(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(read_peer_send(cut, &got));

  Writer w2;
  put_peer_receive(w2, {9, 0x7f0000002000, 1, false, 0});
  Reader r2(w2.buf().data(), w2.buf().size());
  PeerReceive rec;
  ASSERT_TRUE(read_peer_receive(r2, &rec));
  EXPECT_EQ(rec.copy, 9u);
  EXPECT_EQ(rec.dst, 0x7f0000002000u);
  EXPECT_EQ(rec.n, 1u);
  EXPECT_FALSE(rec.has_stream);
  Reader cut2(w2.buf().data(), 8);
  EXPECT_FALSE(read_peer_receive(cut2, &rec));
}

}  // namespace
}  // namespace rgpu::proto::wire
