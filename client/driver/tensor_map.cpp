// cuTensorMapEncode{Tiled,Im2col,Im2colWide} and cuTensorMapReplaceAddress: Hopper's TMA
// descriptors. The driver packs the arguments into an opaque 128-byte CUtensorMap that the caller
// then passes to a kernel by value; cuBLAS and CUTLASS kernels on sm_90 build them for every GEMM
// shape they pick. The encoding is the driver's own and undocumented, so the server's driver does
// it and the 128 bytes come back; the device address inside is the server's, which is the address
// space kernels run in.
//
// Wire (one op per entry point; arrays travel with the length their rank gives, checked here so
// the caller's arrays are never read past their end):
//   Tiled:      u32 dtype, u32 rank, u64 address, rank × u64 globalDim, (rank-1) × u64 globalStrides,
//               rank × u32 boxDim, rank × u32 elementStrides, u32 interleave, u32 swizzle,
//               u32 l2Promotion, u32 oobFill
//   Im2col:     u32 dtype, u32 rank, u64 address, dims, strides, (rank-2) × i32 lower corner,
//               (rank-2) × i32 upper corner, u32 channelsPerPixel, u32 pixelsPerColumn,
//               rank × u32 elementStrides, u32 interleave, u32 swizzle, u32 l2Promotion, u32 oobFill
//   Im2colWide: as Im2col but i32 lower width, i32 upper width instead of the corners, and u32 mode
//               after interleave
//   ReplaceAddress: 128 bytes map, u64 address
//   Reply (all): CUresult, then 128 bytes of CUtensorMap on success.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

using rgpu::Writer;
using rgpu::client::Call;

// The driver accepts ranks 1..5 (3..5 for the im2col forms).
constexpr cuuint32_t kMaxRank = 5;

void put_dims(Writer& w, cuuint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides) {
  for (cuuint32_t i = 0; i < rank; ++i) w.put_u64(dims[i]);
  for (cuuint32_t i = 0; i + 1 < rank; ++i) w.put_u64(strides[i]);
}

CUresult finish(Call& c, CUtensorMap* tensorMap) {
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  const uint8_t* bytes = c.reply().view(sizeof(CUtensorMap));
  if (!bytes || !c.reply().ok()) return CUDA_ERROR_UNKNOWN;
  std::memcpy(tensorMap, bytes, sizeof(CUtensorMap));
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                    cuuint32_t tensorRank, void* globalAddress,
                                                    const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                    const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                                    CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                    CUtensorMapL2promotion l2Promotion,
                                                    CUtensorMapFloatOOBfill oobFill) {
  rgpu::client::trace_call("cuTensorMapEncodeTiled");
  if (!tensorMap || tensorRank == 0 || tensorRank > kMaxRank || !globalDim || !boxDim || !elementStrides ||
      (tensorRank > 1 && !globalStrides))
    return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTensorMapEncodeTiled, rgpu::client::kWaits);
  Writer& w = c.args();
  w.put_u32(tensorDataType);
  w.put_u32(tensorRank);
  w.put_u64(reinterpret_cast<uint64_t>(globalAddress));
  put_dims(w, tensorRank, globalDim, globalStrides);
  for (cuuint32_t i = 0; i < tensorRank; ++i) w.put_u32(boxDim[i]);
  for (cuuint32_t i = 0; i < tensorRank; ++i) w.put_u32(elementStrides[i]);
  w.put_u32(interleave);
  w.put_u32(swizzle);
  w.put_u32(l2Promotion);
  w.put_u32(oobFill);
  return finish(c, tensorMap);
}

RGPU_EXPORT CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                     cuuint32_t tensorRank, void* globalAddress,
                                                     const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                     const int* pixelBoxLowerCorner, const int* pixelBoxUpperCorner,
                                                     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                                     const cuuint32_t* elementStrides,
                                                     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                     CUtensorMapL2promotion l2Promotion,
                                                     CUtensorMapFloatOOBfill oobFill) {
  rgpu::client::trace_call("cuTensorMapEncodeIm2col");
  if (!tensorMap || tensorRank < 3 || tensorRank > kMaxRank || !globalDim || !globalStrides ||
      !pixelBoxLowerCorner || !pixelBoxUpperCorner || !elementStrides)
    return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTensorMapEncodeIm2col, rgpu::client::kWaits);
  Writer& w = c.args();
  w.put_u32(tensorDataType);
  w.put_u32(tensorRank);
  w.put_u64(reinterpret_cast<uint64_t>(globalAddress));
  put_dims(w, tensorRank, globalDim, globalStrides);
  for (cuuint32_t i = 0; i + 2 < tensorRank; ++i) w.put<int32_t>(pixelBoxLowerCorner[i]);
  for (cuuint32_t i = 0; i + 2 < tensorRank; ++i) w.put<int32_t>(pixelBoxUpperCorner[i]);
  w.put_u32(channelsPerPixel);
  w.put_u32(pixelsPerColumn);
  for (cuuint32_t i = 0; i < tensorRank; ++i) w.put_u32(elementStrides[i]);
  w.put_u32(interleave);
  w.put_u32(swizzle);
  w.put_u32(l2Promotion);
  w.put_u32(oobFill);
  return finish(c, tensorMap);
}

RGPU_EXPORT CUresult CUDAAPI cuTensorMapEncodeIm2colWide(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
    const cuuint64_t* globalDim, const cuuint64_t* globalStrides, int pixelBoxLowerCornerWidth,
    int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  rgpu::client::trace_call("cuTensorMapEncodeIm2colWide");
  if (!tensorMap || tensorRank < 3 || tensorRank > kMaxRank || !globalDim || !globalStrides || !elementStrides)
    return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTensorMapEncodeIm2colWide, rgpu::client::kWaits);
  Writer& w = c.args();
  w.put_u32(tensorDataType);
  w.put_u32(tensorRank);
  w.put_u64(reinterpret_cast<uint64_t>(globalAddress));
  put_dims(w, tensorRank, globalDim, globalStrides);
  w.put<int32_t>(pixelBoxLowerCornerWidth);
  w.put<int32_t>(pixelBoxUpperCornerWidth);
  w.put_u32(channelsPerPixel);
  w.put_u32(pixelsPerColumn);
  for (cuuint32_t i = 0; i < tensorRank; ++i) w.put_u32(elementStrides[i]);
  w.put_u32(interleave);
  w.put_u32(mode);
  w.put_u32(swizzle);
  w.put_u32(l2Promotion);
  w.put_u32(oobFill);
  return finish(c, tensorMap);
}

RGPU_EXPORT CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  rgpu::client::trace_call("cuTensorMapReplaceAddress");
  if (!tensorMap) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTensorMapReplaceAddress, rgpu::client::kWaits);
  c.args().append(tensorMap, sizeof(CUtensorMap));
  c.args().put_u64(reinterpret_cast<uint64_t>(globalAddress));
  return finish(c, tensorMap);
}

}  // extern "C"
