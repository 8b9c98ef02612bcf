// Pitched 2D and 3D copies (wire layout in protocol/wire/copy.h). The client has already
// made every host side contiguous: a host source arrives as W*H*D bytes and is described to the
// driver with pitch W and height H at the origin; a host destination is a buffer of the same
// shape sent back after the CUresult. Array ids go through the handle map; device pointers pass
// as they are (the driver checks them).
#include <cuda.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/copy.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using proto::wire::CopySide;
using Side = CopySide;
constexpr uint32_t kHost = CopySide::kHost, kDevice = CopySide::kDevice;

// Fills one side of the driver's struct; host sides point at `host`, shaped W x H.
bool fill(Dispatch& d, const Side& s, void* host, uint64_t w, uint64_t h, size_t* x, size_t* y, size_t* z,
          size_t* lod, CUmemorytype* type, void** host_out, CUdeviceptr* dev, CUarray* arr, size_t* pitch,
          size_t* height) {
  *x = s.x, *y = s.y, *z = s.z, *lod = s.lod, *pitch = s.pitch, *height = s.height;
  switch (s.kind) {
    case kHost:
      *type = CU_MEMORYTYPE_HOST;
      *host_out = host;
      *x = *y = *z = 0;
      *pitch = w, *height = h;
      return true;
    case kDevice:
      *type = CU_MEMORYTYPE_DEVICE;
      *dev = s.value;
      return true;
    default:
      *type = CU_MEMORYTYPE_ARRAY;
      return d.handles.get(s.value, arr);
  }
}

void free_buffer(void* p) { delete static_cast<std::vector<uint8_t>*>(p); }

template <class Sync, class Async>
void copy(Dispatch& d, bool three_d, Sync sync_fn, Async async_fn, bool async) {
  proto::wire::PitchedCopy req;
  if (!proto::wire::read_pitched_copy(d.args, async, three_d, &req)) return;
  const Side &src = req.src, &dst = req.dst;
  const uint64_t w = req.width, h = req.height, depth = req.depth, n = req.host_bytes;
  const uint8_t* in = req.data;
  const uint64_t stream_id = req.stream;
  CUstream stream = nullptr;
  if (!d.handles.get(stream_id, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (async ? !async_fn : !sync_fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);

  // The source must outlive an async copy: keep it until the stream passes this point.
  std::vector<uint8_t>* keep = in ? new std::vector<uint8_t>(in, in + n) : nullptr;
  Bytes scratch;
  Bytes& out = d.bulk ? *d.bulk : scratch;
  if (dst.kind == kHost) out.resize(n);

  CUDA_MEMCPY3D c3{};
  bool ok = fill(d, src, keep ? keep->data() : nullptr, w, h, &c3.srcXInBytes, &c3.srcY, &c3.srcZ, &c3.srcLOD,
                 &c3.srcMemoryType, const_cast<void**>(&c3.srcHost), &c3.srcDevice, &c3.srcArray, &c3.srcPitch,
                 &c3.srcHeight) &&
            fill(d, dst, out.data(), w, h, &c3.dstXInBytes, &c3.dstY, &c3.dstZ, &c3.dstLOD, &c3.dstMemoryType,
                 &c3.dstHost, &c3.dstDevice, &c3.dstArray, &c3.dstPitch, &c3.dstHeight);
  c3.WidthInBytes = w, c3.Height = h, c3.Depth = depth;
  CUresult rc = CUDA_ERROR_INVALID_HANDLE;
  if (ok) {
    if constexpr (std::is_invocable_v<Sync, const CUDA_MEMCPY3D*>) {
      rc = async ? async_fn(&c3, stream) : sync_fn(&c3);
    } else {
      CUDA_MEMCPY2D c2{};
      c2.srcXInBytes = c3.srcXInBytes, c2.srcY = c3.srcY, c2.srcMemoryType = c3.srcMemoryType;
      c2.srcHost = c3.srcHost, c2.srcDevice = c3.srcDevice, c2.srcArray = c3.srcArray, c2.srcPitch = c3.srcPitch;
      c2.dstXInBytes = c3.dstXInBytes, c2.dstY = c3.dstY, c2.dstMemoryType = c3.dstMemoryType;
      c2.dstHost = c3.dstHost, c2.dstDevice = c3.dstDevice, c2.dstArray = c3.dstArray, c2.dstPitch = c3.dstPitch;
      c2.WidthInBytes = w, c2.Height = h;
      rc = async ? async_fn(&c2, stream) : sync_fn(&c2);
    }
  }
  if (async && rc == CUDA_SUCCESS && dst.kind == kHost && d.drv.cuStreamSynchronize)
    rc = d.drv.cuStreamSynchronize(stream);
  if (keep) {
    if (!async || rc != CUDA_SUCCESS) {
      delete keep;
    } else if (!d.drv.cuLaunchHostFunc || d.drv.cuLaunchHostFunc(stream, free_buffer, keep) != CUDA_SUCCESS) {
      if (d.drv.cuStreamSynchronize) d.drv.cuStreamSynchronize(stream);
      delete keep;
    }
  }
  d.reply.put<int32_t>(rc);
  if (dst.kind != kHost) return;
  if (rc != CUDA_SUCCESS) {
    out.clear();
  } else if (!d.bulk) {
    d.reply.append(out.data(), out.size());
  }
}

using Sync2D = CUresult (*)(const CUDA_MEMCPY2D*);
using Async2D = CUresult (*)(const CUDA_MEMCPY2D*, CUstream);
using Sync3D = CUresult (*)(const CUDA_MEMCPY3D*);
using Async3D = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);

}  // namespace

void cuMemcpy2D_v2(Dispatch& d) { copy<Sync2D, Async2D>(d, false, d.drv.cuMemcpy2D_v2, nullptr, false); }
void cuMemcpy2D_v2_ptds(Dispatch& d) { copy<Sync2D, Async2D>(d, false, d.drv.cuMemcpy2D_v2_ptds, nullptr, false); }
void cuMemcpy2DUnaligned_v2(Dispatch& d) {
  copy<Sync2D, Async2D>(d, false, d.drv.cuMemcpy2DUnaligned_v2, nullptr, false);
}
void cuMemcpy2DUnaligned_v2_ptds(Dispatch& d) {
  copy<Sync2D, Async2D>(d, false, d.drv.cuMemcpy2DUnaligned_v2_ptds, nullptr, false);
}
void cuMemcpy2DAsync_v2(Dispatch& d) { copy<Sync2D, Async2D>(d, false, nullptr, d.drv.cuMemcpy2DAsync_v2, true); }
void cuMemcpy2DAsync_v2_ptsz(Dispatch& d) {
  copy<Sync2D, Async2D>(d, false, nullptr, d.drv.cuMemcpy2DAsync_v2_ptsz, true);
}
void cuMemcpy3D_v2(Dispatch& d) { copy<Sync3D, Async3D>(d, true, d.drv.cuMemcpy3D_v2, nullptr, false); }
void cuMemcpy3D_v2_ptds(Dispatch& d) { copy<Sync3D, Async3D>(d, true, d.drv.cuMemcpy3D_v2_ptds, nullptr, false); }
void cuMemcpy3DAsync_v2(Dispatch& d) { copy<Sync3D, Async3D>(d, true, nullptr, d.drv.cuMemcpy3DAsync_v2, true); }
void cuMemcpy3DAsync_v2_ptsz(Dispatch& d) {
  copy<Sync3D, Async3D>(d, true, nullptr, d.drv.cuMemcpy3DAsync_v2_ptsz, true);
}

}  // namespace rgpu::server::handlers
