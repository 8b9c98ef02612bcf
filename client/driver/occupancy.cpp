// cuOccupancyMaxPotentialBlockSize[WithFlags]: the caller may pass a host function mapping a block
// size to the dynamic shared memory it needs. That function lives in this process, so it is
// evaluated here for every block size the driver could try (1 .. the limit, at most 1024, the
// largest block any CUDA device allows) and the table travels instead; the server's own callback
// looks block sizes up in it. Without a function, dynamicSMemSize travels as the driver's.
//
// Wire: u64 function, u64 dynamicSMemSize, i32 blockSizeLimit, u32 flags (0 for the call without
//   flags), u32 n, n × u64 table (table[i] = bytes for block size i + 1; n = 0 without a function,
//   else n = the limit the server passes on). Reply: CUresult, i32 minGridSize, i32 blockSize.
#include <cuda.h>

#include <algorithm>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

constexpr int kMaxBlock = 1024;  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK on every CUDA device

CUresult potential_block_size(uint16_t op, const char* name, int* minGridSize, int* blockSize, CUfunction func,
                              CUoccupancyB2DSize b2d, size_t dynamicSMemSize, int blockSizeLimit, unsigned flags) {
  rgpu::client::trace_call(name);
  if (!minGridSize || !blockSize || blockSizeLimit < 0) return CUDA_ERROR_INVALID_VALUE;
  if (!func) return CUDA_ERROR_INVALID_HANDLE;
  Call c(op, rgpu::client::kWaits);
  c.args().put_u64(handle_id(func));
  c.args().put_u64(dynamicSMemSize);
  c.args().put<int32_t>(blockSizeLimit);
  c.args().put_u32(flags);
  if (!b2d) {
    c.args().put_u32(0);
  } else {
    int n = blockSizeLimit > 0 ? std::min(blockSizeLimit, kMaxBlock) : kMaxBlock;
    c.args().put_u32(static_cast<uint32_t>(n));
    for (int bs = 1; bs <= n; ++bs) c.args().put_u64(b2d(bs));
  }
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  int32_t grid = c.reply().i32(), block = c.reply().i32();
  if (!c.reply().ok()) return CUDA_ERROR_UNKNOWN;
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
