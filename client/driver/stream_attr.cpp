// Stream attributes: CUstreamAttrValue is CUlaunchAttributeValue, a union read by attribute id.
// The attributes valid for streams (access policy window, synchronization policy, priority,
// memory sync domain and its map, NVLink-centric scheduling) hold scalars and, in the access
// policy window, a device address, so the union travels as bytes. Every other id (launch-only
// ones, whose events would need translating, and unknown ones) is refused with
// CUDA_ERROR_INVALID_VALUE, as the driver refuses attributes that are not valid for streams.
//
// Wire (cuStreamGetAttribute[_ptsz]): u64 stream, i32 attr. Reply: CUresult, CUstreamAttrValue.
// cuStreamSetAttribute[_ptsz]: u64 stream, i32 attr, CUstreamAttrValue. Reply: CUresult.
#include <cuda.h>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

bool stream_attribute(int attr) {
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
      return true;
    default:
      return false;
  }
}

CUresult get_attribute(uint16_t op, const char* name, CUstream s, CUstreamAttrID attr, CUstreamAttrValue* out) {
  rgpu::client::trace_call(name);
  if (!out || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  c.args().put_u64(handle_id(s));
  c.args().put<int32_t>(attr);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  CUstreamAttrValue v = c.reply().get<CUstreamAttrValue>();
  if (!c.reply().ok()) return CUDA_ERROR_UNKNOWN;
  *out = v;
  return CUDA_SUCCESS;
}

CUresult set_attribute(uint16_t op, const char* name, CUstream s, CUstreamAttrID attr, const CUstreamAttrValue* in) {
  rgpu::client::trace_call(name);
  if (!in || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  Call c(op, rgpu::client::kWaits);
  c.args().put_u64(handle_id(s));
  c.args().put<int32_t>(attr);
  c.args().put(*in);
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
