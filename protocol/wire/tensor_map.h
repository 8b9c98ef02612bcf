// Tensor maps (Hopper's TMA descriptors) on the wire: cuTensorMapEncodeTiled,
// cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide, cuTensorMapReplaceAddress. Used by
// client/driver/tensor_map.cpp and server/handlers/tensor_map.cpp. The driver's 128-byte
// encoding is its own and undocumented, so the server's driver encodes and the map comes back;
// the device address inside is the server's, the address space kernels run in.
//
// Layout (arrays travel with the length their rank gives, 1..kMaxTensorRank, 3.. for the
// im2col forms; the client checks the caller's arrays, the decoder the rank, before either reads
// an element):
//  Tiled:      u32 dtype, u32 rank, u64 address, rank × u64 globalDim, (rank-1) × u64
//              globalStrides, rank × u32 boxDim, rank × u32 elementStrides, u32 interleave,
//              u32 swizzle, u32 l2Promotion, u32 oobFill
//  Im2col:     u32 dtype, u32 rank, u64 address, dims, strides, (rank-2) × i32 lower corner,
//              (rank-2) × i32 upper corner, u32 channelsPerPixel, u32 pixelsPerColumn,
//              rank × u32 elementStrides, u32 interleave, u32 swizzle, u32 l2Promotion, u32 oobFill
//  Im2colWide: as Im2col but i32 lower width, i32 upper width instead of the corners, and u32
//              mode after interleave
//  ReplaceAddress: 128 bytes map, u64 address
//  Reply (all): CUresult, then the 128 bytes of CUtensorMap on success.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/wire.h"

namespace rgpu::proto::wire {

inline constexpr uint32_t kMaxTensorRank = 5;

enum class TensorMapForm { kTiled, kIm2col, kIm2colWide };

struct TensorMapEncode {
  uint32_t dtype = 0, rank = 0;
  uint64_t address = 0;
  cuuint64_t dims[kMaxTensorRank] = {}, strides[kMaxTensorRank] = {};
  cuuint32_t box[kMaxTensorRank] = {};      // Tiled
  int32_t lower[kMaxTensorRank] = {}, upper[kMaxTensorRank] = {};  // Im2col (rank-2); Im2colWide: [0]
  uint32_t channels = 0, pixels = 0;        // Im2col, Im2colWide
  cuuint32_t elem[kMaxTensorRank] = {};
  uint32_t interleave = 0, mode = 0, swizzle = 0, l2 = 0, oob = 0;  // mode: Im2colWide
};
// The caller fills v from the driver call's arguments, having checked the rank and arrays.
void put_tensor_map_encode(Writer& w, TensorMapForm form, const TensorMapEncode& v);
// False when malformed, or the rank is out of range for the form.
bool read_tensor_map_encode(Reader& r, TensorMapForm form, TensorMapEncode* out);

void put_tensor_map_replace_address(Writer& w, const CUtensorMap& map, uint64_t address);
bool read_tensor_map_replace_address(Reader& r, CUtensorMap* map, uint64_t* address);

// Every form's reply after the CUresult (on success).
void put_tensor_map(Writer& w, const CUtensorMap& map);
bool read_tensor_map(Reader& r, CUtensorMap* map);

}  // namespace rgpu::proto::wire
