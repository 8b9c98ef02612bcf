// Texture and surface objects (wire layout in protocol/wire/texture.h). The resource
// descriptor's array handles are client ids: translated on the way in, and back to ids on the
// way out. Only the resource types the header defines are accepted, so no other bytes of the
// union are ever read by the driver as a handle.
#include <cuda.h>

#include <cstdint>
#include <cstring>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/texture.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

// The wire id a client wrote into a handle field.
uint64_t id_bits(const void* h) { return reinterpret_cast<uint64_t>(h); }

// Client ids → driver handles. Returns the CUresult to answer when the descriptor is refused.
CUresult to_driver(Dispatch& d, CUDA_RESOURCE_DESC* desc) {
  switch (desc->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      uint64_t id = id_bits(desc->res.array.hArray);
      return d.handles.get(id, &desc->res.array.hArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      uint64_t id = id_bits(desc->res.mipmap.hMipmappedArray);
      return d.handles.get(id, &desc->res.mipmap.hMipmappedArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    case CU_RESOURCE_TYPE_LINEAR:
    case CU_RESOURCE_TYPE_PITCH2D:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

void to_client(Dispatch& d, CUDA_RESOURCE_DESC* desc) {
  if (desc->resType == CU_RESOURCE_TYPE_ARRAY && desc->res.array.hArray) {
    uint64_t id = d.handles.id_for(desc->res.array.hArray);
    std::memcpy(&desc->res.array.hArray, &id, sizeof id);
  } else if (desc->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY && desc->res.mipmap.hMipmappedArray) {
    uint64_t id = d.handles.id_for(desc->res.mipmap.hMipmappedArray);
    std::memcpy(&desc->res.mipmap.hMipmappedArray, &id, sizeof id);
  }
}

using GetDesc = CUresult (*)(CUDA_RESOURCE_DESC*, unsigned long long);

void get_resource_desc(Dispatch& d, GetDesc fn) {
  uint64_t object = 0;
  if (!proto::wire::read_object(d.args, &object)) return;
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUDA_RESOURCE_DESC desc{};
  CUresult rc = fn(&desc, object);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  to_client(d, &desc);
  proto::wire::put_resource_desc(d.reply, desc);
}

}  // namespace

void cuTexObjectCreate(Dispatch& d) {
  proto::wire::TextureCreate req;
  if (!proto::wire::read_texture_create(d.args, &req)) return;
  CUDA_RESOURCE_DESC& res = req.res;
  const bool has_tex = req.has_tex, has_view = req.has_view;
  CUDA_TEXTURE_DESC& tex = req.tex;
  CUDA_RESOURCE_VIEW_DESC& view = req.view;
  if (!d.drv.cuTexObjectCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  if (CUresult rc = to_driver(d, &res)) return d.reply.put<int32_t>(rc);
  CUtexObject obj = 0;
  CUresult rc = d.drv.cuTexObjectCreate(&obj, &res, has_tex ? &tex : nullptr, has_view ? &view : nullptr);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_object(d.reply, obj);
}

void cuSurfObjectCreate(Dispatch& d) {
  CUDA_RESOURCE_DESC res;
  if (!proto::wire::read_surface_create(d.args, &res)) return;
  if (!d.drv.cuSurfObjectCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  if (CUresult rc = to_driver(d, &res)) return d.reply.put<int32_t>(rc);
  CUsurfObject obj = 0;
  CUresult rc = d.drv.cuSurfObjectCreate(&obj, &res);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_object(d.reply, obj);
}

void cuTexObjectGetResourceDesc(Dispatch& d) { get_resource_desc(d, d.drv.cuTexObjectGetResourceDesc); }
void cuSurfObjectGetResourceDesc(Dispatch& d) { get_resource_desc(d, d.drv.cuSurfObjectGetResourceDesc); }

}  // namespace rgpu::server::handlers
