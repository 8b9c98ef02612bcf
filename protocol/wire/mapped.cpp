// Mapped and managed memory on the wire (layout in mapped.h).
#include "protocol/wire/mapped.h"

#include <cstring>

namespace rgpu::proto::wire {

void put_mapped_alloc(Writer& w, const MappedAlloc& v) {
  w.put_u64(v.address);
  w.put_u64(v.size);
  w.put_u32(v.flags);
}

bool read_mapped_alloc(Reader& r, MappedAlloc* out) {
  out->address = r.u64();
  out->size = r.u64();
  out->flags = r.u32();
  return r.ok();
}

void put_mapped_alloc_reply(Writer& w, const MappedAllocReply& v) {
  w.put_u64(v.dptr);
  w.put_u64(v.server_address);
}

bool read_mapped_alloc_reply(Reader& r, MappedAllocReply* out) {
  out->dptr = r.u64();
  out->server_address = r.u64();
  return r.ok();
}

void put_managed_alloc(Writer& w, const ManagedAlloc& v) {
  w.put_u64(v.size);
  w.put_u32(v.flags);
}

bool read_managed_alloc(Reader& r, ManagedAlloc* out) {
  out->size = r.u64();
  out->flags = r.u32();
  return r.ok();
}

void put_managed_alloc_reply(Writer& w, uint64_t address) { w.put_u64(address); }

bool read_managed_alloc_reply(Reader& r, uint64_t* address) {
  *address = r.u64();
  return r.ok();
}

void put_mapped_free(Writer& w, uint64_t address) { w.put_u64(address); }

bool read_mapped_free(Reader& r, uint64_t* address) {
  *address = r.u64();
  return r.ok();
}

void put_mapped_bytes_head(uint8_t out[kMappedBytesHead], uint64_t address, uint64_t offset) {
  std::memcpy(out, &address, 8);
  std::memcpy(out + 8, &offset, 8);
}

void put_mapped_bytes(Writer& w, uint64_t address, uint64_t offset, const void* bytes, size_t n) {
  w.put_u64(address);
  w.put_u64(offset);
  w.append(bytes, n);
}

bool read_mapped_bytes(Reader& r, MappedBytes* out) {
  out->address = r.u64();
  out->offset = r.u64();
  if (!r.ok()) return false;
  out->n = r.left();
  out->bytes = r.view(out->n);
  return r.ok();
}

void put_mapped_copy(Writer& w, const MappedCopy& v) {
  w.put_u16(v.op);
  w.put_u64(v.device);
  w.put_u64(v.stream);
  w.put_u64(v.host);
  w.put_u64(v.n);
}

bool read_mapped_copy(Reader& r, MappedCopy* out) {
  out->op = r.u16();
  out->device = r.u64();
  out->stream = r.u64();
  out->host = r.u64();
  out->n = r.u64();
  return r.ok();
}

}  // namespace rgpu::proto::wire
