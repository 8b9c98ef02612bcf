// Virtual memory management (wire layouts in protocol/wire/memory.h). Allocation handles are the
// driver's 64-bit values and travel as is; the Windows-only pointer in CUmemAllocationProp is
// never taken from the wire.
#include <cuda.h>

#include <cstdint>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/memory.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {

void cuMemGetAllocationGranularity(Dispatch& d) {
  proto::wire::Granularity req;
  if (!proto::wire::read_granularity(d.args, &req)) return;
  CUmemAllocationProp prop = req.prop;
  const int32_t option = req.option;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!d.drv.cuMemGetAllocationGranularity) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  size_t g = 0;
  CUresult rc =
      d.drv.cuMemGetAllocationGranularity(&g, &prop, static_cast<CUmemAllocationGranularity_flags>(option));
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_u64_value(d.reply, g);
}

void cuMemCreate(Dispatch& d) {
  proto::wire::MemCreate req;
  if (!proto::wire::read_mem_create(d.args, &req)) return;
  const uint64_t size = req.size, flags = req.flags;
  CUmemAllocationProp prop = req.prop;
  if (!d.drv.cuMemCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = d.drv.cuMemCreate(&h, size, &prop, flags);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_u64_value(d.reply, h);
}

void cuMemGetAllocationPropertiesFromHandle(Dispatch& d) {
  uint64_t h = 0;
  if (!proto::wire::read_u64_value(d.args, &h)) return;
  if (!d.drv.cuMemGetAllocationPropertiesFromHandle) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemAllocationProp prop{};
  CUresult rc = d.drv.cuMemGetAllocationPropertiesFromHandle(&prop, h);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  proto::wire::put_allocation_prop(d.reply, prop);  // its Windows pointer cleared: no server pointer goes out
}

void cuMemRetainAllocationHandle(Dispatch& d) {
  uint64_t addr = 0;
  if (!proto::wire::read_u64_value(d.args, &addr)) return;
  if (!d.drv.cuMemRetainAllocationHandle) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = d.drv.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(addr)));
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_u64_value(d.reply, h);
}

}  // namespace rgpu::server::handlers
