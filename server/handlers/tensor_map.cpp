// cuTensorMapEncode{Tiled,Im2col,Im2colWide} and cuTensorMapReplaceAddress (wire layout in
// protocol/wire/tensor_map.h). The driver itself validates the values (ranks, alignment, box
// sizes); here only the array lengths are bounded before anything is read.
#include <cuda.h>

#include <cstring>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/tensor_map.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

namespace wire = proto::wire;

void reply_map(Dispatch& d, CUresult rc, const CUtensorMap& map) {
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) wire::put_tensor_map(d.reply, map);
}

}  // namespace

void cuTensorMapEncodeTiled(Dispatch& d) {
  wire::TensorMapEncode c;
  if (!wire::read_tensor_map_encode(d.args, wire::TensorMapForm::kTiled, &c)) return;
  if (!d.drv.cuTensorMapEncodeTiled) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeTiled(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, c.box, c.elem, static_cast<CUtensorMapInterleave>(c.interleave),
      static_cast<CUtensorMapSwizzle>(c.swizzle), static_cast<CUtensorMapL2promotion>(c.l2),
      static_cast<CUtensorMapFloatOOBfill>(c.oob));
  reply_map(d, rc, map);
}

void cuTensorMapEncodeIm2col(Dispatch& d) {
  wire::TensorMapEncode c;
  if (!wire::read_tensor_map_encode(d.args, wire::TensorMapForm::kIm2col, &c)) return;
  if (!d.drv.cuTensorMapEncodeIm2col) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeIm2col(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, c.lower, c.upper, c.channels, c.pixels, c.elem, static_cast<CUtensorMapInterleave>(c.interleave),
      static_cast<CUtensorMapSwizzle>(c.swizzle), static_cast<CUtensorMapL2promotion>(c.l2),
      static_cast<CUtensorMapFloatOOBfill>(c.oob));
  reply_map(d, rc, map);
}

void cuTensorMapEncodeIm2colWide(Dispatch& d) {
  wire::TensorMapEncode c;
  if (!wire::read_tensor_map_encode(d.args, wire::TensorMapForm::kIm2colWide, &c)) return;
  if (!d.drv.cuTensorMapEncodeIm2colWide) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeIm2colWide(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, c.lower[0], c.upper[0], c.channels, c.pixels, c.elem,
      static_cast<CUtensorMapInterleave>(c.interleave), static_cast<CUtensorMapIm2ColWideMode>(c.mode),
      static_cast<CUtensorMapSwizzle>(c.swizzle), static_cast<CUtensorMapL2promotion>(c.l2),
      static_cast<CUtensorMapFloatOOBfill>(c.oob));
  reply_map(d, rc, map);
}

void cuTensorMapReplaceAddress(Dispatch& d) {
  CUtensorMap map{};
  uint64_t address = 0;
  if (!wire::read_tensor_map_replace_address(d.args, &map, &address)) return;
  if (!d.drv.cuTensorMapReplaceAddress) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUresult rc = d.drv.cuTensorMapReplaceAddress(&map, reinterpret_cast<void*>(address));
  reply_map(d, rc, map);
}

}  // namespace rgpu::server::handlers
