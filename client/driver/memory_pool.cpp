// Stream-ordered allocation: the pool calls whose arguments the generator cannot marshal, and
// the allocations and frees, which with several servers record each allocation's server (calls
// that name only its pointer go there, client/call.h). (Their marshalling, cuMemPoolDestroy,
// cuMemPoolTrimTo, cuDeviceGetDefaultMemPool and the rest are generated.)
//
// Wire layout and each attribute's size: protocol/wire/memory.h.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/memory.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

using rgpu::proto::wire::pool_attribute_size;

// Given back on its own server, on the stream it was allocated on (keep_allocation's release).
std::function<void(CUdeviceptr)> free_async_on(int server, CUstream stream) {
  return [server, stream](CUdeviceptr p) {
    Call c(rgpu::op::cuMemFreeAsync, rgpu::client::kWaits);
    c.to_server(server);
    c.args().put<CUdeviceptr>(p);
    c.on_stream(stream);
    c.args().put_u64(handle_id(stream));
    c.invoke();
  };
}

// After a stream-ordered allocation that returned rc: with several servers, records the memory
// with the stream's server (keep_allocation); with one, nothing to do.
CUresult keep_async(const char* what, CUresult rc, CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  if (rc != CUDA_SUCCESS || !dptr || !rgpu::client::several_servers()) return rc;
  const int server = rgpu::client::server_of(stream);
  return rgpu::client::keep_allocation(what, dptr, bytesize, server, free_async_on(server, stream));
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

#define RGPU_ALLOC_ASYNC(name)                                                                            \
  RGPU_EXPORT CUresult CUDAAPI name(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {               \
    return keep_async(#name, rgpu_fwd_##name(dptr, bytesize, stream), dptr, bytesize, stream);           \
  }
RGPU_ALLOC_ASYNC(cuMemAllocAsync)
RGPU_ALLOC_ASYNC(cuMemAllocAsync_ptsz)
#undef RGPU_ALLOC_ASYNC

#define RGPU_ALLOC_FROM_POOL(name)                                                                            \
  RGPU_EXPORT CUresult CUDAAPI name(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) { \
    return keep_async(#name, rgpu_fwd_##name(dptr, bytesize, pool, stream), dptr, bytesize, stream);          \
  }
RGPU_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
RGPU_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)
#undef RGPU_ALLOC_FROM_POOL

#define RGPU_FREE_ASYNC(name)                                        \
  RGPU_EXPORT CUresult CUDAAPI name(CUdeviceptr dptr, CUstream stream) { \
    CUresult rc = rgpu_fwd_##name(dptr, stream);                     \
    rgpu::client::forget_allocation(dptr);                           \
    return rc;                                                       \
  }
RGPU_FREE_ASYNC(cuMemFreeAsync)
RGPU_FREE_ASYNC(cuMemFreeAsync_ptsz)
#undef RGPU_FREE_ASYNC

}  // extern "C"
