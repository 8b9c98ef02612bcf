// Texture and surface objects on the wire (layout in texture.h).
#include "protocol/wire/texture.h"

#include <cstring>

namespace rgpu::proto::wire {
namespace {

// A struct sent as u64 size + bytes; the size must be exactly sizeof(T).
template <class T>
bool read_struct(Reader& r, T* out) {
  size_t n = 0;
  const uint8_t* p = r.bytes(&n);
  if (!r.ok() || n != sizeof(T)) return r.fail();
  std::memcpy(out, p, sizeof(T));
  return true;
}

template <class T>
void put_optional(Writer& w, const T* p) {
  w.put_u8(p != nullptr);
  if (p) w.put_bytes(p, sizeof(T));
}

template <class T>
bool read_optional(Reader& r, T* out, bool* present) {
  *present = r.u8() != 0;
  return r.ok() && (!*present || read_struct(r, out));
}

}  // namespace

void put_texture_create(Writer& w, const CUDA_RESOURCE_DESC& res, const CUDA_TEXTURE_DESC* tex,
                        const CUDA_RESOURCE_VIEW_DESC* view) {
  w.put_bytes(&res, sizeof res);
  put_optional(w, tex);
  put_optional(w, view);
}

bool read_texture_create(Reader& r, TextureCreate* out) {
  return read_struct(r, &out->res) && read_optional(r, &out->tex, &out->has_tex) &&
         read_optional(r, &out->view, &out->has_view);
}

void put_surface_create(Writer& w, const CUDA_RESOURCE_DESC& res) { w.put_bytes(&res, sizeof res); }

bool read_surface_create(Reader& r, CUDA_RESOURCE_DESC* res) { return read_struct(r, res); }

void put_object(Writer& w, uint64_t object) { w.put_u64(object); }

bool read_object(Reader& r, uint64_t* object) {
  *object = r.u64();
  return r.ok();
}

void put_resource_desc(Writer& w, const CUDA_RESOURCE_DESC& res) { w.put(res); }

bool read_resource_desc(Reader& r, CUDA_RESOURCE_DESC* res) { return r.take(res, sizeof *res); }

}  // namespace rgpu::proto::wire
