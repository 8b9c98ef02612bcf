// cuOccupancyMaxPotentialBlockSize[WithFlags]: the caller may pass a host function mapping a block
// size to the dynamic shared memory it needs. That function lives in this process, so it is
// evaluated here for every block size the driver could try (1 .. the limit, at most 1024, the
// largest block any CUDA device allows) and the table travels instead; the server's own callback
// looks block sizes up in it. Without a function, dynamicSMemSize travels as the driver's.
//
// Wire layout: protocol/wire/occupancy.h.
#include <cuda.h>

#include <algorithm>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/occupancy.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

constexpr int kMaxBlock = rgpu::proto::wire::kMaxBlockTable;  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK on every CUDA device

CUresult potential_block_size(uint16_t op, const char* name, int* minGridSize, int* blockSize, CUfunction func,
                              CUoccupancyB2DSize b2d, size_t dynamicSMemSize, int blockSizeLimit, unsigned flags) {
  rgpu::client::trace_call(name);
  if (!minGridSize || !blockSize || blockSizeLimit < 0) return CUDA_ERROR_INVALID_VALUE;
  if (!func) return CUDA_ERROR_INVALID_HANDLE;
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::PotentialBlockSize q{handle_id(func), dynamicSMemSize, blockSizeLimit, flags, {}};
  if (b2d) {
    int n = blockSizeLimit > 0 ? std::min(blockSizeLimit, kMaxBlock) : kMaxBlock;
    for (int bs = 1; bs <= n; ++bs) q.table.push_back(b2d(bs));
  }
  rgpu::proto::wire::put_potential_block_size(c.args(), q);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  int32_t grid = 0, block = 0;
  if (!rgpu::proto::wire::read_potential_block_size_reply(c.reply(), &grid, &block)) return CUDA_ERROR_UNKNOWN;
  *minGridSize = grid;
  *blockSize = block;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                              CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                              size_t dynamicSMemSize, int blockSizeLimit) {
  return potential_block_size(rgpu::op::cuOccupancyMaxPotentialBlockSize, "cuOccupancyMaxPotentialBlockSize",
                              minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                              blockSizeLimit, 0);
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize,
                                                                       CUfunction func,
                                                                       CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                       size_t dynamicSMemSize, int blockSizeLimit,
                                                                       unsigned int flags) {
  return potential_block_size(rgpu::op::cuOccupancyMaxPotentialBlockSizeWithFlags,
                              "cuOccupancyMaxPotentialBlockSizeWithFlags", minGridSize, blockSize, func,
                              blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit, flags);
}

}  // extern "C"
