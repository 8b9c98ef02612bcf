// Texture and surface objects. A CUDA_RESOURCE_DESC names its resource by CUarray or
// CUmipmappedArray handle (client ids, translated by the server) or by device pointer; it travels
// as its own bytes, since the client's handle values are the wire ids. Texture and surface
// objects are 64-bit values the driver chose, not handles: they pass through as they are
// (cuTexObjectDestroy/cuSurfObjectDestroy are generated).
//
// Wire, create: u64 sizeof(CUDA_RESOURCE_DESC) + the struct; texture objects also u8 has_tex
// (+ CUDA_TEXTURE_DESC as bytes), u8 has_view (+ CUDA_RESOURCE_VIEW_DESC as bytes).
// Reply: CUresult, u64 object. Get resource desc: u64 object; reply CUresult + the struct with
// handles as ids.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

using rgpu::client::Call;

template <class T>
void put_optional(Call& c, const T* p) {
  c.args().put_u8(p != nullptr);
  if (p) c.args().put_bytes(p, sizeof(T));
}

CUresult get_resource_desc(uint16_t op, CUDA_RESOURCE_DESC* out, unsigned long long object) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  c.args().put_u64(object);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUDA_RESOURCE_DESC desc;
  if (!c.reply().take(&desc, sizeof desc)) return CUDA_ERROR_UNKNOWN;
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
  c.args().put_bytes(pResDesc, sizeof *pResDesc);
  put_optional(c, pTexDesc);
  put_optional(c, pResViewDesc);
  CUresult rc = c.invoke();
  if (rc == CUDA_SUCCESS) *pTexObject = c.reply().u64();
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  rgpu::client::trace_call("cuSurfObjectCreate");
  if (!pSurfObject || !pResDesc) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuSurfObjectCreate, rgpu::client::kWaits);
  c.args().put_bytes(pResDesc, sizeof *pResDesc);
  CUresult rc = c.invoke();
  if (rc == CUDA_SUCCESS) *pSurfObject = c.reply().u64();
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
