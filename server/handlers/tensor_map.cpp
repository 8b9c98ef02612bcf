// cuTensorMapEncode{Tiled,Im2col,Im2colWide} and cuTensorMapReplaceAddress (wire layout in
// client/driver/tensor_map.cpp). The driver itself validates the values (ranks, alignment, box
// sizes); here only the array lengths are bounded before anything is read.
#include <cuda.h>

#include <cstring>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

constexpr uint32_t kMaxRank = 5;

struct Common {
  uint32_t dtype = 0, rank = 0;
  uint64_t address = 0;
  cuuint64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};
};

// Reads dtype, rank, address, dims and strides; false (args failed) when the rank is out of range.
bool read_common(Dispatch& d, Common& c, uint32_t min_rank) {
  c.dtype = d.args.u32();
  c.rank = d.args.u32();
  c.address = d.args.u64();
  if (!d.args.ok() || c.rank < min_rank || c.rank > kMaxRank) return d.args.fail();
  for (uint32_t i = 0; i < c.rank; ++i) c.dims[i] = d.args.u64();
  for (uint32_t i = 0; i + 1 < c.rank; ++i) c.strides[i] = d.args.u64();
  return d.args.ok();
}

void reply_map(Dispatch& d, CUresult rc, const CUtensorMap& map) {
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.append(&map, sizeof map);
}

}  // namespace

void cuTensorMapEncodeTiled(Dispatch& d) {
  Common c;
  if (!read_common(d, c, 1)) return;
  cuuint32_t box[kMaxRank] = {}, elem[kMaxRank] = {};
  for (uint32_t i = 0; i < c.rank; ++i) box[i] = d.args.u32();
  for (uint32_t i = 0; i < c.rank; ++i) elem[i] = d.args.u32();
  uint32_t interleave = d.args.u32(), swizzle = d.args.u32(), l2 = d.args.u32(), oob = d.args.u32();
  if (!d.args.ok()) return;
  if (!d.drv.cuTensorMapEncodeTiled) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeTiled(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, box, elem, static_cast<CUtensorMapInterleave>(interleave), static_cast<CUtensorMapSwizzle>(swizzle),
      static_cast<CUtensorMapL2promotion>(l2), static_cast<CUtensorMapFloatOOBfill>(oob));
  reply_map(d, rc, map);
}

void cuTensorMapEncodeIm2col(Dispatch& d) {
  Common c;
  if (!read_common(d, c, 3)) return;
  int lower[kMaxRank] = {}, upper[kMaxRank] = {};
  for (uint32_t i = 0; i + 2 < c.rank; ++i) lower[i] = d.args.i32();
  for (uint32_t i = 0; i + 2 < c.rank; ++i) upper[i] = d.args.i32();
  uint32_t channels = d.args.u32(), pixels = d.args.u32();
  cuuint32_t elem[kMaxRank] = {};
  for (uint32_t i = 0; i < c.rank; ++i) elem[i] = d.args.u32();
  uint32_t interleave = d.args.u32(), swizzle = d.args.u32(), l2 = d.args.u32(), oob = d.args.u32();
  if (!d.args.ok()) return;
  if (!d.drv.cuTensorMapEncodeIm2col) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeIm2col(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, lower, upper, channels, pixels, elem, static_cast<CUtensorMapInterleave>(interleave),
      static_cast<CUtensorMapSwizzle>(swizzle), static_cast<CUtensorMapL2promotion>(l2),
      static_cast<CUtensorMapFloatOOBfill>(oob));
  reply_map(d, rc, map);
}

void cuTensorMapEncodeIm2colWide(Dispatch& d) {
  Common c;
  if (!read_common(d, c, 3)) return;
  int32_t lower = d.args.i32(), upper = d.args.i32();
  uint32_t channels = d.args.u32(), pixels = d.args.u32();
  cuuint32_t elem[kMaxRank] = {};
  for (uint32_t i = 0; i < c.rank; ++i) elem[i] = d.args.u32();
  uint32_t interleave = d.args.u32(), mode = d.args.u32(), swizzle = d.args.u32(), l2 = d.args.u32(),
           oob = d.args.u32();
  if (!d.args.ok()) return;
  if (!d.drv.cuTensorMapEncodeIm2colWide) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUtensorMap map{};
  CUresult rc = d.drv.cuTensorMapEncodeIm2colWide(
      &map, static_cast<CUtensorMapDataType>(c.dtype), c.rank, reinterpret_cast<void*>(c.address), c.dims,
      c.strides, lower, upper, channels, pixels, elem, static_cast<CUtensorMapInterleave>(interleave),
      static_cast<CUtensorMapIm2ColWideMode>(mode), static_cast<CUtensorMapSwizzle>(swizzle),
      static_cast<CUtensorMapL2promotion>(l2), static_cast<CUtensorMapFloatOOBfill>(oob));
  reply_map(d, rc, map);
}

void cuTensorMapReplaceAddress(Dispatch& d) {
  CUtensorMap map{};
  if (!d.args.take(&map, sizeof map)) return;
  uint64_t address = d.args.u64();
  if (!d.args.ok()) return;
  if (!d.drv.cuTensorMapReplaceAddress) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUresult rc = d.drv.cuTensorMapReplaceAddress(&map, reinterpret_cast<void*>(address));
  reply_map(d, rc, map);
}

}  // namespace rgpu::server::handlers
