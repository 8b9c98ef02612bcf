// cuInit, cuDriverGetVersion and the cuDevice* queries: answered on the client from the
// snapshot taken at connect (protocol/snapshot.h), so none of them costs a round trip.
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <strings.h>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"

using rgpu::client::snapshot;

namespace {

// The device a query names, or nullptr (with *rc set) when there is none.
const rgpu::proto::DeviceInfo* device(CUdevice dev, CUresult* rc) {
  if (!rgpu::client::connection()) {
    *rc = CUDA_ERROR_NOT_INITIALIZED;
    return nullptr;
  }
  const rgpu::proto::DeviceInfo* d = rgpu::client::device_info(dev);
  *rc = d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  return d;
}

CUresult attribute(int* pi, int attrib, CUdevice dev) {
  CUresult rc;
  const auto* d = device(dev, &rc);
  if (!d) return rc;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (attrib <= 0 || static_cast<size_t>(attrib) >= d->attrs.size()) return CUDA_ERROR_INVALID_VALUE;
  const auto& a = d->attrs[static_cast<size_t>(attrib)];
  if (a.result != CUDA_SUCCESS) return static_cast<CUresult>(a.result);
  *pi = a.value;
  switch (attrib) {
    // Managed memory is mirrored, the client's copy meeting the server's at call boundaries
    // (client/mapped_memory.h): the program must not touch it from the host while GPU work on it
    // runs, and must synchronize before reading what a kernel wrote. Programs (and the runtime)
    // do exactly that when the device says it has no concurrent or direct managed access, and no
    // pageable memory access (host memory is not the GPU's). MANAGED_MEMORY stays as the server says.
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
      *pi = 0;
      break;
    default: break;
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  rgpu::client::trace_call("cuInit");
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return rgpu::client::init(Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  rgpu::client::trace_call("cuDriverGetVersion");
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  // Answerable before cuInit, like the real driver: report the version of the cuda.h we were
  // built against until we know the server's.
  *driverVersion = rgpu::client::connection() ? snapshot().driver_version : CUDA_VERSION;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetCount(int* count) {
  rgpu::client::trace_call("cuDeviceGetCount");
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(snapshot().devices.size());
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice* out, int ordinal) {
  rgpu::client::trace_call("cuDeviceGet");
  CUresult rc;
  if (!device(ordinal, &rc)) return rc;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = ordinal;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceGetName");
  CUresult rc;
  const auto* d = device(dev, &rc);
  if (!d) return rc;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", d->name.c_str());
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceGetUuid");
  CUresult rc;
  const auto* d = device(dev, &rc);
  if (!d) return rc;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(uuid->bytes, d->uuid.data(), sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

RGPU_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceTotalMem_v2");
  CUresult rc;
  const auto* d = device(dev, &rc);
  if (!d) return rc;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d->total_mem;
  return CUDA_SUCCESS;
}

// The pre-3.2 entry point with a 32-bit size: clamped, as the real driver does.
RGPU_EXPORT CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t full = 0;
  CUresult rc = cuDeviceTotalMem_v2(&full, dev);
  if (rc == CUDA_SUCCESS) *bytes = full > 0xffffffffu ? 0xffffffffu : static_cast<unsigned int>(full);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceGetAttribute");
  return attribute(pi, attrib, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceComputeCapability");
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = attribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (rc == CUDA_SUCCESS) rc = attribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetProperties(CUdevprop* p, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceGetProperties");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc;
  if (!device(dev, &rc)) return rc;
  auto a = [&](CUdevice_attribute id) {
    int v = 0;
    attribute(&v, id, dev);
    return v;
  };
  p->maxThreadsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p->maxThreadsDim[0] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p->maxThreadsDim[1] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p->maxThreadsDim[2] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p->maxGridSize[0] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p->maxGridSize[1] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p->maxGridSize[2] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  p->sharedMemPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p->totalConstantMemory = a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  p->SIMDWidth = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p->memPitch = a(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  p->regsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p->clockRate = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p->textureAlign = a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  rgpu::client::trace_call("cuDeviceGetPCIBusId");
  CUresult rc;
  const auto* d = device(dev, &rc);
  if (!d) return rc;
  // A buffer too short for the whole id is refused ("device pci bus id short buffer" on the H200).
  if (!pciBusId || len <= 0 || static_cast<size_t>(len) <= d->pci_bus_id.size()) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "%s", d->pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  rgpu::client::trace_call("cuDeviceGetByPCIBusId");
  if (!rgpu::client::connection()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
  const auto& devs = snapshot().devices;
  for (size_t i = 0; i < devs.size(); ++i) {
    if (strcasecmp(devs[i].pci_bus_id.c_str(), pciBusId) == 0) {
      *dev = static_cast<CUdevice>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

// Peers: devices of one server are the server driver's to answer; devices of two servers
// (RGPU_SERVER=a,b) never reach each other's memory, so they are no peers, as two GPUs without a
// P2P path answer on the driver.
RGPU_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (rgpu::client::several_servers() && rgpu::client::device_info(dev) && rgpu::client::device_info(peerDev) &&
      rgpu::client::device_server(dev) != rgpu::client::device_server(peerDev)) {
    rgpu::client::trace_call("cuDeviceCanAccessPeer");
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    *canAccessPeer = 0;
    return CUDA_SUCCESS;
  }
  return rgpu_fwd_cuDeviceCanAccessPeer(canAccessPeer, dev, peerDev);
}

RGPU_EXPORT CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                                     CUdevice dstDevice) {
  if (rgpu::client::several_servers() && rgpu::client::device_info(srcDevice) && rgpu::client::device_info(dstDevice) &&
      rgpu::client::device_server(srcDevice) != rgpu::client::device_server(dstDevice)) {
    rgpu::client::trace_call("cuDeviceGetP2PAttribute");
    if (!value || attrib < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
        attrib > CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED)
      return CUDA_ERROR_INVALID_VALUE;
    *value = 0;  // no access, no atomics, rank 0
    return CUDA_SUCCESS;
  }
  return rgpu_fwd_cuDeviceGetP2PAttribute(value, attrib, srcDevice, dstDevice);
}

}  // extern "C"
