// Libraries and kernels (wire layouts in client/driver/library.cpp). The client names libraries
// and kernels with ids it minted; these handlers bind them to the driver's. A CUkernel id is
// also accepted wherever a CUfunction id is (launches, attributes, occupancy), as the driver
// accepts a CUkernel cast to CUfunction: the id maps to the real CUkernel.
#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"
#include "protocol/messages.h"
#include "server/handlers/control.h"
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

namespace {

// The wire of cuOccupancyMaxActiveClusters and kOpClusterOccupancyTable up to the attributes:
// u64 function, u32 grid x y z, u32 block x y z, u32 shared bytes, u64 stream, u32 n attrs,
// n × CUlaunchAttribute. False after replying (or failing the arguments) when it cannot be asked.
bool read_cluster_query(Dispatch& d, CUfunction* f, CUlaunchConfig* config, std::vector<CUlaunchAttribute>* attrs) {
  uint64_t fid = d.args.u64();
  unsigned v[7];
  for (unsigned& x : v) x = d.args.u32();
  uint64_t sid = d.args.u64();
  uint32_t n = d.args.u32();
  if (n > kMaxAttrs) {
    d.args.fail();
    return false;
  }
  attrs->resize(n);
  for (auto& a : *attrs) a = d.args.get<CUlaunchAttribute>();
  if (!d.args.ok()) return false;
  CUstream s;
  if (!d.handles.get(fid, f) || !*f || !d.handles.get(sid, &s)) {
    d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
    return false;
  }
  for (auto& a : *attrs) {
    // The id came off the wire: read it as an integer, not as the enum it may not be (as
    // launch.cpp does; found by dispatch_fuzz once it had a seed for kOpClusterOccupancyTable).
    std::underlying_type_t<CUlaunchAttributeID> id;
    std::memcpy(&id, reinterpret_cast<const char*>(&a) + offsetof(CUlaunchAttribute, id), sizeof id);
    // Attributes that would name events carry client ids; occupancy has no use for them.
    if (id >= CU_LAUNCH_ATTRIBUTE_MAX || id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
        id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT || id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) {
      d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
      return false;
    }
  }
  if (!d.drv.cuOccupancyMaxActiveClusters) {
    d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
    return false;
  }
  *config = CUlaunchConfig{};
  config->gridDimX = v[0];
  config->gridDimY = v[1];
  config->gridDimZ = v[2];
  config->blockDimX = v[3];
  config->blockDimY = v[4];
  config->blockDimZ = v[5];
  config->sharedMemBytes = v[6];
  config->hStream = s;
  config->attrs = attrs->empty() ? nullptr : attrs->data();
  config->numAttrs = n;
  return true;
}

}  // namespace

void cuOccupancyMaxActiveClusters(Dispatch& d) {
  CUfunction f;
  CUlaunchConfig config;
  std::vector<CUlaunchAttribute> attrs;
  if (!read_cluster_query(d, &f, &config, &attrs)) return;
  int clusters = 0;
  CUresult rc = d.drv.cuOccupancyMaxActiveClusters(&clusters, f, &config);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put<int32_t>(clusters);
}

void cluster_occupancy_table(Dispatch& d) {
  CUfunction f;
  CUlaunchConfig config;
  std::vector<CUlaunchAttribute> attrs;
  if (!read_cluster_query(d, &f, &config, &attrs)) return;
  uint32_t first = d.args.u32(), count = d.args.u32();
  uint8_t grid_follows = d.args.u8();
  if (!d.args.ok()) return;
  auto cluster = std::find_if(attrs.begin(), attrs.end(),
                              [](const CUlaunchAttribute& a) { return a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; });
  if (cluster == attrs.end() || first == 0 || count == 0 || count > proto::kMaxClusterTable)
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  d.reply.put<int32_t>(CUDA_SUCCESS);
  d.reply.put_u32(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t x = first + i;
    cluster->value.clusterDim.x = x;
    if (grid_follows) config.gridDimX = x;
    int clusters = 0;
    CUresult rc = d.drv.cuOccupancyMaxActiveClusters(&clusters, f, &config);
    d.reply.put<int32_t>(rc);
    d.reply.put<int32_t>(rc == CUDA_SUCCESS ? clusters : 0);
  }
}

}  // namespace rgpu::server::handlers
