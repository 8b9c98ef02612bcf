// Fuzz target for protocol/wire/occupancy.h: the server decodes the client's occupancy queries,
// the client decodes the answers, so any bytes must decode or be refused without reading past the
// end or allocating past the limits. The first byte picks the message. What decodes must
// re-encode to bytes that decode and re-encode to the same bytes again.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/occupancy.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k % 4) {
    case 0: {
      PotentialBlockSize m;
      int32_t grid, block;
      if (!read_potential_block_size(r, &m) || !read_potential_block_size_reply(r, &grid, &block)) return false;
      put_potential_block_size(*out, m);
      put_potential_block_size_reply(*out, grid, block);
      return true;
    }
    case 1: {
      Launch head;
      ClusterWidths widths;
      if (!read_launch_head(r, &head, true) || !read_cluster_widths(r, &widths)) return false;
      put_launch_ex_head(*out, head.function, head.dims, head.stream, head.attrs.data(),
                         static_cast<uint32_t>(head.attrs.size()));
      put_cluster_widths(*out, widths);
      return true;
    }
    case 2: {
      std::vector<std::pair<int32_t, int32_t>> table;
      if (!read_cluster_table(r, &table)) return false;
      put_cluster_table(*out, table);
      return true;
    }
    default: {
      int32_t clusters;
      if (!read_cluster_count(r, &clusters)) return false;
      put_cluster_count(*out, clusters);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer pb;
  put_potential_block_size(pb, {1, 0, 256, 0, {1, 2, 3, 4}});
  put_potential_block_size_reply(pb, 1, 256);
  seed(0, pb);
  Writer cq;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  put_launch_ex_head(cq, 1, LaunchDims{{2, 1, 1}, {64, 1, 1}, 0}, 0, &attr, 1);
  put_cluster_widths(cq, {2, 4, true});
  seed(1, cq);
  Writer t;
  put_cluster_table(t, {{0, 1}, {0, 2}});
  seed(2, t);
  Writer c;
  put_cluster_count(c, 3);
  seed(3, c);
}
