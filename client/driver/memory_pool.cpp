// Stream-ordered allocation: the pool calls whose arguments the generator cannot marshal.
// (cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync, cuMemPoolDestroy, cuMemPoolTrimTo,
// cuDeviceGetDefaultMemPool and the rest are generated.)
//
// Wire layout and each attribute's size: protocol/wire/memory.h.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/memory.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

using rgpu::proto::wire::pool_attribute_size;

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  rgpu::client::trace_call("cuMemPoolCreate");
  if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->win32SecurityAttributes) return CUDA_ERROR_INVALID_VALUE;  // Windows only
  CUmemPoolProps props = *poolProps;
  props.win32SecurityAttributes = nullptr;
  // The pool's device is a client ordinal (CUDA_VISIBLE_DEVICES); the server numbers all its devices.
  if (props.location.type == CU_MEM_LOCATION_TYPE_DEVICE) props.location.id = rgpu::client::server_device(props.location.id);
  uint64_t id = rgpu::client::mint_handle();
  Call c(rgpu::op::cuMemPoolCreate, rgpu::client::kWaits);
  rgpu::proto::wire::put_pool_create(c.args(), {id, props});
  CUresult rc = c.invoke();
  if (rc == CUDA_SUCCESS) *pool = rgpu::client::handle_from<CUmemoryPool>(id);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  rgpu::client::trace_call("cuMemPoolGetAttribute");
  uint32_t size = pool_attribute_size(attr);
  if (!value || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemPoolGetAttribute, rgpu::client::kWaits);
  rgpu::proto::wire::PoolAttribute got{handle_id(pool), attr};
  rgpu::proto::wire::put_pool_attribute(c.args(), false, got);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  if (!rgpu::proto::wire::read_pool_value(c.reply(), &got) || got.size != size) return CUDA_ERROR_UNKNOWN;
  std::memcpy(value, got.value, size);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  rgpu::client::trace_call("cuMemPoolSetAttribute");
  uint32_t size = pool_attribute_size(attr);
  if (!value || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemPoolSetAttribute, rgpu::client::kWaits);
  rgpu::proto::wire::PoolAttribute set{handle_id(pool), attr, size};
  std::memcpy(set.value, value, size);
  rgpu::proto::wire::put_pool_attribute(c.args(), true, set);
  return c.invoke();
}

}  // extern "C"
