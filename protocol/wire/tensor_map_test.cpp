// protocol/wire/tensor_map.h: each encode form survives the trip with the arrays its rank gives;
// ranks out of range are refused before an element is read.
#include "protocol/wire/tensor_map.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rgpu::proto::wire {
namespace {

TensorMapEncode sample(uint32_t rank) {
  TensorMapEncode v;
  v.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  v.rank = rank;
  v.address = 0xd0000000;
  for (uint32_t i = 0; i < rank; ++i) {
    v.dims[i] = 64 << i;
    v.strides[i] = i + 1 < rank ? 128u << i : 0;
    v.box[i] = 8 + i;
    v.elem[i] = 1;
    v.lower[i] = -static_cast<int32_t>(i);
    v.upper[i] = static_cast<int32_t>(i);
  }
  v.channels = 4, v.pixels = 8;
  v.interleave = 0, v.mode = 1, v.swizzle = 2, v.l2 = 1, v.oob = 0;
  return v;
}

TEST(WireTensorMap, EveryFormRoundTrips) {
  for (TensorMapForm form : {TensorMapForm::kTiled, TensorMapForm::kIm2col, TensorMapForm::kIm2colWide}) {
    TensorMapEncode v = sample(4);
    Writer w;
    put_tensor_map_encode(w, form, v);
    Reader r(w.buf().data(), w.buf().size());
    TensorMapEncode got;
    ASSERT_TRUE(read_tensor_map_encode(r, form, &got));
    EXPECT_EQ(r.left(), 0u);
    EXPECT_EQ(got.rank, 4u);
    EXPECT_EQ(got.address, v.address);
    EXPECT_EQ(got.dims[3], v.dims[3]);
    EXPECT_EQ(got.strides[2], v.strides[2]);
    EXPECT_EQ(got.strides[3], 0u);  // rank-1 strides only
    EXPECT_EQ(got.elem[3], 1u);
    EXPECT_EQ(got.swizzle, 2u);
    if (form == TensorMapForm::kTiled) EXPECT_EQ(got.box[3], 11u);
    if (form == TensorMapForm::kIm2col) EXPECT_EQ(got.upper[1], 1);
    if (form != TensorMapForm::kTiled) EXPECT_EQ(got.pixels, 8u);
    EXPECT_EQ(got.mode, form == TensorMapForm::kIm2colWide ? 1u : 0u);
  }
}

TEST(WireTensorMap, RanksOutOfRangeAreRefused) {
  for (auto [form, rank] : {std::pair{TensorMapForm::kTiled, 0u}, std::pair{TensorMapForm::kTiled, 6u},
                            std::pair{TensorMapForm::kIm2col, 2u}, std::pair{TensorMapForm::kIm2colWide, 6u}}) {
    Writer w;
    w.put_u32(0);
    w.put_u32(rank);
    w.put_u64(0);
    w.buf().resize(w.buf().size() + 512);
    Reader r(w.buf().data(), w.buf().size());
    TensorMapEncode got;
    EXPECT_FALSE(read_tensor_map_encode(r, form, &got)) << rank;
  }
}

TEST(WireTensorMap, ReplaceAddressAndTheMapRoundTrip) {
  CUtensorMap map;
  for (size_t i = 0; i < sizeof map; ++i) reinterpret_cast<uint8_t*>(&map)[i] = static_cast<uint8_t>(i);
  Writer w;
  put_tensor_map_replace_address(w, map, 0xabc0);
  put_tensor_map(w, map);
  Reader r(w.buf().data(), w.buf().size());
  CUtensorMap a, b;
  uint64_t address = 0;
  ASSERT_TRUE(read_tensor_map_replace_address(r, &a, &address));
  ASSERT_TRUE(read_tensor_map(r, &b));
  EXPECT_EQ(address, 0xabc0u);
  EXPECT_EQ(std::memcmp(&a, &map, sizeof map), 0);
  EXPECT_EQ(std::memcmp(&b, &map, sizeof map), 0);
}

}  // namespace
}  // namespace rgpu::proto::wire
