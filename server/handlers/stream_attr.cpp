// Stream attributes (wire layout in client/driver/stream_attr.cpp). The attribute id is read as
// an integer and checked against the ids valid for streams before it becomes the enum; none of
// their values holds a host pointer or a handle (the access policy window's base_ptr is a device
// address the driver checks).
#include <cuda.h>

#include <cstdint>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

bool stream_attribute(int32_t attr) {
  return attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
         attr == CU_LAUNCH_ATTRIBUTE_PRIORITY || attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP ||
         attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN || attr == CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING;
}

using GetFn = CUresult (*)(CUstream, CUstreamAttrID, CUstreamAttrValue*);
using SetFn = CUresult (*)(CUstream, CUstreamAttrID, const CUstreamAttrValue*);

void get_attribute(Dispatch& d, GetFn fn) {
  uint64_t sid = d.args.u64();
  int32_t attr = d.args.i32();
  if (!d.args.ok()) return;
  if (!stream_attribute(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  if (!d.handles.get(sid, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUstreamAttrValue v{};
  CUresult rc = fn(s, static_cast<CUstreamAttrID>(attr), &v);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) d.reply.put(v);
}

void set_attribute(Dispatch& d, SetFn fn) {
  uint64_t sid = d.args.u64();
  int32_t attr = d.args.i32();
  CUstreamAttrValue v = d.args.get<CUstreamAttrValue>();
  if (!d.args.ok()) return;
  if (!stream_attribute(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  if (!d.handles.get(sid, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  d.reply.put<int32_t>(fn(s, static_cast<CUstreamAttrID>(attr), &v));
}

}  // namespace

void cuStreamGetAttribute(Dispatch& d) { get_attribute(d, d.drv.cuStreamGetAttribute); }
void cuStreamGetAttribute_ptsz(Dispatch& d) { get_attribute(d, d.drv.cuStreamGetAttribute_ptsz); }
void cuStreamSetAttribute(Dispatch& d) { set_attribute(d, d.drv.cuStreamSetAttribute); }
void cuStreamSetAttribute_ptsz(Dispatch& d) { set_attribute(d, d.drv.cuStreamSetAttribute_ptsz); }

}  // namespace rgpu::server::handlers
