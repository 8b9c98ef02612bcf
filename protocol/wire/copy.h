// Copies between this process's memory and the server's on the wire: cuMemcpyHtoD*,
// cuMemcpyDtoH* (sync and async, each with _ptds/_ptsz), the async data frame that delivers a
// cuMemcpyDtoHAsync's bytes, and the pitched cuMemcpy2D*/cuMemcpy3D* copies. Used by
// client/driver/memory.cpp, client/driver/memcpy2d.cpp and client/connection.cpp, and by
// server/handlers/memory.cpp and server/handlers/memcpy2d.cpp.
//
// Bulk bytes are never copied into the call's buffer on the client: the encoders write the head,
// whose last field is the byte count, and the caller attaches the bytes behind it (Call::attach),
// or receives them straight into place (Call::reply_sink).
//
// Layout:
//  cuMemcpyHtoD (and _v2, _v2_ptds): u64 dst, u64 n, n bytes. Reply: CUresult.
//  cuMemcpyHtoDAsync (and _v2, _v2_ptsz): u64 dst, u64 stream, u64 n, n bytes. One-way.
//    Copies larger than one bulk chunk (RGPU_BULK_CHUNK) are one call per chunk.
//  cuMemcpyDtoH (and _v2, _v2_ptds): u64 src, u64 n (at most kMaxCopyBytes). Reply: CUresult,
//    then n bytes. The client asks for every chunk before it waits for the first reply, so the
//    server copies chunk k+1 off the device while chunk k is on the wire.
//  cuMemcpyDtoHAsync (and _v2, _v2_ptsz): u64 src, u64 stream, u64 n (at most kMaxCopyBytes),
//    u64 delivery id. One-way: the bytes come as a kOpAsyncData frame (protocol/messages.h) once
//    the copy has run, whose payload is AsyncData: u64 delivery id, i32 status, then (status 0)
//    the n bytes.
//  cuMemcpy2D*, cuMemcpy3D* (one layout, a 2D copy being a 3D copy of depth 1): u64 stream
//    (async ops only), then per side (src, dst) CopySide: u32 kind (CopySide::kHost, kDevice,
//    kArray), u64 xInBytes, y, z, lod, u64 device pointer or array id, u64 pitch, u64 height; then
//    u64 WidthInBytes, Height, Depth; then, for a host source, u64 n (= W*H*D, at most
//    kMaxCopyBytes) and n bytes. Reply: CUresult, then for a host destination W*H*D bytes. The
//    client makes every host side contiguous first (a host side travels with x = y = z = 0,
//    pitch W and height H) and cuts copies larger than a bulk chunk into boxes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>
#include <cstring>
#include <string>

#include "common/wire.h"
#include "protocol/messages.h"

namespace rgpu::proto::wire {

// Most bytes one copy call moves: one frame, less room for the reply's head.
inline constexpr uint64_t kMaxCopyBytes = kMaxPayload - 64;

// cuMemcpyHtoD*: the head; n bytes follow (attached by the caller).
void put_htod_head(Writer& w, bool async, uint64_t dst, uint64_t stream, uint64_t n);
struct HtoD {
  uint64_t dst = 0, stream = 0;
  const uint8_t* data = nullptr;  // into the message
  size_t n = 0;
};
bool read_htod(Reader& r, bool async, HtoD* out);

// cuMemcpyDtoH*.
struct DtoH {
  uint64_t src = 0, stream = 0, n = 0, delivery = 0;  // stream and delivery: async only
};
void put_dtoh(Writer& w, bool async, const DtoH& v);
bool read_dtoh(Reader& r, bool async, DtoH* out);

// kOpAsyncData's head; the bytes follow when status is 0. Inline: the connection code that reads
// it is linked into the NVML shim too, which has no use for the rest of protocol/wire/.
inline constexpr size_t kAsyncDataHead = 12;
inline void put_async_data_head(uint8_t out[kAsyncDataHead], uint64_t delivery, int32_t status) {
  std::memcpy(out, &delivery, 8);
  std::memcpy(out + 8, &status, 4);
}
inline bool read_async_data_head(Reader& r, uint64_t* delivery, int32_t* status) {
  *delivery = r.u64();
  *status = r.i32();
  return r.ok();
}

// cuMemcpy2D*, cuMemcpy3D*.
struct CopySide {
  enum Kind : uint32_t { kHost = 0, kDevice = 1, kArray = 2 };
  uint32_t kind = kDevice;
  uint64_t x = 0, y = 0, z = 0, lod = 0;
  uint64_t value = 0;  // device pointer or array id
  uint64_t pitch = 0, height = 0;
};
struct PitchedCopy {
  uint64_t stream = 0;  // async only
  CopySide src, dst;
  uint64_t width = 0, height = 0, depth = 0;
  const uint8_t* data = nullptr;  // a host source's W*H*D bytes, into the message
  size_t host_bytes = 0;          // W*H*D when a side is host memory, else 0
};
// The head, up to and including a host source's u64 n; the n bytes follow (attached by the caller).
void put_pitched_copy_head(Writer& w, bool async, const PitchedCopy& c);
// three_d false: a cuMemcpy2D*, whose depth must be 1. Refuses unknown kinds, a host side's size
// over kMaxCopyBytes or zero, and a host source whose bytes are not exactly W*H*D.
bool read_pitched_copy(Reader& r, bool async, bool three_d, PitchedCopy* out);

// Copies between two servers (protocol/messages.h kOpPeerTicket, kOpPeerSend, kOpPeerReceive,
// kOpPeerCancel).
using PeerTicket = std::array<uint8_t, kPeerTicketBytes>;
struct PeerSend {
  uint64_t copy = 0;
  std::string host;  // the destination server, as the client dialled it
  uint16_t port = 0;
  PeerTicket ticket{};
  uint64_t src = 0, n = 0;
  bool has_stream = false;
  uint64_t stream = 0;
  std::string fingerprint;  // B's certificate ("sha256:HEX"): the link runs TLS; empty: plain TCP
};
void put_peer_send(Writer& w, const PeerSend& v);
bool read_peer_send(Reader& r, PeerSend* out);
struct PeerReceive {
  uint64_t copy = 0, dst = 0, n = 0;
  bool has_stream = false;
  uint64_t stream = 0;
};
void put_peer_receive(Writer& w, const PeerReceive& v);
bool read_peer_receive(Reader& r, PeerReceive* out);
struct PeerCancel {
  uint64_t copy = 0;
  int32_t result = 0;  // what the source answered (a failure)
};
void put_peer_cancel(Writer& w, const PeerCancel& v);
bool read_peer_cancel(Reader& r, PeerCancel* out);

}  // namespace rgpu::proto::wire
