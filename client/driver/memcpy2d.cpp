// Pitched 2D and 3D copies (cuMemcpy2D*, cuMemcpy3D*). A CUDA_MEMCPY2D/3D names each side as
// host memory of this process, a device pointer, or a CUarray; host memory never crosses as a
// pointer. A host source is gathered here into contiguous rows and sent after the arguments; for
// a host destination the server replies with contiguous rows, scattered here into the caller's
// pitch. Both ops use one wire layout, the 2D form being a 3D copy of depth 1.
//
// Wire layout: protocol/wire/copy.h (cuMemcpy2D*, cuMemcpy3D*).
//
// Copies larger than one bulk chunk (env bulk_chunk) are cut into boxes: whole slices when a
// slice fits, else bands of rows, else pieces of one row; each box is one waiting call with the
// device/array sides' offsets moved to the box. CU_MEMORYTYPE_UNIFIED is resolved here as
// cuMemcpy does (client/driver/memory.cpp): a client pinned range or an address the server's
// driver does not know is host memory. Async ops wait for the data as cuMemcpyDtoHAsync does.
// Host to host runs here after the stream (async) or the context (sync) has drained.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "client/call.h"
#include "client/driver/host_memory.h"
#include "common/env.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/copy.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;
using rgpu::client::is_device;

using rgpu::proto::wire::CopySide;
enum Kind : uint32_t { kHost = CopySide::kHost, kDevice = CopySide::kDevice, kArray = CopySide::kArray };

struct Side {
  Kind kind;
  size_t x, y, z, lod;
  const uint8_t* host;  // kHost (written through for the destination)
  uint64_t value;       // device pointer or array id
  size_t pitch, height;
};

