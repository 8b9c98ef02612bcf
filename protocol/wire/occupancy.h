// Occupancy on the wire: cuOccupancyMaxPotentialBlockSize(WithFlags), cuOccupancyMaxActiveClusters
// and kOpClusterOccupancyTable. Used by client/driver/occupancy.cpp and
// client/driver/cached_answers.cpp, and by server/handlers/occupancy.cpp and
// server/handlers/library.cpp.
//
// Layout:
//  cuOccupancyMaxPotentialBlockSize(WithFlags): u64 function, u64 dynamicSMemSize, i32
//    blockSizeLimit, u32 flags (0 for the call without flags), u32 n (at most kMaxBlockTable),
//    n × u64 table. The caller's block-size → shared-memory function lives in the client
//    process, so the client evaluates it for every block size the driver could try and the
//    table travels instead: table[i] = bytes for block size i + 1; n = 0 without a function,
//    else n = the limit the server passes on. Reply: CUresult, i32 minGridSize, i32 blockSize.
//  cuOccupancyMaxActiveClusters: the head of cuLaunchKernelEx (protocol/wire/launch.h: u64
//    function, u32 grid x y z, u32 block x y z, u32 shared bytes, u64 stream, u32 n attrs, n ×
//    CUlaunchAttribute), without LaunchArgs. Reply: CUresult, i32 clusters.
//  kOpClusterOccupancyTable: that head, then u32 first width, u32 count (at most
//    kMaxClusterTable, protocol/messages.h), u8 1 when grid x follows the width. Reply:
//    CUresult; on success u32 count, count × (i32 the driver's result, i32 clusters) for cluster
//    widths first, first+1, ... (one round trip where a PyTorch kernel probes widths one by one).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/launch.h"

namespace rgpu::proto::wire {

inline constexpr uint32_t kMaxBlockTable = 1024;  // the largest block any CUDA device allows

struct PotentialBlockSize {
  uint64_t function = 0, dynamic_smem = 0;
  int32_t block_size_limit = 0;
  uint32_t flags = 0;
  std::vector<uint64_t> table;
};
void put_potential_block_size(Writer& w, const PotentialBlockSize& v);
bool read_potential_block_size(Reader& r, PotentialBlockSize* out);
void put_potential_block_size_reply(Writer& w, int32_t min_grid, int32_t block);
bool read_potential_block_size_reply(Reader& r, int32_t* min_grid, int32_t* block);

// cuOccupancyMaxActiveClusters: put_launch_ex_head / read_launch_head(with_attrs) (launch.h).
void put_cluster_count(Writer& w, int32_t clusters);
bool read_cluster_count(Reader& r, int32_t* clusters);

// kOpClusterOccupancyTable, after the head.
struct ClusterWidths {
  uint32_t first = 0, count = 0;
  bool grid_follows = false;
};
void put_cluster_widths(Writer& w, const ClusterWidths& v);
bool read_cluster_widths(Reader& r, ClusterWidths* out);
// Its reply after the CUresult: (result, clusters) per width. The reader refuses more than
// kMaxClusterTable entries.
void put_cluster_table(Writer& w, const std::vector<std::pair<int32_t, int32_t>>& v);
bool read_cluster_table(Reader& r, std::vector<std::pair<int32_t, int32_t>>* out);

}  // namespace rgpu::proto::wire
