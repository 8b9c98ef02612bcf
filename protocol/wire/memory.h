// Device memory on the wire, the calls the generator cannot marshal: virtual memory management
// (cuMemGetAllocationGranularity, cuMemCreate, cuMemGetAllocationPropertiesFromHandle,
// cuMemRetainAllocationHandle), memory pools (cuMemPoolCreate, cuMemPoolGetAttribute,
// cuMemPoolSetAttribute) and pointer attributes (cuPointerGetAttribute, cuPointerGetAttributes;
// each attribute's size is protocol/pointer_attributes.h). Used by client/driver/vmm.cpp,
// client/driver/memory_pool.cpp and client/driver/host_memory.cpp, and by
// server/handlers/vmm.cpp, server/handlers/memory_pool.cpp and server/handlers/memory.cpp.
//
// Windows-only pointers (CUmemAllocationProp::win32HandleMetaData,
// CUmemPoolProps::win32SecurityAttributes) must be NULL on the client and travel as 0; the
// decoders clear them again, so no pointer is ever taken from the wire. A device location's id
// travels as the server's ordinal (the client maps it). Allocation handles are the server
// driver's 64-bit values and travel as they are.
//
// Layout:
//  cuMemGetAllocationGranularity: CUmemAllocationProp, i32 option. Reply: CUresult, u64.
//  cuMemCreate: u64 size, CUmemAllocationProp, u64 flags. Reply: CUresult, u64 handle.
//  cuMemGetAllocationPropertiesFromHandle: u64 handle. Reply: CUresult, CUmemAllocationProp.
//  cuMemRetainAllocationHandle: u64 device address. Reply: CUresult, u64 handle.
//  cuMemPoolCreate: u64 pool id (client-minted), CUmemPoolProps. Reply: CUresult.
//  cuMemPoolGetAttribute: u64 pool, i32 attr. Reply: CUresult, u32 size, size bytes.
//  cuMemPoolSetAttribute: u64 pool, i32 attr, u32 size (at most 8), size bytes. Reply: CUresult.
//    size: pool_attribute_size (4 for the int attributes, REUSE_*; 8 for the cuuint64_t ones).
//  cuPointerGetAttribute(s): u64 pointer, u32 n (1 for cuPointerGetAttribute, at most
//    kMaxPointerAttributes), n × i32 attribute. Reply: CUresult; on success n × (i32 the
//    attribute's own CUresult, u32 size, size bytes); handle-valued attributes (context, pool)
//    carry the client's ids.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto::wire {

// The bytes a memory pool attribute's value takes; 0 for an attribute this build does not know.
uint32_t pool_attribute_size(int32_t attr);

struct Granularity {
  CUmemAllocationProp prop{};
  int32_t option = 0;
};
void put_granularity(Writer& w, const Granularity& v);
bool read_granularity(Reader& r, Granularity* out);

struct MemCreate {
  uint64_t size = 0;
  CUmemAllocationProp prop{};
  uint64_t flags = 0;
};
void put_mem_create(Writer& w, const MemCreate& v);
bool read_mem_create(Reader& r, MemCreate* out);

// One u64: cuMemGetAllocationPropertiesFromHandle's and cuMemRetainAllocationHandle's requests
// (a handle, a device address), and the granularity and handle replies.
void put_u64_value(Writer& w, uint64_t v);
bool read_u64_value(Reader& r, uint64_t* v);

// A CUmemAllocationProp alone (cuMemGetAllocationPropertiesFromHandle's reply).
void put_allocation_prop(Writer& w, const CUmemAllocationProp& v);
bool read_allocation_prop(Reader& r, CUmemAllocationProp* out);

struct PoolCreate {
  uint64_t id = 0;
  CUmemPoolProps props{};
};
void put_pool_create(Writer& w, const PoolCreate& v);
bool read_pool_create(Reader& r, PoolCreate* out);

struct PoolAttribute {
  uint64_t pool = 0;
  int32_t attr = 0;
  uint32_t size = 0;  // set, and the get's reply
  uint8_t value[8] = {};
};
// The request (with_value: cuMemPoolSetAttribute), or the get's reply (put/read_pool_value).
void put_pool_attribute(Writer& w, bool with_value, const PoolAttribute& v);
bool read_pool_attribute(Reader& r, bool with_value, PoolAttribute* out);
void put_pool_value(Writer& w, const void* value, uint32_t size);
bool read_pool_value(Reader& r, PoolAttribute* out);

struct PointerAttributes {
  uint64_t pointer = 0;
  std::vector<int32_t> attrs;  // as integers: only known ones become the enum
};
void put_pointer_attributes(Writer& w, uint64_t pointer, const CUpointer_attribute* attrs, uint32_t n);
// one: cuPointerGetAttribute, which asks exactly one attribute.
bool read_pointer_attributes(Reader& r, bool one, PointerAttributes* out);
// One entry of the reply; the reader refuses a size other than the attribute's.
void put_pointer_attribute_value(Writer& w, int32_t result, const void* value, uint32_t size);
bool read_pointer_attribute_value(Reader& r, int32_t attr, int32_t* result, const uint8_t** value, uint32_t* size);

}  // namespace rgpu::proto::wire
