// protocol/wire/launch.h: a launch and its arguments survive the trip; hostile bytes are refused.
#include "protocol/wire/launch.h"

#include <gtest/gtest.h>

#include <cstring>

#include "protocol/messages.h"

namespace rgpu::proto::wire {
namespace {

TEST(WireLaunch, ALaunchWithPackedArgumentsRoundTrips) {
  Writer w;
  LaunchDims dims{{1, 2, 3}, {4, 5, 6}, 7};
  put_launch_head(w, 0x11, dims, 0x22);
  std::vector<ParamSlot> slots{{0, 4}, {8, 8}};
  size_t at = put_packed_args(w, slots, 16);
  uint32_t a = 0xdeadbeef;
  uint64_t b = 0x0123456789abcdef;
  std::memcpy(w.buf().data() + at, &a, 4);
  std::memcpy(w.buf().data() + at + 8, &b, 8);

  Reader r(w.buf().data(), w.buf().size());
  Launch l;
  ASSERT_TRUE(read_launch(r, &l, false));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(l.function, 0x11u);
  EXPECT_EQ(l.stream, 0x22u);
  EXPECT_EQ(l.dims.grid[2], 3u);
  EXPECT_EQ(l.dims.block[0], 4u);
  EXPECT_EQ(l.dims.shared_bytes, 7u);
  ASSERT_TRUE(l.args.bind());
  ASSERT_NE(l.args.params(), nullptr);
  EXPECT_EQ(l.args.extras(), nullptr);
  EXPECT_EQ(*static_cast<uint32_t*>(l.args.params()[0]), a);
  EXPECT_EQ(*static_cast<uint64_t*>(l.args.params()[1]), b);
}

TEST(WireLaunch, AnExtraBufferBecomesBufferPointerAndSize) {
  Writer w;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attr.value.priority = 3;
  put_launch_ex_head(w, 1, LaunchDims{}, 2, &attr, 1);
  const char buf[12] = "hello world";
  put_extra_args(w, buf, sizeof buf);

  Reader r(w.buf().data(), w.buf().size());
  Launch l;
  ASSERT_TRUE(read_launch(r, &l, true));
  ASSERT_EQ(l.attrs.size(), 1u);
  EXPECT_EQ(l.attrs[0].id, CU_LAUNCH_ATTRIBUTE_PRIORITY);
  EXPECT_EQ(l.attrs[0].value.priority, 3);
  ASSERT_TRUE(l.args.bind());
  EXPECT_EQ(l.args.params(), nullptr);
  void** e = l.args.extras();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e[0], CU_LAUNCH_PARAM_BUFFER_POINTER);
  EXPECT_EQ(std::memcmp(e[1], buf, sizeof buf), 0);
  EXPECT_EQ(e[2], CU_LAUNCH_PARAM_BUFFER_SIZE);
  EXPECT_EQ(*static_cast<size_t*>(e[3]), sizeof buf);
  EXPECT_EQ(e[4], CU_LAUNCH_PARAM_END);
}

TEST(WireLaunch, OwnedArgumentsOutliveTheMessage) {
  KernelArgs a;
  {
    Writer w;
    std::vector<ParamSlot> slots{{0, 4}};
    size_t at = put_packed_args(w, slots, 4);
    uint32_t v = 42;
    std::memcpy(w.buf().data() + at, &v, 4);
    Reader r(w.buf().data(), w.buf().size());
    ASSERT_TRUE(read_launch_args(r, &a));
    a.own();
    std::memset(w.buf().data(), 0xff, w.buf().size());
  }
  ASSERT_TRUE(a.bind());
  EXPECT_EQ(*static_cast<uint32_t*>(a.params()[0]), 42u);
}

TEST(WireLaunch, ASlotOutsideTheBufferDecodesButDoesNotBind) {
  Writer w;
  std::vector<ParamSlot> slots{{4, 8}};  // ends at 12, past 8 bytes
  put_packed_args(w, slots, 8);
  Reader r(w.buf().data(), w.buf().size());
  KernelArgs a;
  ASSERT_TRUE(read_launch_args(r, &a));
  EXPECT_FALSE(a.bind());
}

TEST(WireLaunch, TooManyParametersOrAttributesAreMalformed) {
  Writer w;
  w.put_u32(kMaxParams + 1);
  Reader r(w.buf().data(), w.buf().size());
  KernelArgs a;
  EXPECT_FALSE(read_launch_args(r, &a));
  EXPECT_FALSE(r.ok());

  Writer x;
  put_launch_head(x, 1, LaunchDims{}, 2);
  x.put_u32(kMaxLaunchAttrs + 1);
  Reader rx(x.buf().data(), x.buf().size());
  Launch l;
  EXPECT_FALSE(read_launch(rx, &l, true));
}

TEST(WireLaunch, EveryTruncationIsRefused) {
  Writer w;
  CUlaunchAttribute attr{};
  put_launch_ex_head(w, 1, LaunchDims{{1, 1, 1}, {1, 1, 1}, 0}, 2, &attr, 1);
  std::vector<ParamSlot> slots{{0, 8}};
  put_packed_args(w, slots, 8);
  for (size_t n = 0; n < w.buf().size(); ++n) {
    Reader r(w.buf().data(), n);
    Launch l;
    EXPECT_FALSE(read_launch(r, &l, true)) << "prefix of " << n << " bytes";
  }
}

}  // namespace
}  // namespace rgpu::proto::wire

