// protocol/wire/module.h: image loads, loads by hash, symbol lookups and names survive the trip.
#include "protocol/wire/module.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace rgpu::proto::wire {
namespace {

TEST(WireModule, AnImageLoadCarriesItsBytesAfterTheHead) {
  Writer w;
  const char image[] = "\x7f" "ELF image";
  put_image_load_head(w, 42, sizeof image);
  w.append(image, sizeof image);  // what Call::attach sends behind the head
  Reader r(w.buf().data(), w.buf().size());
  ImageLoad got;
  ASSERT_TRUE(read_image_load(r, &got));
  EXPECT_EQ(got.id, 42u);
  ASSERT_EQ(got.n, sizeof image);
  EXPECT_EQ(std::memcmp(got.image, image, sizeof image), 0);
  Reader cut(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(read_image_load(cut, &got));
}

TEST(WireModule, ALoadByHashRoundTrips) {
  ModuleByHash v;
  v.id = 7;
  v.load_op = 1234;
  for (size_t i = 0; i < v.hash.size(); ++i) v.hash[i] = static_cast<uint8_t>(i * 7);
  Writer w;
  put_module_by_hash(w, v);
  EXPECT_EQ(w.buf().size(), 8u + 2u + 32u);
  Reader r(w.buf().data(), w.buf().size());
  ModuleByHash got;
  ASSERT_TRUE(read_module_by_hash(r, &got));
  EXPECT_EQ(got.id, 7u);
  EXPECT_EQ(got.load_op, 1234u);
  EXPECT_EQ(got.hash, v.hash);
  Reader cut(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(read_module_by_hash(cut, &got));
}

TEST(WireModule, SymbolLookupsAndNamesRoundTripAndLongNamesAreRefused) {
  Writer w;
  put_symbol_lookup(w, 3, 4, "_Z6kernelPf");
  put_symbol_name(w, "vector_add");
  Reader r(w.buf().data(), w.buf().size());
  SymbolLookup got;
  std::string name;
  ASSERT_TRUE(read_symbol_lookup(r, &got));
  ASSERT_TRUE(read_symbol_name(r, &name));
  EXPECT_EQ(got.id, 3u);
  EXPECT_EQ(got.parent, 4u);
  EXPECT_EQ(got.name, "_Z6kernelPf");
  EXPECT_EQ(name, "vector_add");
  std::string too_long(kMaxSymbolName + 1, 'k');
  Writer big;
  put_symbol_lookup(big, 1, 2, too_long.c_str());
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_symbol_lookup(rb, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
