// protocol/wire/nccl.h: NCCL's requests and replies survive the trip, and bad bytes are refused.
#include "protocol/wire/nccl.h"

#include <gtest/gtest.h>

namespace rgpu::proto::wire {
namespace {

TEST(WireNccl, CommInitCarriesTheIdRanksAndConfig) {
  NcclCommInit v;
  for (size_t i = 0; i < kNcclIdBytes; ++i) v.id[i] = static_cast<uint8_t>(i * 7);
  v.nranks = 4;
  v.rank = 3;
  v.config.present = true;
  v.config.version = 22809;
  v.config.blocking = 0;
  v.config.has_comm_name = true;
  v.config.comm_name = "pg0";
  Writer w;
  put_nccl_comm_init(w, v);
  Reader r(w.buf().data(), w.buf().size());
  NcclCommInit got;
  ASSERT_TRUE(read_nccl_comm_init(r, &got));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(0, memcmp(got.id, v.id, kNcclIdBytes));
  EXPECT_EQ(got.nranks, 4);
  EXPECT_EQ(got.rank, 3);
  EXPECT_TRUE(got.config.present);
  EXPECT_EQ(got.config.blocking, 0);
  EXPECT_EQ(got.config.min_ctas, INT32_MIN);
  EXPECT_FALSE(got.config.has_net_name);
  EXPECT_EQ(got.config.comm_name, "pg0");
  Reader cut(w.buf().data(), w.buf().size() - 1);
  EXPECT_FALSE(read_nccl_comm_init(cut, &got));
}

TEST(WireNccl, ConfigRefusesFlagsOtherThanZeroOrOne) {
  Writer w;
  w.put_u8(2);
  Reader r(w.buf().data(), w.buf().size());
  NcclConfig c;
  EXPECT_FALSE(read_nccl_config(r, &c));
}

TEST(WireNccl, CollectiveIsFixedSize) {
  NcclCollective v{1, 2, 3, 4, 7, 0, -1, 9};
  Writer w;
  put_nccl_collective(w, v);
  EXPECT_EQ(w.buf().size(), kNcclCollectiveBytes);
  Reader r(w.buf().data(), w.buf().size());
  NcclCollective got;
  ASSERT_TRUE(read_nccl_collective(r, &got));
  EXPECT_EQ(got.count, 4u);
  EXPECT_EQ(got.root, -1);
  EXPECT_EQ(got.stream, 9u);
}

TEST(WireNccl, DeviceListsAreBounded) {
  Writer w;
  put_nccl_devices(w, std::vector<int32_t>(kMaxNcclDevices + 1, 0));
  Reader r(w.buf().data(), w.buf().size());
  std::vector<int32_t> got;
  EXPECT_FALSE(read_nccl_devices(r, &got));
  Writer ok;
  put_nccl_devices(ok, {0, 1});
  Reader r2(ok.buf().data(), ok.buf().size());
  ASSERT_TRUE(read_nccl_devices(r2, &got));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1}));
}

TEST(WireNccl, ReplyCarriesTheDeferredErrorAndMessage) {
  Writer w;
  put_nccl_reply(w, {5, 2, kNcclAllReduce, "bad"});
  Reader r(w.buf().data(), w.buf().size());
  NcclReply got;
  ASSERT_TRUE(read_nccl_reply(r, &got));
  EXPECT_EQ(got.result, 5);
  EXPECT_EQ(got.deferred, 2);
  EXPECT_STREQ(nccl_op_name(got.deferred_op), "ncclAllReduce");
  EXPECT_EQ(got.message, "bad");
  EXPECT_EQ(nccl_op_name(kNcclLastOp + 1), nullptr);
}

TEST(WireNccl, TypeSizesFollowNcclDataType) {
  EXPECT_EQ(nccl_type_size(6), 2u);   // half
  EXPECT_EQ(nccl_type_size(9), 2u);   // bfloat16
  EXPECT_EQ(nccl_type_size(8), 8u);   // double
  EXPECT_EQ(nccl_type_size(12), 0u);  // ncclNumTypes
  EXPECT_EQ(nccl_type_size(-1), 0u);
}

}  // namespace
}  // namespace rgpu::proto::wire
