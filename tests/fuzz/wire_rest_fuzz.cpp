// Fuzz target for protocol/wire/stream.h, memory.h, texture.h and tensor_map.h (host callbacks,
// stream attributes, VMM, memory pools, pointer attributes, texture and surface objects, tensor
// maps): the server decodes these requests, the
// client decodes their replies, so any bytes must decode or be refused without reading past the
// end or taking a count or size over the limits, and no decoded struct may carry a Windows
// pointer. The first byte picks the message: its low 5 bits the message, its top 3 the variant
// (bit 7 the form of a message that has two, the tensor map's form, the pointer attribute). What
// decodes must re-encode to bytes that decode and re-encode to the same bytes again.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/pointer_attributes.h"
#include "protocol/wire/memory.h"
#include "protocol/wire/stream.h"
#include "protocol/wire/tensor_map.h"
#include "protocol/wire/texture.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  const bool flag = k & 0x80;
  const unsigned variant = k >> 5;
  switch (k & 0x1f) {
    case 0: {
      HostCallback m;
      if (!read_host_callback(r, flag, &m)) return false;
      put_host_callback(*out, flag, m);
      return true;
    }
    case 1: {
      StreamAttribute m;
      if (!read_stream_attribute(r, flag, &m)) return false;
      put_stream_attribute(*out, flag, m);
      return true;
    }
    case 2: {
      Granularity m;
      if (!read_granularity(r, &m)) return false;
      if (m.prop.win32HandleMetaData) abort();
      put_granularity(*out, m);
      return true;
    }
    case 3: {
      MemCreate m;
      if (!read_mem_create(r, &m)) return false;
      if (m.prop.win32HandleMetaData) abort();
      put_mem_create(*out, m);
      return true;
    }
    case 4: {
      CUmemAllocationProp m;
      if (!read_allocation_prop(r, &m)) return false;
      if (m.win32HandleMetaData) abort();
      put_allocation_prop(*out, m);
      return true;
    }
    case 5: {
      PoolCreate m;
      if (!read_pool_create(r, &m)) return false;
      if (m.props.win32SecurityAttributes) abort();
      put_pool_create(*out, m);
      return true;
    }
    case 6: {
      PoolAttribute m;
      if (!read_pool_attribute(r, flag, &m)) return false;
      if (m.size > sizeof m.value) abort();
      put_pool_attribute(*out, flag, m);
      return true;
    }
    case 7: {
      PointerAttributes m;
      if (!read_pointer_attributes(r, flag, &m)) return false;
      if (m.attrs.empty() || m.attrs.size() > rgpu::proto::kMaxPointerAttributes) abort();
      // The encoder takes the driver's enum, which only known attributes may become (the
      // server answers the others CUDA_ERROR_INVALID_VALUE without making one).
      std::vector<CUpointer_attribute> attrs;
      for (int32_t a : m.attrs) {
        if (rgpu::proto::pointer_attribute_size(a) == 0) return false;
        attrs.push_back(static_cast<CUpointer_attribute>(a));
      }
      put_pointer_attributes(*out, m.pointer, attrs.data(), static_cast<uint32_t>(attrs.size()));
      return true;
    }
    case 9: {
      TextureCreate m;
      if (!read_texture_create(r, &m)) return false;
      put_texture_create(*out, m.res, m.has_tex ? &m.tex : nullptr, m.has_view ? &m.view : nullptr);
      return true;
    }
    case 10: {
      CUDA_RESOURCE_DESC m;
      if (!read_surface_create(r, &m)) return false;
      put_surface_create(*out, m);
      return true;
    }
    case 11: {
      const auto form = static_cast<TensorMapForm>(variant % 3);
      TensorMapEncode m;
      if (!read_tensor_map_encode(r, form, &m)) return false;
      if (m.rank == 0 || m.rank > kMaxTensorRank) abort();
      put_tensor_map_encode(*out, form, m);
      return true;
    }
    case 12: {
      CUtensorMap map;
      uint64_t address;
      if (!read_tensor_map_replace_address(r, &map, &address)) return false;
      put_tensor_map_replace_address(*out, map, address);
      return true;
    }
    case 13: {
      uint64_t v;
      if (!read_u64_value(r, &v)) return false;
      put_u64_value(*out, v);
      return true;
    }
    case 14: {
      CUstreamAttrValue v;
      if (!read_stream_attribute_value(r, &v)) return false;
      put_stream_attribute_value(*out, v);
      return true;
    }
    case 15: {
      CUtensorMap map;
      if (!read_tensor_map(r, &map)) return false;
      put_tensor_map(*out, map);
      return true;
    }
    case 16: {
      uint64_t object;
      if (!read_object(r, &object)) return false;
      put_object(*out, object);
      return true;
    }
    case 17: {
      CUDA_RESOURCE_DESC res;
      if (!read_resource_desc(r, &res)) return false;
      put_resource_desc(*out, res);
      return true;
    }
    case 8: {
      // A reply entry for attribute variant + 1: its size must be that attribute's.
      const int32_t attr = int32_t(variant) + 1;
      int32_t result;
      const uint8_t* value;
      uint32_t size;
      if (!read_pointer_attribute_value(r, attr, &result, &value, &size)) return false;
      if (size != rgpu::proto::pointer_attribute_size(attr)) abort();
      put_pointer_attribute_value(*out, result, value, size);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer cb, attr, gran, create, prop, pool, pattr, ptr, pval;
  put_host_callback(cb, true, {1, 2, 0});
  seed(0x80, cb);  // k & 0x1f picks the message, bit 7 the form
  CUstreamAttrValue v{};
  v.priority = 1;
  put_stream_attribute(attr, true, {1, CU_LAUNCH_ATTRIBUTE_PRIORITY, v});
  seed(0x81, attr);
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  put_granularity(gran, {p, 0});
  seed(2, gran);
  put_mem_create(create, {1 << 21, p, 0});
  seed(3, create);
  put_allocation_prop(prop, p);
  seed(4, prop);
  put_pool_create(pool, {1, CUmemPoolProps{}});
  seed(5, pool);
  PoolAttribute pa{1, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 8};
  put_pool_attribute(pattr, true, pa);
  seed(0x86, pattr);
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
  put_pointer_attributes(ptr, 0xd000, attrs, 2);
  seed(7, ptr);
  uint32_t type = CU_MEMORYTYPE_DEVICE;
  put_pointer_attribute_value(pval, 0, &type, 4);
  Writer tex, surf;
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_LINEAR;
  CUDA_TEXTURE_DESC td{};
  put_texture_create(tex, res, &td, nullptr);
  seed(9, tex);
  put_surface_create(surf, res);
  seed(10, surf);
  Writer tiled, replace;
  TensorMapEncode tm;
  tm.rank = 2;
  put_tensor_map_encode(tiled, TensorMapForm::kTiled, tm);
  seed(11, tiled);  // variant 0 % 3 == 0: the tiled form
  put_tensor_map_replace_address(replace, CUtensorMap{}, 0xd000);
  seed(12, replace);
  Writer u64, sval, map, object, rdesc;
  put_u64_value(u64, 1 << 20);
  seed(13, u64);
  put_stream_attribute_value(sval, v);
  seed(14, sval);
  put_tensor_map(map, CUtensorMap{});
  seed(15, map);
  put_object(object, 9);
  seed(16, object);
  put_resource_desc(rdesc, res);
  seed(17, rdesc);
  seed(0x28, pval);  // attribute variant + 1 == 2: MEMORY_TYPE
}
