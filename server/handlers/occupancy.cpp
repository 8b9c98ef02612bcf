// cuOccupancyMaxPotentialBlockSize[WithFlags] (wire layout in protocol/wire/occupancy.h). The
// client's block-size → shared-memory function arrives as a table; the driver gets a callback
// that reads it through a thread_local pointer (the driver calls it on the calling thread, before
// the call returns).
#include <cuda.h>

#include <vector>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/occupancy.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

thread_local const std::vector<size_t>* t_table = nullptr;

size_t CUDA_CB from_table(int block_size) {
  // The limit passed on is the table's length, so the driver asks for nothing outside it.
  if (!t_table || block_size < 1 || static_cast<size_t>(block_size) > t_table->size()) return 0;
  return (*t_table)[block_size - 1];
}

void potential_block_size(Dispatch& d, bool with_flags) {
  proto::wire::PotentialBlockSize req;
  if (!proto::wire::read_potential_block_size(d.args, &req)) return;
  const uint64_t fid = req.function, dyn = req.dynamic_smem;
  int32_t limit = req.block_size_limit;
  const uint32_t flags = req.flags;
  const uint32_t n = static_cast<uint32_t>(req.table.size());
  std::vector<size_t> table(req.table.begin(), req.table.end());
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
  if (rc == CUDA_SUCCESS) proto::wire::put_potential_block_size_reply(d.reply, grid, block);
}

}  // namespace

void cuOccupancyMaxPotentialBlockSize(Dispatch& d) { potential_block_size(d, false); }
void cuOccupancyMaxPotentialBlockSizeWithFlags(Dispatch& d) { potential_block_size(d, true); }

}  // namespace rgpu::server::handlers