CUresult side(CUmemorytype type, size_t x, size_t y, size_t z, size_t lod, const void* host, CUdeviceptr dev,
              CUarray arr, size_t pitch, size_t height, Side* out) {
  *out = Side{kHost, x, y, z, lod, static_cast<const uint8_t*>(host), 0, pitch, height};
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      return host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
      out->kind = kDevice;
      out->value = dev;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
      out->kind = kArray;
      out->value = handle_id(arr);
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      if (is_device(dev)) {
        out->kind = kDevice;
        out->value = dev;
      } else {
        out->host = reinterpret_cast<const uint8_t*>(dev);
        if (!out->host) return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Address of row (y, z) of a host side, relative to the side's origin plus the box's.
const uint8_t* host_row(const Side& s, size_t bx, size_t by, size_t bz) {
  return s.host + (s.z + bz) * s.height * s.pitch + (s.y + by) * s.pitch + s.x + bx;
}

struct Copy {
  Side src, dst;
  size_t w, h, d;
};

struct Box {
  size_t x, y, z, w, h, d;
};

// A host side is contiguous over the box when its rows and slices follow each other.
bool contiguous(const Side& s, const Box& b) {
  return (b.h == 1 || s.pitch == b.w) && (b.d == 1 || s.pitch * s.height == b.w * b.h);
}

// A side as it travels: a host side is contiguous over the box (the caller gathers or scatters it).
CopySide wire_side(const Side& s, const Box& b) {
  bool host = s.kind == kHost;
  CopySide w;
  w.kind = s.kind;
  w.x = host ? 0 : s.x + b.x;
  w.y = host ? 0 : s.y + b.y;
  w.z = host ? 0 : s.z + b.z;
  w.lod = s.lod;
  w.value = host ? 0 : s.value;
  w.pitch = host ? b.w : s.pitch;
  w.height = host ? b.h : s.height;
  return w;
}

CUresult one_box(uint16_t op, bool async, CUstream stream, const Copy& cp, const Box& b) {
  size_t n = b.w * b.h * b.d;
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::PitchedCopy head;
  head.stream = handle_id(stream);
  head.src = wire_side(cp.src, b);
  head.dst = wire_side(cp.dst, b);
  head.width = b.w, head.height = b.h, head.depth = b.d;
  rgpu::proto::wire::put_pitched_copy_head(c.args(), async, head);
  std::vector<uint8_t> staging;
  if (cp.src.kind == kHost) {
    if (contiguous(cp.src, b)) {
      c.attach(host_row(cp.src, b.x, b.y, b.z), n);
    } else {
      staging.resize(n);
      uint8_t* o = staging.data();
      for (size_t k = 0; k < b.d; ++k)
        for (size_t j = 0; j < b.h; ++j, o += b.w) std::memcpy(o, host_row(cp.src, b.x, b.y + j, b.z + k), b.w);
      c.attach(staging.data(), n);
    }
  }
  uint8_t* dst_direct = nullptr;
  if (cp.dst.kind == kHost) {
    if (contiguous(cp.dst, b)) {
      dst_direct = const_cast<uint8_t*>(host_row(cp.dst, b.x, b.y, b.z));
      c.reply_sink(sizeof(int32_t), dst_direct, n);
    } else {
      staging.assign(n, 0);
      c.reply_sink(sizeof(int32_t), staging.data(), n);
    }
  }
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS || cp.dst.kind != kHost) return rc;
  if (c.sink_received() != n) return CUDA_ERROR_UNKNOWN;
  if (!dst_direct) {
    const uint8_t* in = staging.data();
    for (size_t k = 0; k < b.d; ++k)
      for (size_t j = 0; j < b.h; ++j, in += b.w)
        std::memcpy(const_cast<uint8_t*>(host_row(cp.dst, b.x, b.y + j, b.z + k)), in, b.w);
  }
  return CUDA_SUCCESS;
}

struct Ops {
  uint16_t op;
  bool async;
  CUresult (*sync)(CUstream);  // before a host-to-host copy
};

CUresult ctx_sync(CUstream) { return cuCtxSynchronize(); }

CUresult run(const Ops& ops, Copy cp, CUstream stream) {
  if (cp.w == 0 || cp.h == 0 || cp.d == 0) return CUDA_SUCCESS;
  if (cp.h > SIZE_MAX / cp.w || cp.d > SIZE_MAX / (cp.w * cp.h)) return CUDA_ERROR_INVALID_VALUE;
  for (const Side* s : {&cp.src, &cp.dst}) {
    if (s->kind != kHost) continue;
    if ((cp.h > 1 || cp.d > 1) && s->pitch < cp.w) return CUDA_ERROR_INVALID_VALUE;
    if (cp.d > 1 && s->height < cp.h) return CUDA_ERROR_INVALID_VALUE;
  }
  if (cp.src.kind == kHost && cp.dst.kind == kHost) {
    if (CUresult rc = ops.sync(stream)) return rc;
    for (size_t k = 0; k < cp.d; ++k)
      for (size_t j = 0; j < cp.h; ++j)
        std::memmove(const_cast<uint8_t*>(host_row(cp.dst, 0, j, k)), host_row(cp.src, 0, j, k), cp.w);
    return CUDA_SUCCESS;
  }
  size_t chunk = std::max<size_t>(rgpu::env::get().bulk_chunk, 1);
  size_t dx = cp.w, dy = cp.h, dz = cp.d;
  bool data = cp.src.kind == kHost || cp.dst.kind == kHost;
  if (data && cp.w > chunk) {
    dx = chunk, dy = 1, dz = 1;
  } else if (data && cp.w * cp.h > chunk) {
    dy = chunk / cp.w, dz = 1;
  } else if (data && cp.w * cp.h * cp.d > chunk) {
    dz = chunk / (cp.w * cp.h);
  }
  for (size_t z = 0; z < cp.d; z += dz)
    for (size_t y = 0; y < cp.h; y += dy)
      for (size_t x = 0; x < cp.w; x += dx) {
        Box b{x, y, z, std::min(dx, cp.w - x), std::min(dy, cp.h - y), std::min(dz, cp.d - z)};
        if (CUresult rc = one_box(ops.op, ops.async, stream, cp, b)) return rc;
      }
  return CUDA_SUCCESS;
}

CUresult copy2d(const Ops& ops, const CUDA_MEMCPY2D* p, CUstream stream) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Copy cp{};
  if (CUresult rc = side(p->srcMemoryType, p->srcXInBytes, p->srcY, 0, 0, p->srcHost, p->srcDevice, p->srcArray,
                         p->srcPitch, p->Height, &cp.src))
    return rc;
  if (CUresult rc = side(p->dstMemoryType, p->dstXInBytes, p->dstY, 0, 0, p->dstHost, p->dstDevice, p->dstArray,
                         p->dstPitch, p->Height, &cp.dst))
    return rc;
  cp.w = p->WidthInBytes, cp.h = p->Height, cp.d = 1;
  return run(ops, cp, stream);
}

