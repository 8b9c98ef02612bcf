// protocol/wire/occupancy.h: occupancy queries and their replies survive the trip.
#include "protocol/wire/occupancy.h"

#include <gtest/gtest.h>

#include "protocol/messages.h"

namespace rgpu::proto::wire {
namespace {

TEST(WireOccupancy, APotentialBlockSizeQueryCarriesItsTable) {
  PotentialBlockSize q{9, 512, 256, 1, {10, 20, 30}};
  Writer w;
  put_potential_block_size(w, q);
  put_potential_block_size_reply(w, 80, 256);
  Reader r(w.buf().data(), w.buf().size());
  PotentialBlockSize got;
  int32_t grid = 0, block = 0;
  ASSERT_TRUE(read_potential_block_size(r, &got));
  ASSERT_TRUE(read_potential_block_size_reply(r, &grid, &block));
  EXPECT_EQ(got.function, 9u);
  EXPECT_EQ(got.dynamic_smem, 512u);
  EXPECT_EQ(got.block_size_limit, 256);
  EXPECT_EQ(got.flags, 1u);
  EXPECT_EQ(got.table, q.table);
  EXPECT_EQ(grid, 80);
  EXPECT_EQ(block, 256);
  Writer big;
  put_potential_block_size(big, PotentialBlockSize{1, 0, 0, 0, std::vector<uint64_t>(kMaxBlockTable + 1)});
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_potential_block_size(rb, &got));
}

TEST(WireOccupancy, AClusterTableQueryAndItsAnswerRoundTrip) {
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = 2;
  attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
  Writer w;
  put_launch_ex_head(w, 5, LaunchDims{{2, 1, 1}, {128, 1, 1}, 0}, 0, &attr, 1);
  put_cluster_widths(w, {2, 8, true});
  put_cluster_table(w, {{0, 66}, {0, 33}, {1, 0}});
  put_cluster_count(w, 7);
  Reader r(w.buf().data(), w.buf().size());
  Launch head;
  ClusterWidths widths;
  std::vector<std::pair<int32_t, int32_t>> table;
  int32_t clusters = 0;
  ASSERT_TRUE(read_launch_head(r, &head, true));
  ASSERT_TRUE(read_cluster_widths(r, &widths));
  ASSERT_TRUE(read_cluster_table(r, &table));
  ASSERT_TRUE(read_cluster_count(r, &clusters));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(head.function, 5u);
  ASSERT_EQ(head.attrs.size(), 1u);
  EXPECT_EQ(head.attrs[0].value.clusterDim.x, 2u);
  EXPECT_EQ(widths.first, 2u);
  EXPECT_EQ(widths.count, 8u);
  EXPECT_TRUE(widths.grid_follows);
  EXPECT_EQ(table, (std::vector<std::pair<int32_t, int32_t>>{{0, 66}, {0, 33}, {1, 0}}));
  EXPECT_EQ(clusters, 7);
  Writer big;
  big.put_u32(kMaxClusterTable + 1);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_cluster_table(rb, &table));
}

}  // namespace
}  // namespace rgpu::proto::wire
