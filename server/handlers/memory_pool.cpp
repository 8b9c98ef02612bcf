// Memory pools (wire layouts in client/driver/memory_pool.cpp).
#include <cuda.h>

#include <cstring>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

uint32_t attribute_size(int attr) {
  if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES && attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    return 4;
  if (attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH) return 8;
  return 0;
}

}  // namespace

void cuMemPoolCreate(Dispatch& d) {
  uint64_t id = d.args.u64();
  CUmemPoolProps props = d.args.get<CUmemPoolProps>();
  if (!d.args.ok()) return;
  props.win32SecurityAttributes = nullptr;  // never a pointer from the wire
  if (!d.drv.cuMemPoolCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUmemoryPool pool = nullptr;
  CUresult rc = d.drv.cuMemPoolCreate(&pool, &props);
  if (rc == CUDA_SUCCESS && !d.handles.bind(id, pool)) {
    if (d.drv.cuMemPoolDestroy) d.drv.cuMemPoolDestroy(pool);
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  d.reply.put<int32_t>(rc);
}

void cuMemPoolGetAttribute(Dispatch& d) {
  uint64_t id = d.args.u64();
  int32_t attr = d.args.i32();
  if (!d.args.ok()) return;
  uint32_t size = attribute_size(attr);
  if (size == 0) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool pool;
  if (!d.handles.get(id, &pool)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuMemPoolGetAttribute) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  uint8_t value[8] = {};
  CUresult rc = d.drv.cuMemPoolGetAttribute(pool, static_cast<CUmemPool_attribute>(attr), value);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) {
    d.reply.put_u32(size);
    d.reply.append(value, size);
  }
}

void cuMemPoolSetAttribute(Dispatch& d) {
  uint64_t id = d.args.u64();
  int32_t attr = d.args.i32();
  uint32_t size = d.args.u32();
  if (!d.args.ok() || size > 8) {
    d.args.fail();
    return;
  }
  uint8_t value[8] = {};
  d.args.take(value, size);
  if (!d.args.ok()) return;
  if (attribute_size(attr) == 0 || size != attribute_size(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool pool;
  if (!d.handles.get(id, &pool)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuMemPoolSetAttribute) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  d.reply.put<int32_t>(d.drv.cuMemPoolSetAttribute(pool, static_cast<CUmemPool_attribute>(attr), value));
}

}  // namespace rgpu::server::handlers
