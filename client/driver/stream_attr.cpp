// Stream attributes: CUstreamAttrValue is CUlaunchAttributeValue, a union read by attribute id.
// The attributes valid for streams (access policy window, synchronization policy, priority,
// memory sync domain and its map, NVLink-centric scheduling) hold scalars and, in the access
// policy window, a device address, so the union travels as bytes. Every other id (launch-only
// ones, whose events would need translating, and unknown ones) is refused with
// CUDA_ERROR_INVALID_VALUE, as the driver refuses attributes that are not valid for streams.
//
// Wire layout and the ids valid for streams: protocol/wire/stream.h.
#include <cuda.h>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/stream.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

using rgpu::proto::wire::stream_attribute;

CUresult get_attribute(uint16_t op, const char* name, CUstream s, CUstreamAttrID attr, CUstreamAttrValue* out) {
  rgpu::client::trace_call(name);
  if (!out || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::put_stream_attribute(c.args(), false, {handle_id(s), attr, {}});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUstreamAttrValue v;
  if (!rgpu::proto::wire::read_stream_attribute_value(c.reply(), &v)) return CUDA_ERROR_UNKNOWN;
  *out = v;
  return CUDA_SUCCESS;
}

CUresult set_attribute(uint16_t op, const char* name, CUstream s, CUstreamAttrID attr, const CUstreamAttrValue* in) {
  rgpu::client::trace_call(name);
  if (!in || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::put_stream_attribute(c.args(), true, {handle_id(s), attr, *in});
  return c.invoke();
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return get_attribute(rgpu::op::cuStreamGetAttribute, "cuStreamGetAttribute", hStream, attr, value);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                       CUstreamAttrValue* value_out) {
  return get_attribute(rgpu::op::cuStreamGetAttribute_ptsz, "cuStreamGetAttribute_ptsz", hStream, attr, value_out);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr,
                                                  const CUstreamAttrValue* param) {
  return set_attribute(rgpu::op::cuStreamSetAttribute, "cuStreamSetAttribute", hStream, attr, param);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                       const CUstreamAttrValue* value) {
  return set_attribute(rgpu::op::cuStreamSetAttribute_ptsz, "cuStreamSetAttribute_ptsz", hStream, attr, value);
}

}  // extern "C"
