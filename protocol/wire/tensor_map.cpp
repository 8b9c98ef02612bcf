// Tensor maps on the wire (layout in tensor_map.h).
#include "protocol/wire/tensor_map.h"

namespace rgpu::proto::wire {

void put_tensor_map_encode(Writer& w, TensorMapForm form, const TensorMapEncode& v) {
  const uint32_t rank = v.rank;
  w.put_u32(v.dtype);
  w.put_u32(rank);
  w.put_u64(v.address);
  for (uint32_t i = 0; i < rank; ++i) w.put_u64(v.dims[i]);
  for (uint32_t i = 0; i + 1 < rank; ++i) w.put_u64(v.strides[i]);
  if (form == TensorMapForm::kTiled) {
    for (uint32_t i = 0; i < rank; ++i) w.put_u32(v.box[i]);
  } else {
    if (form == TensorMapForm::kIm2col) {
      for (uint32_t i = 0; i + 2 < rank; ++i) w.put<int32_t>(v.lower[i]);
      for (uint32_t i = 0; i + 2 < rank; ++i) w.put<int32_t>(v.upper[i]);
    } else {
      w.put<int32_t>(v.lower[0]);
      w.put<int32_t>(v.upper[0]);
    }
    w.put_u32(v.channels);
    w.put_u32(v.pixels);
  }
  for (uint32_t i = 0; i < rank; ++i) w.put_u32(v.elem[i]);
  w.put_u32(v.interleave);
  if (form == TensorMapForm::kIm2colWide) w.put_u32(v.mode);
  w.put_u32(v.swizzle);
  w.put_u32(v.l2);
  w.put_u32(v.oob);
}

bool read_tensor_map_encode(Reader& r, TensorMapForm form, TensorMapEncode* out) {
  out->dtype = r.u32();
  out->rank = r.u32();
  out->address = r.u64();
  const uint32_t rank = out->rank, min_rank = form == TensorMapForm::kTiled ? 1 : 3;
  if (!r.ok() || rank < min_rank || rank > kMaxTensorRank) return r.fail();
  for (uint32_t i = 0; i < rank; ++i) out->dims[i] = r.u64();
  for (uint32_t i = 0; i + 1 < rank; ++i) out->strides[i] = r.u64();
  if (form == TensorMapForm::kTiled) {
    for (uint32_t i = 0; i < rank; ++i) out->box[i] = r.u32();
  } else {
    if (form == TensorMapForm::kIm2col) {
      for (uint32_t i = 0; i + 2 < rank; ++i) out->lower[i] = r.i32();
      for (uint32_t i = 0; i + 2 < rank; ++i) out->upper[i] = r.i32();
    } else {
      out->lower[0] = r.i32();
      out->upper[0] = r.i32();
    }
    out->channels = r.u32();
    out->pixels = r.u32();
  }
  for (uint32_t i = 0; i < rank; ++i) out->elem[i] = r.u32();
  out->interleave = r.u32();
  out->mode = form == TensorMapForm::kIm2colWide ? r.u32() : 0;
  out->swizzle = r.u32();
  out->l2 = r.u32();
  out->oob = r.u32();
  return r.ok();
}

void put_tensor_map_replace_address(Writer& w, const CUtensorMap& map, uint64_t address) {
  w.append(&map, sizeof map);
  w.put_u64(address);
}

bool read_tensor_map_replace_address(Reader& r, CUtensorMap* map, uint64_t* address) {
  r.take(map, sizeof *map);
  *address = r.u64();
  return r.ok();
}

void put_tensor_map(Writer& w, const CUtensorMap& map) { w.append(&map, sizeof map); }

bool read_tensor_map(Reader& r, CUtensorMap* map) { return r.take(map, sizeof *map); }

}  // namespace rgpu::proto::wire