CUresult copy3d(const Ops& ops, const CUDA_MEMCPY3D* p, CUstream stream) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->reserved0 || p->reserved1) return CUDA_ERROR_INVALID_VALUE;
  Copy cp{};
  if (CUresult rc = side(p->srcMemoryType, p->srcXInBytes, p->srcY, p->srcZ, p->srcLOD, p->srcHost, p->srcDevice,
                         p->srcArray, p->srcPitch, p->srcHeight, &cp.src))
    return rc;
  if (CUresult rc = side(p->dstMemoryType, p->dstXInBytes, p->dstY, p->dstZ, p->dstLOD, p->dstHost, p->dstDevice,
                         p->dstArray, p->dstPitch, p->dstHeight, &cp.dst))
    return rc;
  cp.w = p->WidthInBytes, cp.h = p->Height, cp.d = p->Depth;
  return run(ops, cp, stream);
}

}  // namespace

extern "C" {

#define RGPU_COPY(name, fn, type, async, sync)                                  \
  RGPU_EXPORT CUresult CUDAAPI name(const type* p) {                            \
    rgpu::client::trace_call(#name);                                            \
    static const Ops ops{rgpu::op::name, async, sync};                          \
    return fn(ops, p, nullptr);                                                 \
  }
#define RGPU_COPY_ASYNC(name, fn, type, sync)                                   \
  RGPU_EXPORT CUresult CUDAAPI name(const type* p, CUstream stream) {           \
    rgpu::client::trace_call(#name);                                            \
    static const Ops ops{rgpu::op::name, true, sync};                           \
    return fn(ops, p, stream);                                                  \
  }
RGPU_COPY(cuMemcpy2D_v2, copy2d, CUDA_MEMCPY2D, false, ctx_sync)
RGPU_COPY(cuMemcpy2D_v2_ptds, copy2d, CUDA_MEMCPY2D, false, ctx_sync)
RGPU_COPY(cuMemcpy2DUnaligned_v2, copy2d, CUDA_MEMCPY2D, false, ctx_sync)
RGPU_COPY(cuMemcpy2DUnaligned_v2_ptds, copy2d, CUDA_MEMCPY2D, false, ctx_sync)
RGPU_COPY(cuMemcpy3D_v2, copy3d, CUDA_MEMCPY3D, false, ctx_sync)
RGPU_COPY(cuMemcpy3D_v2_ptds, copy3d, CUDA_MEMCPY3D, false, ctx_sync)
RGPU_COPY_ASYNC(cuMemcpy2DAsync_v2, copy2d, CUDA_MEMCPY2D, cuStreamSynchronize)
RGPU_COPY_ASYNC(cuMemcpy2DAsync_v2_ptsz, copy2d, CUDA_MEMCPY2D, cuStreamSynchronize_ptsz)
RGPU_COPY_ASYNC(cuMemcpy3DAsync_v2, copy3d, CUDA_MEMCPY3D, cuStreamSynchronize)
RGPU_COPY_ASYNC(cuMemcpy3DAsync_v2_ptsz, copy3d, CUDA_MEMCPY3D, cuStreamSynchronize_ptsz)
#undef RGPU_COPY
#undef RGPU_COPY_ASYNC

}  // extern "C"
