#include "common/wire.h"

#include <gtest/gtest.h>

namespace rgpu {

TEST(Wire, RoundTripsScalarsStringsAndBytes) {
  Writer w;
  w.put_u8(7);
  w.put_u32(0xdeadbeef);
  w.put_u64(1ull << 40);
  w.put_i32(-5);
  w.put_str("hello");
  const char data[] = {1, 2, 3};
  w.put_bytes(data, sizeof data);
  Reader r(w.buf().data(), w.size());
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), 1ull << 40);
  EXPECT_EQ(r.i32(), -5);
  EXPECT_EQ(r.str(), "hello");
  size_t n = 0;
  const uint8_t* p = r.bytes(&n);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(p[2], 3);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.left(), 0u);
}

TEST(Wire, TruncatedInputLatchesFailureAndReturnsZeros) {
  uint8_t three[3] = {1, 2, 3};
  Reader r(three, sizeof three);
  EXPECT_EQ(r.u32(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.u8(), 0);  // stays failed even though a byte is left
}

TEST(Wire, LengthPrefixLargerThanWhatIsLeftIsRefused) {
  Writer w;
  w.put_u64(1ull << 62);  // claims an enormous byte string
  w.put_u8(1);
  Reader r(w.buf().data(), w.size());
  size_t n = 99;
  EXPECT_EQ(r.bytes(&n), nullptr);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(n, 0u);
}

TEST(Wire, StringOverItsLimitIsRefused) {
  Writer w;
  w.put_str(std::string(100, 'x'));
  Reader r(w.buf().data(), w.size());
  EXPECT_EQ(r.str(10), "");
  EXPECT_FALSE(r.ok());
}

}  // namespace rgpu
