// Virtual memory management (wire layouts in client/driver/vmm.cpp). Allocation handles are the
// driver's 64-bit values and travel as is; the Windows-only pointer in CUmemAllocationProp is
// never taken from the wire.
#include <cuda.h>

#include <cstdint>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {

void cuMemGetAllocationGranularity(Dispatch& d) {
  CUmemAllocationProp prop = d.args.get<CUmemAllocationProp>();
  int32_t option = d.args.i32();
  if (!d.args.ok()) return;
  prop.win32HandleMetaData = nullptr;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!d.drv.cuMemGetAllocationGranularity) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  size_t g = 0;
  CUresult rc =
      d.drv.cuMemGetAllocationGranularity(&g, &prop, static_cast<CUmemAllocationGranularity_flags>(option));
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_u64(g);
}

void cuMemCreate(Dispatch& d) {
  uint64_t size = d.args.u64();
  CUmemAllocationProp prop = d.args.get<CUmemAllocationProp>();
  uint64_t flags = d.args.u64();
  if (!d.args.ok()) return;
  prop.win32HandleMetaData = nullptr;
  if (!d.drv.cuMemCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = d.drv.cuMemCreate(&h, size, &prop, flags);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_u64(h);
}

void cuMemGetAllocationPropertiesFromHandle(Dispatch& d) {
  uint64_t h = d.args.u64();
  if (!d.args.ok()) return;
  if (!d.drv.cuMemGetAllocationPropertiesFromHandle) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemAllocationProp prop{};
  CUresult rc = d.drv.cuMemGetAllocationPropertiesFromHandle(&prop, h);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  prop.win32HandleMetaData = nullptr;  // no server pointer goes to the client
  d.reply.put(prop);
}

void cuMemRetainAllocationHandle(Dispatch& d) {
  uint64_t addr = d.args.u64();
  if (!d.args.ok()) return;
  if (!d.drv.cuMemRetainAllocationHandle) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = d.drv.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(addr)));
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_u64(h);
}

}  // namespace rgpu::server::handlers
