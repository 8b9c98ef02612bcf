// Module images from the wire, made safe to hand to the driver. The driver finds an image's
// length in the image itself (fatbin and ELF headers, PTX's NUL), so a hostile image whose
// headers claim more than the frame holds would make it read past the payload, and a fatbin
// wrapper holds a pointer it would follow. Both are refused here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/cuda_image.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {

// The image to pass to the driver, or nullptr when it is not a cubin, fatbin or PTX that lies
// wholly inside the n bytes received. PTX without its NUL is copied into *copy and terminated.
inline const void* checked_image(const uint8_t* image, size_t n, std::string* copy) {
  if (!image || n == 0) return nullptr;
  image::Kind kind = image::detect(image, n);
  if (kind == image::Kind::kPtx && image[n - 1] != 0) {
    copy->assign(reinterpret_cast<const char*>(image), n);
    return copy->c_str();
  }
  if (kind == image::Kind::kFatbinWrapper || kind == image::Kind::kUnknown) return nullptr;
  size_t size = image::image_size(image, n);
  return size != 0 && size <= n ? image : nullptr;
}

// Loads an image (checked_image first) as a module / a library and binds it to the client's id.
// Shared by the cuModuleLoadData / cuLibraryLoadData handlers and kOpModuleByHash.
CUresult load_module_image(Dispatch& d, uint64_t id, const uint8_t* image, size_t n);   // module.cpp
CUresult load_library_image(Dispatch& d, uint64_t id, const uint8_t* image, size_t n);  // library.cpp

}  // namespace rgpu::server::handlers
