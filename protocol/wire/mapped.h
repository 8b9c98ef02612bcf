// Mapped host memory and managed memory on the wire: kOpMappedAlloc, kOpManagedAlloc,
// kOpMappedFree, kOpMappedWrite (client to server), kOpMappedUpdate (server to client) and
// kOpMappedCopy (protocol/messages.h says what each op does and when it is sent). Used by
// client/mapped_memory.cpp and client/connection.cpp, and by server/mapped_memory.cpp.
//
// Layout:
//  kOpMappedAlloc: u64 client address, u64 size, u32 flags (CU_MEMHOSTALLOC_*).
//    Reply: CUresult, u64 device pointer, u64 server address (equal to the client address when
//    the server could map its copy there; for traces).
//  kOpManagedAlloc: u64 size, u32 flags (CU_MEM_ATTACH_*). Reply: CUresult, u64 address.
//  kOpMappedFree: u64 client address. One-way.
//  kOpMappedWrite, kOpMappedUpdate (MappedBytes): u64 client address, u64 offset, then the bytes
//    to the end of the payload. kOpMappedUpdate's one special form, offset kManagedFreed and no
//    bytes, says the program freed that managed buffer.
//  kOpMappedCopy: u16 the driver call the program made, u64 device pointer, u64 stream (client
//    handle; async calls only, else 0), u64 client host address, u64 n. Reply (sync): CUresult.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/wire.h"

namespace rgpu::proto::wire {

inline constexpr uint64_t kManagedFreed = ~uint64_t(0);
inline constexpr size_t kMappedBytesHead = 16;

struct MappedAlloc {
  uint64_t address = 0, size = 0;
  uint32_t flags = 0;
};
void put_mapped_alloc(Writer& w, const MappedAlloc& v);
bool read_mapped_alloc(Reader& r, MappedAlloc* out);
struct MappedAllocReply {
  uint64_t dptr = 0, server_address = 0;
};
void put_mapped_alloc_reply(Writer& w, const MappedAllocReply& v);
bool read_mapped_alloc_reply(Reader& r, MappedAllocReply* out);

struct ManagedAlloc {
  uint64_t size = 0;
  uint32_t flags = 0;
};
void put_managed_alloc(Writer& w, const ManagedAlloc& v);
bool read_managed_alloc(Reader& r, ManagedAlloc* out);
void put_managed_alloc_reply(Writer& w, uint64_t address);
bool read_managed_alloc_reply(Reader& r, uint64_t* address);

void put_mapped_free(Writer& w, uint64_t address);
bool read_mapped_free(Reader& r, uint64_t* address);

// kOpMappedWrite and kOpMappedUpdate. The head alone, for a sender that sends the bytes from where
// they lie (Connection::send_oneway); or head and bytes into one payload.
void put_mapped_bytes_head(uint8_t out[kMappedBytesHead], uint64_t address, uint64_t offset);
void put_mapped_bytes(Writer& w, uint64_t address, uint64_t offset, const void* bytes, size_t n);
struct MappedBytes {
  uint64_t address = 0, offset = 0;
  const uint8_t* bytes = nullptr;  // into the message
  size_t n = 0;
};
bool read_mapped_bytes(Reader& r, MappedBytes* out);

struct MappedCopy {
  uint16_t op = 0;
  uint64_t device = 0, stream = 0, host = 0, n = 0;
};
void put_mapped_copy(Writer& w, const MappedCopy& v);
bool read_mapped_copy(Reader& r, MappedCopy* out);

}  // namespace rgpu::proto::wire
