// Module loading and function lookup (wire layouts in protocol/wire/module.h). The client
// names modules and functions with ids it minted; these handlers bind them to the driver's.
#include <cuda.h>

#include <string>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/module.h"
#include "server/dispatch.h"
#include "server/handlers/image.h"
#include "server/module_cache.h"

namespace rgpu::server::handlers {

CUresult load_module_image(Dispatch& d, uint64_t id, const uint8_t* image, size_t n) {
  if (!d.drv.cuModuleLoadData) return CUDA_ERROR_NOT_SUPPORTED;
  std::string copy;
  const void* p = checked_image(image, n, &copy);
  if (!p) return CUDA_ERROR_INVALID_IMAGE;
  CUmodule m = nullptr;
  CUresult rc = d.drv.cuModuleLoadData(&m, p);
  if (rc == CUDA_SUCCESS && !d.handles.bind(id, m)) {
    d.drv.cuModuleUnload(m);
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  return rc;
}

void cuModuleLoadData(Dispatch& d) {
  proto::wire::ImageLoad req;
  if (!proto::wire::read_image_load(d.args, &req)) return;
  CUresult rc = load_module_image(d, req.id, req.image, req.n);
  if (rc == CUDA_SUCCESS) module_cache::store(req.image, req.n);  // the next client asks by hash
  d.reply.put<int32_t>(rc);
}

// The client sends every module load as cuModuleLoadData; these ops share its wire layout.
void cuModuleLoad(Dispatch& d) { cuModuleLoadData(d); }
void cuModuleLoadDataEx(Dispatch& d) { cuModuleLoadData(d); }
void cuModuleLoadFatBinary(Dispatch& d) { cuModuleLoadData(d); }

void cuModuleUnload(Dispatch& d) {
  uint64_t id = 0;
  if (!proto::wire::read_id(d.args, &id)) return;
  CUmodule m;
  if (!d.handles.get(id, &m) || !m) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuModuleUnload) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUresult rc = d.drv.cuModuleUnload(m);
  if (rc == CUDA_SUCCESS) d.handles.unbind(id);
  d.reply.put<int32_t>(rc);
}

void cuModuleGetFunction(Dispatch& d) {
  proto::wire::SymbolLookup req;
  if (!proto::wire::read_symbol_lookup(d.args, &req)) return;
  const uint64_t fid = req.id;
  const std::string& name = req.name;
  CUmodule m;
  if (!d.handles.get(req.parent, &m) || !m) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuModuleGetFunction) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUfunction f = nullptr;
  CUresult rc = d.drv.cuModuleGetFunction(&f, m, name.c_str());
  if (rc == CUDA_SUCCESS && !d.handles.bind(fid, f)) rc = CUDA_ERROR_INVALID_VALUE;
  d.reply.put<int32_t>(rc);
}

}  // namespace rgpu::server::handlers
