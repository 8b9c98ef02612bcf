// Texture and surface objects on the wire: cuTexObjectCreate, cuSurfObjectCreate,
// cuTexObjectGetResourceDesc, cuSurfObjectGetResourceDesc. Used by client/driver/texture.cpp and
// server/handlers/texture.cpp.
//
// A CUDA_RESOURCE_DESC names its resource by CUarray or CUmipmappedArray handle or by device
// pointer; it travels as its own bytes, because a client's handle values are its wire ids (the
// server translates them both ways, and accepts only the resource types cuda.h defines, so no
// other bytes of the union are read as a handle). Texture and surface objects are 64-bit values
// the server's driver chose, not handles: they travel as they are.
//
// Layout:
//  cuTexObjectCreate: u64 n + n bytes CUDA_RESOURCE_DESC, u8 has_tex (+ u64 n + n bytes
//    CUDA_TEXTURE_DESC), u8 has_view (+ u64 n + n bytes CUDA_RESOURCE_VIEW_DESC); each n must be
//    the struct's size. Reply: CUresult, u64 object.
//  cuSurfObjectCreate: u64 n + n bytes CUDA_RESOURCE_DESC. Reply: CUresult, u64 object.
//  cuTexObjectGetResourceDesc, cuSurfObjectGetResourceDesc: u64 object. Reply: CUresult,
//    CUDA_RESOURCE_DESC (its bytes, handles as ids).
#pragma once

#include <cuda.h>

#include "common/wire.h"

namespace rgpu::proto::wire {

// tex and view may be null (absent); res may not.
void put_texture_create(Writer& w, const CUDA_RESOURCE_DESC& res, const CUDA_TEXTURE_DESC* tex,
                        const CUDA_RESOURCE_VIEW_DESC* view);
struct TextureCreate {
  CUDA_RESOURCE_DESC res{};
  bool has_tex = false, has_view = false;
  CUDA_TEXTURE_DESC tex{};
  CUDA_RESOURCE_VIEW_DESC view{};
};
bool read_texture_create(Reader& r, TextureCreate* out);

void put_surface_create(Writer& w, const CUDA_RESOURCE_DESC& res);
bool read_surface_create(Reader& r, CUDA_RESOURCE_DESC* res);

// A texture or surface object: the creates' reply after the CUresult, the get-resource-desc request.
void put_object(Writer& w, uint64_t object);
bool read_object(Reader& r, uint64_t* object);

// The get-resource-desc reply after the CUresult.
void put_resource_desc(Writer& w, const CUDA_RESOURCE_DESC& res);
bool read_resource_desc(Reader& r, CUDA_RESOURCE_DESC* res);

}  // namespace rgpu::proto::wire
