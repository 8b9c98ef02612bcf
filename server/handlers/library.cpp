// Libraries and kernels (wire layouts in client/driver/library.cpp). The client names libraries
// and kernels with ids it minted; these handlers bind them to the driver's. A CUkernel id is
// also accepted wherever a CUfunction id is (launches, attributes, occupancy), as the driver
// accepts a CUkernel cast to CUfunction: the id maps to the real CUkernel.
#include <cuda.h>

#include <string>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"
#include "server/handlers/image.h"
#include "server/module_cache.h"

namespace rgpu::server::handlers {
namespace {

constexpr uint32_t kMaxAttrs = 64;

template <class H>
void name_of(Dispatch& d, CUresult (*fn)(const char**, H)) {
  uint64_t id = d.args.u64();
  if (!d.args.ok()) return;
  H h = nullptr;
  if (!d.handles.get(id, &h) || !h) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const char* name = nullptr;
  CUresult rc = fn(&name, h);
  if (rc == CUDA_SUCCESS && !name) rc = CUDA_ERROR_UNKNOWN;
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_str(name);
}

}  // namespace

CUresult load_library_image(Dispatch& d, uint64_t id, const uint8_t* image, size_t n) {
  if (!d.drv.cuLibraryLoadData) return CUDA_ERROR_NOT_SUPPORTED;
  std::string copy;
  const void* p = checked_image(image, n, &copy);
  if (!p) return CUDA_ERROR_INVALID_IMAGE;
  CUlibrary lib = nullptr;
  CUresult rc = d.drv.cuLibraryLoadData(&lib, p, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (rc == CUDA_SUCCESS && !d.handles.bind(id, lib)) {
    if (d.drv.cuLibraryUnload) d.drv.cuLibraryUnload(lib);
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  return rc;
}

void cuLibraryLoadData(Dispatch& d) {
  uint64_t id = d.args.u64();
  size_t n = 0;
  const uint8_t* image = d.args.bytes(&n);
  if (!d.args.ok()) return;
  CUresult rc = load_library_image(d, id, image, n);
  if (rc == CUDA_SUCCESS) module_cache::store(image, n);  // the next client asks by hash
  d.reply.put<int32_t>(rc);
}

void cuLibraryGetKernel(Dispatch& d) {
  uint64_t kid = d.args.u64();
  uint64_t lid = d.args.u64();
  std::string name = d.args.str(4096);
  if (!d.args.ok()) return;
  CUlibrary lib;
  if (!d.handles.get(lid, &lib) || !lib) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuLibraryGetKernel) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUkernel k = nullptr;
  CUresult rc = d.drv.cuLibraryGetKernel(&k, lib, name.c_str());
  if (rc == CUDA_SUCCESS && !d.handles.bind(kid, k)) rc = CUDA_ERROR_INVALID_VALUE;
  d.reply.put<int32_t>(rc);
}

void cuKernelGetName(Dispatch& d) { name_of(d, d.drv.cuKernelGetName); }
void cuFuncGetName(Dispatch& d) { name_of(d, d.drv.cuFuncGetName); }

void cuOccupancyMaxActiveClusters(Dispatch& d) {
  uint64_t fid = d.args.u64();
  unsigned v[7];
  for (unsigned& x : v) x = d.args.u32();
  uint64_t sid = d.args.u64();
  uint32_t n = d.args.u32();
  if (n > kMaxAttrs) {
    d.args.fail();
    return;
  }
  std::vector<CUlaunchAttribute> attrs(n);
  for (auto& a : attrs) a = d.args.get<CUlaunchAttribute>();
  if (!d.args.ok()) return;
  CUfunction f;
  CUstream s;
  if (!d.handles.get(fid, &f) || !f || !d.handles.get(sid, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  for (auto& a : attrs) {
    // Attributes that would name events carry client ids; occupancy has no use for them.
    if (a.id >= CU_LAUNCH_ATTRIBUTE_MAX || a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
        a.id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT || a.id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)
      return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  }
  if (!d.drv.cuOccupancyMaxActiveClusters) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUlaunchConfig config{};
  config.gridDimX = v[0];
  config.gridDimY = v[1];
  config.gridDimZ = v[2];
  config.blockDimX = v[3];
  config.blockDimY = v[4];
  config.blockDimZ = v[5];
  config.sharedMemBytes = v[6];
  config.hStream = s;
  config.attrs = attrs.empty() ? nullptr : attrs.data();
  config.numAttrs = n;
  int clusters = 0;
  CUresult rc = d.drv.cuOccupancyMaxActiveClusters(&clusters, f, &config);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put<int32_t>(clusters);
}

}  // namespace rgpu::server::handlers
