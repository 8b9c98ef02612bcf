// MD2 against RFC 1319's test suite, and HMAC-MD2's structure.
#include "client/dark_api/md2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace rgpu::client::dark {
namespace {

std::string hex(const Md2Digest& d) {
  std::string s;
  char b[3];
  for (uint8_t c : d) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}

std::string md2_hex(const std::string& s) { return hex(md2(s.data(), s.size())); }

TEST(Md2, MatchesTheRfc1319TestSuite) {
  EXPECT_EQ(md2_hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(md2_hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(md2_hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(md2_hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(md2_hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(md2_hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "da33def2a42df13975352846c30338cd");
  EXPECT_EQ(md2_hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(Md2, GivesTheSameDigestWhateverTheSplitOfItsInput) {
  std::string s = "12345678901234567890123456789012345678901234567890123456789012345678901234567890";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    Md2 h;
    h.update(s.data(), cut);
    h.update(s.data() + cut, s.size() - cut);
    EXPECT_EQ(hex(h.finish()), "d5976f79d83d3a0dc9806c3c66f3efd8") << cut;
  }
}

TEST(HmacMd2, IsMd2OfOuterPadThenMd2OfInnerPadThenMessage) {
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 7 + 1);
  std::string msg = "what the integrity check hashes";
  std::string inner;
  for (uint8_t k : key) inner += static_cast<char>(k ^ 0x36);
  inner += msg;
  Md2Digest inner_digest = md2(inner.data(), inner.size());
  std::string outer;
  for (uint8_t k : key) outer += static_cast<char>(k ^ 0x5c);
  outer.append(reinterpret_cast<const char*>(inner_digest.data()), 16);
  EXPECT_EQ(hex(hmac_md2(key, msg.data(), msg.size())), hex(md2(outer.data(), outer.size())));
}

}  // namespace
}  // namespace rgpu::client::dark
