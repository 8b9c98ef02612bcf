// Streams on the wire (layout in stream.h).
#include "protocol/wire/stream.h"

namespace rgpu::proto::wire {

void put_host_callback(Writer& w, bool with_flags, const HostCallback& v) {
  w.put_u64(v.stream);
  w.put_u64(v.id);
  if (with_flags) w.put_u32(v.flags);
}

bool read_host_callback(Reader& r, bool with_flags, HostCallback* out) {
  out->stream = r.u64();
  out->id = r.u64();
  out->flags = with_flags ? r.u32() : 0;
  return r.ok();
}

bool stream_attribute(int32_t attr) {
  return attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
         attr == CU_LAUNCH_ATTRIBUTE_PRIORITY || attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP ||
         attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN || attr == CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING;
}

void put_stream_attribute(Writer& w, bool with_value, const StreamAttribute& v) {
  w.put_u64(v.stream);
  w.put<int32_t>(v.attr);
  if (with_value) w.put(v.value);
}

bool read_stream_attribute(Reader& r, bool with_value, StreamAttribute* out) {
  out->stream = r.u64();
  out->attr = r.i32();
  out->value = with_value ? r.get<CUstreamAttrValue>() : CUstreamAttrValue{};
  return r.ok();
}

void put_stream_attribute_value(Writer& w, const CUstreamAttrValue& v) { w.put(v); }

bool read_stream_attribute_value(Reader& r, CUstreamAttrValue* out) {
  *out = r.get<CUstreamAttrValue>();
  return r.ok();
}

}  // namespace rgpu::proto::wire
