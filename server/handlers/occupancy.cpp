// cuOccupancyMaxPotentialBlockSize[WithFlags] (wire layout in client/driver/occupancy.cpp). The
// client's block-size → shared-memory function arrives as a table; the driver gets a callback
// that reads it through a thread_local pointer (the driver calls it on the calling thread, before
// the call returns).
#include <cuda.h>

#include <vector>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

constexpr uint32_t kMaxBlock = 1024;

thread_local const std::vector<size_t>* t_table = nullptr;

size_t CUDA_CB from_table(int block_size) {
  // The limit passed on is the table's length, so the driver asks for nothing outside it.
  if (!t_table || block_size < 1 || static_cast<size_t>(block_size) > t_table->size()) return 0;
  return (*t_table)[block_size - 1];
}

void potential_block_size(Dispatch& d, bool with_flags) {
  uint64_t fid = d.args.u64();
  uint64_t dyn = d.args.u64();
  int32_t limit = d.args.i32();
  uint32_t flags = d.args.u32();
  uint32_t n = d.args.u32();
  if (!d.args.ok() || n > kMaxBlock) {
    d.args.fail();
    return;
  }
  std::vector<size_t> table(n);
  for (auto& v : table) v = d.args.u64();
  if (!d.args.ok()) return;
  if (limit < 0 || (!with_flags && flags != 0)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUfunction f;
  if (!d.handles.get(fid, &f) || !f) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  CUoccupancyB2DSize cb = n ? from_table : nullptr;
  if (n) limit = static_cast<int32_t>(n);
  int grid = 0, block = 0;
  CUresult rc;
  t_table = &table;
  if (with_flags) {
    if (!d.drv.cuOccupancyMaxPotentialBlockSizeWithFlags) rc = CUDA_ERROR_NOT_SUPPORTED;
    else rc = d.drv.cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, cb, dyn, limit, flags);
  } else {
    if (!d.drv.cuOccupancyMaxPotentialBlockSize) rc = CUDA_ERROR_NOT_SUPPORTED;
    else rc = d.drv.cuOccupancyMaxPotentialBlockSize(&grid, &block, f, cb, dyn, limit);
  }
  t_table = nullptr;
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) {
    d.reply.put<int32_t>(grid);
    d.reply.put<int32_t>(block);
  }
}

}  // namespace

void cuOccupancyMaxPotentialBlockSize(Dispatch& d) { potential_block_size(d, false); }
void cuOccupancyMaxPotentialBlockSizeWithFlags(Dispatch& d) { potential_block_size(d, true); }

}  // namespace rgpu::server::handlers
