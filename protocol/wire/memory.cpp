// Device memory on the wire (layout in memory.h).
#include "protocol/wire/memory.h"

#include <cstring>

#include "protocol/pointer_attributes.h"

namespace rgpu::proto::wire {

uint32_t pool_attribute_size(int32_t attr) {
  if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES && attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    return 4;
  if (attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH) return 8;
  return 0;
}

namespace {
CUmemAllocationProp cleared(CUmemAllocationProp p) {
  p.win32HandleMetaData = nullptr;
  return p;
}
}  // namespace

void put_granularity(Writer& w, const Granularity& v) {
  w.put(cleared(v.prop));
  w.put<int32_t>(v.option);
}

bool read_granularity(Reader& r, Granularity* out) {
  out->prop = cleared(r.get<CUmemAllocationProp>());
  out->option = r.i32();
  return r.ok();
}

void put_mem_create(Writer& w, const MemCreate& v) {
  w.put_u64(v.size);
  w.put(cleared(v.prop));
  w.put_u64(v.flags);
}

bool read_mem_create(Reader& r, MemCreate* out) {
  out->size = r.u64();
  out->prop = cleared(r.get<CUmemAllocationProp>());
  out->flags = r.u64();
  return r.ok();
}

void put_u64_value(Writer& w, uint64_t v) { w.put_u64(v); }

bool read_u64_value(Reader& r, uint64_t* v) {
  *v = r.u64();
  return r.ok();
}

void put_allocation_prop(Writer& w, const CUmemAllocationProp& v) { w.put(cleared(v)); }

bool read_allocation_prop(Reader& r, CUmemAllocationProp* out) {
  *out = cleared(r.get<CUmemAllocationProp>());
  return r.ok();
}

void put_pool_create(Writer& w, const PoolCreate& v) {
  w.put_u64(v.id);
  CUmemPoolProps p = v.props;
  p.win32SecurityAttributes = nullptr;
  w.put(p);
}

bool read_pool_create(Reader& r, PoolCreate* out) {
  out->id = r.u64();
  out->props = r.get<CUmemPoolProps>();
  out->props.win32SecurityAttributes = nullptr;  // never a pointer from the wire
  return r.ok();
}

void put_pool_attribute(Writer& w, bool with_value, const PoolAttribute& v) {
  w.put_u64(v.pool);
  w.put<int32_t>(v.attr);
  if (with_value) put_pool_value(w, v.value, v.size);
}

bool read_pool_attribute(Reader& r, bool with_value, PoolAttribute* out) {
  out->pool = r.u64();
  out->attr = r.i32();
  if (with_value) return read_pool_value(r, out);
  return r.ok();
}

void put_pool_value(Writer& w, const void* value, uint32_t size) {
  w.put_u32(size);
  w.append(value, size);
}

bool read_pool_value(Reader& r, PoolAttribute* out) {
  out->size = r.u32();
  if (!r.ok() || out->size > sizeof out->value) return r.fail();
  std::memset(out->value, 0, sizeof out->value);
  r.take(out->value, out->size);
  return r.ok();
}

void put_pointer_attributes(Writer& w, uint64_t pointer, const CUpointer_attribute* attrs, uint32_t n) {
  w.put_u64(pointer);
  w.put_u32(n);
  for (uint32_t i = 0; i < n; ++i) w.put<int32_t>(attrs[i]);
}

bool read_pointer_attributes(Reader& r, bool one, PointerAttributes* out) {
  out->pointer = r.u64();
  uint32_t n = r.u32();
  if (!r.ok() || n == 0 || n > kMaxPointerAttributes || (one && n != 1)) return r.fail();
  out->attrs.resize(n);
  for (auto& a : out->attrs) a = r.i32();
  return r.ok();
}

void put_pointer_attribute_value(Writer& w, int32_t result, const void* value, uint32_t size) {
  w.put<int32_t>(result);
  w.put_u32(size);
  w.append(value, size);
}

bool read_pointer_attribute_value(Reader& r, int32_t attr, int32_t* result, const uint8_t** value, uint32_t* size) {
  *result = r.i32();
  *size = r.u32();
  if (!r.ok() || *size != pointer_attribute_size(attr)) return r.fail();
  *value = r.view(*size);
  return r.ok();
}

}  // namespace rgpu::proto::wire
