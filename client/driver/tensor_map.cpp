// cuTensorMapEncode{Tiled,Im2col,Im2colWide} and cuTensorMapReplaceAddress: Hopper's TMA
// descriptors. The driver packs the arguments into an opaque 128-byte CUtensorMap that the caller
// then passes to a kernel by value; cuBLAS and CUTLASS kernels on sm_90 build them for every GEMM
// shape they pick. The encoding is the driver's own and undocumented, so the server's driver does
// it and the 128 bytes come back; the device address inside is the server's, which is the address
// space kernels run in.
//
// Wire layout: protocol/wire/tensor_map.h; the caller's arrays are checked here, so they are
// never read past their end.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/tensor_map.h"

namespace {

using rgpu::client::Call;
namespace wire = rgpu::proto::wire;

// The driver accepts ranks 1..5 (3..5 for the im2col forms).
constexpr cuuint32_t kMaxRank = wire::kMaxTensorRank;

// The fields every form has; the caller has checked rank and the arrays.
wire::TensorMapEncode common(CUtensorMapDataType dtype, cuuint32_t rank, void* address, const cuuint64_t* dims,
                             const cuuint64_t* strides, const cuuint32_t* elementStrides) {
  wire::TensorMapEncode v;
  v.dtype = dtype;
  v.rank = rank;
  v.address = reinterpret_cast<uint64_t>(address);
  for (cuuint32_t i = 0; i < rank; ++i) v.dims[i] = dims[i];
  for (cuuint32_t i = 0; i + 1 < rank; ++i) v.strides[i] = strides[i];
  for (cuuint32_t i = 0; i < rank; ++i) v.elem[i] = elementStrides[i];
  return v;
}

CUresult finish(Call& c, CUtensorMap* tensorMap) {
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUtensorMap map;
  if (!wire::read_tensor_map(c.reply(), &map)) return CUDA_ERROR_UNKNOWN;
  std::memcpy(tensorMap, &map, sizeof map);
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
  wire::TensorMapEncode v = common(tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides);
  for (cuuint32_t i = 0; i < tensorRank; ++i) v.box[i] = boxDim[i];
  v.interleave = interleave, v.swizzle = swizzle, v.l2 = l2Promotion, v.oob = oobFill;
  wire::put_tensor_map_encode(c.args(), wire::TensorMapForm::kTiled, v);
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
  wire::TensorMapEncode v = common(tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides);
  for (cuuint32_t i = 0; i + 2 < tensorRank; ++i) v.lower[i] = pixelBoxLowerCorner[i];
  for (cuuint32_t i = 0; i + 2 < tensorRank; ++i) v.upper[i] = pixelBoxUpperCorner[i];
  v.channels = channelsPerPixel, v.pixels = pixelsPerColumn;
  v.interleave = interleave, v.swizzle = swizzle, v.l2 = l2Promotion, v.oob = oobFill;
  wire::put_tensor_map_encode(c.args(), wire::TensorMapForm::kIm2col, v);
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
  wire::TensorMapEncode v = common(tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides);
  v.lower[0] = pixelBoxLowerCornerWidth, v.upper[0] = pixelBoxUpperCornerWidth;
  v.channels = channelsPerPixel, v.pixels = pixelsPerColumn;
  v.interleave = interleave, v.mode = mode, v.swizzle = swizzle, v.l2 = l2Promotion, v.oob = oobFill;
  wire::put_tensor_map_encode(c.args(), wire::TensorMapForm::kIm2colWide, v);
  return finish(c, tensorMap);
}

RGPU_EXPORT CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  rgpu::client::trace_call("cuTensorMapReplaceAddress");
  if (!tensorMap) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuTensorMapReplaceAddress, rgpu::client::kWaits);
  wire::put_tensor_map_replace_address(c.args(), *tensorMap, reinterpret_cast<uint64_t>(globalAddress));
  return finish(c, tensorMap);
}

}  // extern "C"
