// Stream-ordered allocation: the pool calls whose arguments the generator cannot marshal.
// (cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync, cuMemPoolDestroy, cuMemPoolTrimTo,
// cuDeviceGetDefaultMemPool and the rest are generated.)
//
// Wire (cuMemPoolCreate): u64 pool id (client-minted), CUmemPoolProps with
//   win32SecurityAttributes set to 0 (a Windows-only pointer; must be 0 elsewhere). Reply: CUresult.
// cuMemPoolGetAttribute: u64 pool, i32 attr. Reply: CUresult, u32 size, size bytes.
// cuMemPoolSetAttribute: u64 pool, i32 attr, u32 size, size bytes. Reply: CUresult.
//   size: 4 for the int attributes (REUSE_*), 8 for the cuuint64_t ones.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

uint32_t attribute_size(CUmemPool_attribute attr) {
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return 4;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      return 8;
    default:
      return 0;
  }
}

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
  c.args().put_u64(id);
  c.args().put(props);
  CUresult rc = c.invoke();
  if (rc == CUDA_SUCCESS) *pool = rgpu::client::handle_from<CUmemoryPool>(id);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  rgpu::client::trace_call("cuMemPoolGetAttribute");
  uint32_t size = attribute_size(attr);
  if (!value || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemPoolGetAttribute, rgpu::client::kWaits);
  c.args().put_u64(handle_id(pool));
  c.args().put<int32_t>(attr);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  if (c.reply().u32() != size) return CUDA_ERROR_UNKNOWN;
  const uint8_t* bytes = c.reply().view(size);
  if (!bytes) return CUDA_ERROR_UNKNOWN;
  std::memcpy(value, bytes, size);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  rgpu::client::trace_call("cuMemPoolSetAttribute");
  uint32_t size = attribute_size(attr);
  if (!value || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemPoolSetAttribute, rgpu::client::kWaits);
  c.args().put_u64(handle_id(pool));
  c.args().put<int32_t>(attr);
  c.args().put_u32(size);
  c.args().append(value, size);
  return c.invoke();
}

}  // extern "C"
