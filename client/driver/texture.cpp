// Texture and surface objects (cuTexObjectDestroy/cuSurfObjectDestroy are generated). The wire
// layout, and why a resource descriptor travels as its own bytes: protocol/wire/texture.h.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/texture.h"

namespace {

using rgpu::client::Call;

CUresult get_resource_desc(uint16_t op, CUDA_RESOURCE_DESC* out, unsigned long long object) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::put_object(c.args(), object);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUDA_RESOURCE_DESC desc;
  if (!rgpu::proto::wire::read_resource_desc(c.reply(), &desc)) return CUDA_ERROR_UNKNOWN;
  *out = desc;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                               const CUDA_TEXTURE_DESC* pTexDesc,
                                               const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  rgpu::client::trace_call("cuTexObjectCreate");
  if (!pTexObject || !pResDesc || !pTexDesc) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTexObjectCreate, rgpu::client::kWaits);
  rgpu::proto::wire::put_texture_create(c.args(), *pResDesc, pTexDesc, pResViewDesc);
  CUresult rc = c.invoke();
  uint64_t object = 0;
  if (rc == CUDA_SUCCESS && !rgpu::proto::wire::read_object(c.reply(), &object)) return CUDA_ERROR_UNKNOWN;
  if (rc == CUDA_SUCCESS) *pTexObject = object;
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  rgpu::client::trace_call("cuSurfObjectCreate");
  if (!pSurfObject || !pResDesc) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuSurfObjectCreate, rgpu::client::kWaits);
  rgpu::proto::wire::put_surface_create(c.args(), *pResDesc);
  CUresult rc = c.invoke();
  uint64_t object = 0;
  if (rc == CUDA_SUCCESS && !rgpu::proto::wire::read_object(c.reply(), &object)) return CUDA_ERROR_UNKNOWN;
  if (rc == CUDA_SUCCESS) *pSurfObject = object;
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) {
  rgpu::client::trace_call("cuTexObjectGetResourceDesc");
  return get_resource_desc(rgpu::op::cuTexObjectGetResourceDesc, pResDesc, texObject);
}

RGPU_EXPORT CUresult CUDAAPI cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUsurfObject surfObject) {
  rgpu::client::trace_call("cuSurfObjectGetResourceDesc");
  return get_resource_desc(rgpu::op::cuSurfObjectGetResourceDesc, pResDesc, surfObject);
}

}  // extern "C"
