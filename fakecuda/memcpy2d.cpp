// Pitched 2D and 3D copies (cuMemcpy2D*, cuMemcpy3D*) between host and linear device memory, in
// any direction. CUarray sides and LOD are answered CUDA_ERROR_NOT_SUPPORTED: the fake has no
// arrays. Each side's whole footprint (first byte of the first row to the last byte of the last)
// is checked before anything is written; a device footprint must lie in one live allocation.
// Timing: synchronous copies run on the legacy stream and return when done; async copies with
// a host side return when done too (allowed: stronger than the driver's pinned-memory rule);
// device-to-device async copies are queued on the stream.
#include <cstring>

#include "fakecuda/internal.h"

namespace fake {
namespace {

struct Side {
  CUmemorytype type;
  size_t x, y, z, lod;
  const void* host;
  CUdeviceptr dev;
  CUarray array;
  size_t pitch, height;
};

struct Shape {
  size_t w, h, d;
};

// Resolves a side to a host address of its origin; hold keeps device bytes alive.
CUresult resolve(const Side& s, const Shape& sh, bool three_d, uint8_t** out, Span* hold, bool* device) {
  if (s.type == CU_MEMORYTYPE_ARRAY || s.lod != 0) return CUDA_ERROR_NOT_SUPPORTED;
  bool dev = s.type == CU_MEMORYTYPE_DEVICE || (s.type == CU_MEMORYTYPE_UNIFIED && in_device_window(s.dev));
  uintptr_t base;
  if (s.type == CU_MEMORYTYPE_HOST) {
    base = reinterpret_cast<uintptr_t>(s.host);
  } else if (s.type == CU_MEMORYTYPE_DEVICE || s.type == CU_MEMORYTYPE_UNIFIED) {
    base = s.dev;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!base) return CUDA_ERROR_INVALID_VALUE;
  if ((sh.h > 1 || sh.d > 1) && s.pitch < sh.w) return CUDA_ERROR_INVALID_VALUE;
  if (three_d && sh.d > 1 && s.height < sh.h) return CUDA_ERROR_INVALID_VALUE;
  // Footprint [first, last): origin (x, y, z) to the end of row (y+h-1) of slice (z+d-1).
  size_t slice, first, last, t;
  if (__builtin_mul_overflow(s.pitch, s.height, &slice)) return CUDA_ERROR_INVALID_VALUE;
  if (__builtin_mul_overflow(s.z, slice, &first) || __builtin_mul_overflow(s.y, s.pitch, &t) ||
      __builtin_add_overflow(first, t, &first) || __builtin_add_overflow(first, s.x, &first))
    return CUDA_ERROR_INVALID_VALUE;
  if (__builtin_mul_overflow(sh.d - 1, slice, &last) || __builtin_mul_overflow(sh.h - 1, s.pitch, &t) ||
      __builtin_add_overflow(last, t, &last) || __builtin_add_overflow(last, sh.w, &last) ||
      __builtin_add_overflow(last, first, &last) || __builtin_add_overflow(base, first, &t))
    return CUDA_ERROR_INVALID_VALUE;
  *device = dev;
  if (!dev) {
    *out = reinterpret_cast<uint8_t*>(base + first);
    return CUDA_SUCCESS;
  }
  if (!device_span(base + first, last - first, hold)) return CUDA_ERROR_INVALID_VALUE;
  *out = hold->host;
  return CUDA_SUCCESS;
}

CUresult copy(const Side& src, const Side& dst, Shape sh, bool three_d, CUstream h, bool async) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (sh.w == 0 || sh.h == 0 || sh.d == 0) return CUDA_SUCCESS;
  uint8_t *from, *to;
  Span ss, ds;
  bool src_dev = false, dst_dev = false;
  if (CUresult r = resolve(src, sh, three_d, &from, &ss, &src_dev)) return r;
  if (CUresult r = resolve(dst, sh, three_d, &to, &ds, &dst_dev)) return r;
  size_t sp = src.pitch, dp = dst.pitch, sslice = src.pitch * src.height, dslice = dst.pitch * dst.height;
  bool wait = !async || !src_dev || !dst_dev;
  std::unique_lock lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(async ? h : nullptr, &s)) return r;
  uint64_t seq = submit_locked(s, [=] {
    for (size_t k = 0; k < sh.d; ++k)
      for (size_t j = 0; j < sh.h; ++j) std::memmove(to + k * dslice + j * dp, from + k * sslice + j * sp, sh.w);
    (void)ss, (void)ds;
  });
  if (!wait) return CUDA_SUCCESS;
  wait_seq(lk, s, seq);
  return ctx_alive_locked(s->ctx) ? s->ctx->sticky : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult copy2d(const CUDA_MEMCPY2D* p, CUstream h, bool async) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Side src{p->srcMemoryType, p->srcXInBytes, p->srcY, 0, 0, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, 0};
  Side dst{p->dstMemoryType, p->dstXInBytes, p->dstY, 0, 0, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, 0};
  return copy(src, dst, {p->WidthInBytes, p->Height, 1}, false, h, async);
}

CUresult copy3d(const CUDA_MEMCPY3D* p, CUstream h, bool async) {
  if (!p || p->reserved0 || p->reserved1) return CUDA_ERROR_INVALID_VALUE;
  Side src{p->srcMemoryType, p->srcXInBytes, p->srcY, p->srcZ, p->srcLOD, p->srcHost, p->srcDevice, p->srcArray,
           p->srcPitch, p->srcHeight};
  Side dst{p->dstMemoryType, p->dstXInBytes, p->dstY, p->dstZ, p->dstLOD, p->dstHost, p->dstDevice, p->dstArray,
           p->dstPitch, p->dstHeight};
  return copy(src, dst, {p->WidthInBytes, p->Height, p->Depth}, true, h, async);
}

}  // namespace
}  // namespace fake

FAKE_API CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return fake::copy2d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return fake::copy2d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream h) { return fake::copy2d(p, h, true); }
FAKE_API CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return fake::copy3d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream h) { return fake::copy3d(p, h, true); }

// Per-thread-default-stream variants: the legacy stream stands in (as in memory.cpp).
FAKE_API CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) { return fake::copy2d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) { return fake::copy2d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream h) { return fake::copy2d(p, h, true); }
FAKE_API CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) { return fake::copy3d(p, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream h) { return fake::copy3d(p, h, true); }
