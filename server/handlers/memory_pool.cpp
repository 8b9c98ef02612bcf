// Memory pools (wire layouts in protocol/wire/memory.h).
#include <cuda.h>

#include <cstring>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/memory.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
using proto::wire::pool_attribute_size;

void cuMemPoolCreate(Dispatch& d) {
  proto::wire::PoolCreate req;
  if (!proto::wire::read_pool_create(d.args, &req)) return;  // its Windows pointer cleared
  const uint64_t id = req.id;
  CUmemPoolProps props = req.props;
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
  proto::wire::PoolAttribute req;
  if (!proto::wire::read_pool_attribute(d.args, false, &req)) return;
  const uint64_t id = req.pool;
  const int32_t attr = req.attr;
  uint32_t size = pool_attribute_size(attr);
  if (size == 0) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool pool;
  if (!d.handles.get(id, &pool)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuMemPoolGetAttribute) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  uint8_t value[8] = {};
  CUresult rc = d.drv.cuMemPoolGetAttribute(pool, static_cast<CUmemPool_attribute>(attr), value);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_pool_value(d.reply, value, size);
}

void cuMemPoolSetAttribute(Dispatch& d) {
  proto::wire::PoolAttribute req;
  if (!proto::wire::read_pool_attribute(d.args, true, &req)) return;
  const uint64_t id = req.pool;
  const int32_t attr = req.attr;
  const uint32_t size = req.size;
  uint8_t* value = req.value;
  if (pool_attribute_size(attr) == 0 || size != pool_attribute_size(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool pool;
  if (!d.handles.get(id, &pool)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuMemPoolSetAttribute) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  d.reply.put<int32_t>(d.drv.cuMemPoolSetAttribute(pool, static_cast<CUmemPool_attribute>(attr), value));
}

}  // namespace rgpu::server::handlers
