// Texture and surface objects (wire layout in client/driver/texture.cpp). The resource
// descriptor's array handles are client ids: translated on the way in, and back to ids on the
// way out. Only the resource types the header defines are accepted, so no other bytes of the
// union are ever read by the driver as a handle.
#include <cuda.h>

#include <cstdint>
#include <cstring>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

// Reads a struct sent as u64 size + bytes; the size must be exactly sizeof(T).
template <class T>
bool read_struct(Reader& r, T* out) {
  size_t n = 0;
  const uint8_t* p = r.bytes(&n);
  if (!r.ok() || n != sizeof(T)) return r.fail();
  std::memcpy(out, p, sizeof(T));
  return true;
}

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

template <class T>
bool read_optional(Reader& r, T* out, bool* present) {
  *present = r.u8() != 0;
  return r.ok() && (!*present || read_struct(r, out));
}

using GetDesc = CUresult (*)(CUDA_RESOURCE_DESC*, unsigned long long);

void get_resource_desc(Dispatch& d, GetDesc fn) {
  uint64_t object = d.args.u64();
  if (!d.args.ok()) return;
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUDA_RESOURCE_DESC desc{};
  CUresult rc = fn(&desc, object);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  to_client(d, &desc);
  d.reply.put(desc);
}

}  // namespace

void cuTexObjectCreate(Dispatch& d) {
  CUDA_RESOURCE_DESC res;
  CUDA_TEXTURE_DESC tex{};
  CUDA_RESOURCE_VIEW_DESC view{};
  bool has_tex = false, has_view = false;
  if (!read_struct(d.args, &res) || !read_optional(d.args, &tex, &has_tex) ||
      !read_optional(d.args, &view, &has_view))
    return;
  if (!d.drv.cuTexObjectCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  if (CUresult rc = to_driver(d, &res)) return d.reply.put<int32_t>(rc);
  CUtexObject obj = 0;
  CUresult rc = d.drv.cuTexObjectCreate(&obj, &res, has_tex ? &tex : nullptr, has_view ? &view : nullptr);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_u64(obj);
}

void cuSurfObjectCreate(Dispatch& d) {
  CUDA_RESOURCE_DESC res;
  if (!read_struct(d.args, &res)) return;
  if (!d.drv.cuSurfObjectCreate) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  if (CUresult rc = to_driver(d, &res)) return d.reply.put<int32_t>(rc);
  CUsurfObject obj = 0;
  CUresult rc = d.drv.cuSurfObjectCreate(&obj, &res);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put_u64(obj);
}

void cuTexObjectGetResourceDesc(Dispatch& d) { get_resource_desc(d, d.drv.cuTexObjectGetResourceDesc); }
void cuSurfObjectGetResourceDesc(Dispatch& d) { get_resource_desc(d, d.drv.cuSurfObjectGetResourceDesc); }

}  // namespace rgpu::server::handlers
