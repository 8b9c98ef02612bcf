// Virtual memory management: the calls whose arguments the generator cannot marshal.
// (cuMemAddressReserve/Free, cuMemMap/Unmap, cuMemSetAccess, cuMemGetAccess, cuMemRelease are
// generated.) A CUmemGenericAllocationHandle is a 64-bit value the server's driver owns; it
// travels as is. CUmemAllocationProp carries a Windows-only pointer (win32HandleMetaData): it must
// be NULL here and is sent as 0; a device location's id is a client ordinal, sent as the server's.
// Shareable handles (cuMemExportToShareableHandle / cuMemImportFromShareableHandle) are file
// descriptors (or fabric handles) of the GPU host's processes: refused.
//
// Wire layout: protocol/wire/memory.h.
#include <cuda.h>

#include <cstdint>
#include <vector>

#include "client/call.h"
#include "client/runtime.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/memory.h"

namespace {

using rgpu::client::Call;

// A memory location as the server should see it: a device's id is the client's ordinal
// (CUDA_VISIBLE_DEVICES), the server numbers all its devices.
CUmemLocation to_server(CUmemLocation loc) {
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) loc.id = rgpu::client::server_device(loc.id);
  return loc;
}

// Access descriptors as the server should see them.
std::vector<CUmemAccessDesc> to_server(const CUmemAccessDesc* descs, size_t count) {
  std::vector<CUmemAccessDesc> out(descs, descs + count);
  for (auto& d : out) d.location = to_server(d.location);
  return out;
}

// The properties as the server should see them; false when they cannot travel.
bool to_server(const CUmemAllocationProp* in, CUmemAllocationProp* out) {
  if (!in || in->win32HandleMetaData) return false;  // Windows only; must be NULL elsewhere
  *out = *in;
  out->win32HandleMetaData = nullptr;
  out->location = to_server(in->location);
  return true;
}

CUresult refuse(const char* call) {
  rgpu::client::trace_call(call);
  rgpu::log::error(
      "%s is not supported by rgpu: shareable allocation handles are file descriptors of processes on the "
      "GPU host, which cannot be passed to or from a process on another machine; share the memory "
      "within one process instead",
      call);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                           CUmemAllocationGranularity_flags option) {
  rgpu::client::trace_call("cuMemGetAllocationGranularity");
  CUmemAllocationProp p;
  if (!granularity || !to_server(prop, &p)) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemGetAllocationGranularity, rgpu::client::kWaits);
  rgpu::proto::wire::put_granularity(c.args(), {p, option});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t g = 0;
  if (!rgpu::proto::wire::read_u64_value(c.reply(), &g)) return CUDA_ERROR_UNKNOWN;
  *granularity = g;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                         const CUmemAllocationProp* prop, unsigned long long flags) {
  rgpu::client::trace_call("cuMemCreate");
  CUmemAllocationProp p;
  if (!handle || !to_server(prop, &p)) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemCreate, rgpu::client::kWaits);
  rgpu::proto::wire::put_mem_create(c.args(), {size, p, flags});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t h = 0;
  if (!rgpu::proto::wire::read_u64_value(c.reply(), &h)) return CUDA_ERROR_UNKNOWN;
  *handle = h;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                    CUmemGenericAllocationHandle handle) {
  rgpu::client::trace_call("cuMemGetAllocationPropertiesFromHandle");
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemGetAllocationPropertiesFromHandle, rgpu::client::kWaits);
  rgpu::proto::wire::put_u64_value(c.args(), handle);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUmemAllocationProp p;
  if (!rgpu::proto::wire::read_allocation_prop(c.reply(), &p)) return CUDA_ERROR_UNKNOWN;
  if (p.location.type == CU_MEM_LOCATION_TYPE_DEVICE) p.location.id = rgpu::client::client_device(p.location.id);
  *prop = p;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  rgpu::client::trace_call("cuMemRetainAllocationHandle");
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuMemRetainAllocationHandle, rgpu::client::kWaits);
  rgpu::proto::wire::put_u64_value(c.args(), reinterpret_cast<uintptr_t>(addr));
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t h = 0;
  if (!rgpu::proto::wire::read_u64_value(c.reply(), &h)) return CUDA_ERROR_UNKNOWN;
  *handle = h;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle,
                                                          CUmemAllocationHandleType, unsigned long long) {
  return refuse("cuMemExportToShareableHandle");
}

RGPU_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*,
                                                            CUmemAllocationHandleType) {
  return refuse("cuMemImportFromShareableHandle");
}

// Access rights name devices by ordinal: translated both ways as for allocations.
RGPU_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!desc || count > (1u << 16)) return rgpu_fwd_cuMemSetAccess(ptr, size, desc, count);
  auto server = to_server(desc, count);
  return rgpu_fwd_cuMemSetAccess(ptr, size, server.data(), count);
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  if (!map || count > (1u << 16)) return rgpu_fwd_cuMemPoolSetAccess(pool, map, count);
  auto server = to_server(map, count);
  return rgpu_fwd_cuMemPoolSetAccess(pool, server.data(), count);
}

RGPU_EXPORT CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (!location) return rgpu_fwd_cuMemGetAccess(flags, location, ptr);
  const CUmemLocation server = to_server(*location);
  return rgpu_fwd_cuMemGetAccess(flags, &server, ptr);
}

RGPU_EXPORT CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  if (!location) return rgpu_fwd_cuMemPoolGetAccess(flags, pool, location);
  CUmemLocation server = to_server(*location);
  return rgpu_fwd_cuMemPoolGetAccess(flags, pool, &server);
}

// Reservations are recorded with several servers, as allocations are: cuMemMap, cuMemSetAccess
// and copies that name only an address in them go to their server (client/call.h).
RGPU_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                unsigned long long flags) {
  CUresult rc = rgpu_fwd_cuMemAddressReserve(ptr, size, alignment, addr, flags);
  if (rc != CUDA_SUCCESS || !ptr || !rgpu::client::several_servers()) return rc;
  int server = addr ? rgpu::client::pointer_server(addr) : -1;  // where the call went (its routing)
  if (server < 0) server = rgpu::client::current_server();
  return rgpu::client::keep_allocation("cuMemAddressReserve", ptr, size, server, [server, size](CUdeviceptr p) {
    rgpu::client::Call c(rgpu::op::cuMemAddressFree, rgpu::client::kWaits);
    c.to_server(server);
    c.args().put<CUdeviceptr>(p);
    c.args().put<size_t>(size);
    c.invoke();
  });
}

RGPU_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult rc = rgpu_fwd_cuMemAddressFree(ptr, size);
  if (rc == CUDA_SUCCESS) rgpu::client::forget_allocation(ptr);
  return rc;
}

}  // extern "C"