namespace rgpu::proto::wire {
namespace {

TEST(WireLaunch, ParameterInfoLayoutsAndAttributesRoundTrip) {
  Writer w;
  put_param_info(w, {7, 2});
  put_param_info_reply(w, 16, 8);
  put_param_layout_ask(w, {7, static_cast<uint8_t>(ParamKind::kEither)});
  put_param_layout(w, {{{0, 8}, {8, 4}}, CUDA_ERROR_INVALID_VALUE, 1});
  put_func_attributes_ask(w, {7, 1, 0});
  put_func_attributes(w, {{0, CUDA_SUCCESS, 1024}, {1, CUDA_SUCCESS, 48}});
  Reader r(w.buf().data(), w.buf().size());
  ParamInfo info;
  uint64_t offset = 0, size = 0;
  ParamLayoutAsk ask;
  ParamLayout layout;
  FuncAttributesAsk attr_ask;
  std::vector<FuncAttribute> attrs;
  ASSERT_TRUE(read_param_info(r, &info));
  ASSERT_TRUE(read_param_info_reply(r, &offset, &size));
  ASSERT_TRUE(read_param_layout_ask(r, &ask));
  ASSERT_TRUE(read_param_layout(r, &layout));
  ASSERT_TRUE(read_func_attributes_ask(r, &attr_ask));
  ASSERT_TRUE(read_func_attributes(r, &attrs));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(info.index, 2u);
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(ask.kind, static_cast<uint8_t>(ParamKind::kEither));
  ASSERT_EQ(layout.params.size(), 2u);
  EXPECT_EQ(layout.params[1], (std::pair<uint64_t, uint64_t>{8, 4}));
  EXPECT_EQ(layout.end, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(layout.answered, 1u);
  EXPECT_EQ(attr_ask.kind, 1u);
  ASSERT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs[1].value, 48);
}

TEST(WireLaunch, LayoutsAndAttributeListsOverTheirLimitsAreRefused) {
  Writer w;
  w.put_u32(kMaxParamLayout + 1);
  Reader r(w.buf().data(), w.buf().size());
  ParamLayout layout;
  EXPECT_FALSE(read_param_layout(r, &layout));
  Writer kind;
  put_param_layout(kind, {{}, CUDA_ERROR_INVALID_VALUE, 2});  // answered by a kind that does not exist
  Reader rk(kind.buf().data(), kind.buf().size());
  EXPECT_FALSE(read_param_layout(rk, &layout));
  Writer attrs;
  attrs.put_u32(kMaxFuncAttributes + 1);
  Reader ra(attrs.buf().data(), attrs.buf().size());
  std::vector<FuncAttribute> got;
  EXPECT_FALSE(read_func_attributes(ra, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
