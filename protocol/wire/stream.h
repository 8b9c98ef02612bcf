// Streams on the wire: host callbacks (cuLaunchHostFunc, cuStreamAddCallback) and stream
// attributes (cuStreamGetAttribute, cuStreamSetAttribute), each with _ptsz. Used by
// client/driver/host_callback.cpp and client/driver/stream_attr.cpp, and by
// server/handlers/callback.cpp and server/handlers/stream_attr.cpp.
//
// Layout:
//  cuLaunchHostFunc: u64 stream, u64 callback id. One-way.
//  cuStreamAddCallback: u64 stream, u64 callback id, u32 flags. One-way.
//    The function runs in the client process (kOpCallback in protocol/messages.h says how): the
//    client picks the id and remembers the function under it.
//  cuStreamGetAttribute: u64 stream, i32 attr. Reply: CUresult, CUstreamAttrValue.
//  cuStreamSetAttribute: u64 stream, i32 attr, CUstreamAttrValue. Reply: CUresult.
//    CUstreamAttrValue is a union read by attribute id; the ids valid for streams
//    (stream_attribute) hold scalars and, in the access policy window, a device address, so the
//    union travels as its bytes. Every other id is refused with CUDA_ERROR_INVALID_VALUE on both
//    sides, as the driver refuses attributes not valid for streams.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/wire.h"

namespace rgpu::proto::wire {

struct HostCallback {
  uint64_t stream = 0, id = 0;
  uint32_t flags = 0;  // cuStreamAddCallback only
};
void put_host_callback(Writer& w, bool with_flags, const HostCallback& v);
bool read_host_callback(Reader& r, bool with_flags, HostCallback* out);

// The attribute ids whose CUstreamAttrValue may travel (an integer: the id came off the wire).
bool stream_attribute(int32_t attr);

struct StreamAttribute {
  uint64_t stream = 0;
  int32_t attr = 0;
  CUstreamAttrValue value{};  // set only
};
void put_stream_attribute(Writer& w, bool with_value, const StreamAttribute& v);
bool read_stream_attribute(Reader& r, bool with_value, StreamAttribute* out);
// cuStreamGetAttribute's reply after the CUresult.
void put_stream_attribute_value(Writer& w, const CUstreamAttrValue& v);
bool read_stream_attribute_value(Reader& r, CUstreamAttrValue* out);

}  // namespace rgpu::proto::wire
