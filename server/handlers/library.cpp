// Libraries and kernels (wire layouts in protocol/wire/module.h; cuOccupancyMaxActiveClusters's
// in protocol/wire/occupancy.h). The client names libraries
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
#include "protocol/wire/module.h"
#include "protocol/wire/occupancy.h"
#include "server/handlers/control.h"
#include "server/handlers/image.h"
#include "server/module_cache.h"

namespace rgpu::server::handlers {
namespace {

template <class H>
void name_of(Dispatch& d, CUresult (*fn)(const char**, H)) {
  uint64_t id = 0;
  if (!proto::wire::read_id(d.args, &id)) return;
  H h = nullptr;
  if (!d.handles.get(id, &h) || !h) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const char* name = nullptr;
  CUresult rc = fn(&name, h);
  if (rc == CUDA_SUCCESS && !name) rc = CUDA_ERROR_UNKNOWN;
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_symbol_name(d.reply, name);
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
  proto::wire::ImageLoad req;
  if (!proto::wire::read_image_load(d.args, &req)) return;
  CUresult rc = load_library_image(d, req.id, req.image, req.n);
  if (rc == CUDA_SUCCESS) module_cache::store(req.image, req.n);  // the next client asks by hash
  d.reply.put<int32_t>(rc);
}

void cuLibraryGetKernel(Dispatch& d) {
  proto::wire::SymbolLookup req;
  if (!proto::wire::read_symbol_lookup(d.args, &req)) return;
  const uint64_t kid = req.id;
  const std::string& name = req.name;
  CUlibrary lib;
  if (!d.handles.get(req.parent, &lib) || !lib) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuLibraryGetKernel) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUkernel k = nullptr;
  CUresult rc = d.drv.cuLibraryGetKernel(&k, lib, name.c_str());
  if (rc == CUDA_SUCCESS && !d.handles.bind(kid, k)) rc = CUDA_ERROR_INVALID_VALUE;
  d.reply.put<int32_t>(rc);
}

void cuKernelGetName(Dispatch& d) { name_of(d, d.drv.cuKernelGetName); }
void cuFuncGetName(Dispatch& d) { name_of(d, d.drv.cuFuncGetName); }

namespace {

// The head of cuOccupancyMaxActiveClusters and kOpClusterOccupancyTable (protocol/wire/occupancy.h).
// False after replying (or failing the arguments) when it cannot be asked.
bool read_cluster_query(Dispatch& d, CUfunction* f, CUlaunchConfig* config, std::vector<CUlaunchAttribute>* attrs) {
  proto::wire::Launch q;
  if (!proto::wire::read_launch_head(d.args, &q, true)) return false;
  *attrs = std::move(q.attrs);
  const uint32_t n = static_cast<uint32_t>(attrs->size());
  CUstream s;
  if (!d.handles.get(q.function, f) || !*f || !d.handles.get(q.stream, &s)) {
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
  config->gridDimX = q.dims.grid[0];
  config->gridDimY = q.dims.grid[1];
  config->gridDimZ = q.dims.grid[2];
  config->blockDimX = q.dims.block[0];
  config->blockDimY = q.dims.block[1];
  config->blockDimZ = q.dims.block[2];
  config->sharedMemBytes = q.dims.shared_bytes;
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
  if (rc == CUDA_SUCCESS) proto::wire::put_cluster_count(d.reply, clusters);
}

void cluster_occupancy_table(Dispatch& d) {
  CUfunction f;
  CUlaunchConfig config;
  std::vector<CUlaunchAttribute> attrs;
  if (!read_cluster_query(d, &f, &config, &attrs)) return;
  proto::wire::ClusterWidths widths;
  if (!proto::wire::read_cluster_widths(d.args, &widths)) return;
  const uint32_t first = widths.first, count = widths.count;
  const bool grid_follows = widths.grid_follows;
  auto cluster = std::find_if(attrs.begin(), attrs.end(),
                              [](const CUlaunchAttribute& a) { return a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; });
  if (cluster == attrs.end() || first == 0 || count == 0 || count > proto::kMaxClusterTable)
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  std::vector<std::pair<int32_t, int32_t>> table;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t x = first + i;
    cluster->value.clusterDim.x = x;
    if (grid_follows) config.gridDimX = x;
    int clusters = 0;
    CUresult rc = d.drv.cuOccupancyMaxActiveClusters(&clusters, f, &config);
    table.emplace_back(rc, rc == CUDA_SUCCESS ? clusters : 0);
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_cluster_table(d.reply, table);
}

}  // namespace rgpu::server::handlers
