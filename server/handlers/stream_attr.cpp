// Stream attributes (wire layout in protocol/wire/stream.h). The attribute id is read as an
// integer and checked against the ids valid for streams before it becomes the enum; none of
// their values holds a host pointer or a handle (the access policy window's base_ptr is a device
// address the driver checks).
#include <cuda.h>

#include <cstdint>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/stream.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using proto::wire::stream_attribute;

using GetFn = CUresult (*)(CUstream, CUstreamAttrID, CUstreamAttrValue*);
using SetFn = CUresult (*)(CUstream, CUstreamAttrID, const CUstreamAttrValue*);

void get_attribute(Dispatch& d, GetFn fn) {
  proto::wire::StreamAttribute req;
  if (!proto::wire::read_stream_attribute(d.args, false, &req)) return;
  const int32_t attr = req.attr;
  if (!stream_attribute(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  if (!d.handles.get(req.stream, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUstreamAttrValue v{};
  CUresult rc = fn(s, static_cast<CUstreamAttrID>(attr), &v);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_stream_attribute_value(d.reply, v);
}

void set_attribute(Dispatch& d, SetFn fn) {
  proto::wire::StreamAttribute req;
  if (!proto::wire::read_stream_attribute(d.args, true, &req)) return;
  const int32_t attr = req.attr;
  CUstreamAttrValue v = req.value;
  if (!stream_attribute(attr)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  if (!d.handles.get(req.stream, &s)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  d.reply.put<int32_t>(fn(s, static_cast<CUstreamAttrID>(attr), &v));
}

}  // namespace

void cuStreamGetAttribute(Dispatch& d) { get_attribute(d, d.drv.cuStreamGetAttribute); }
void cuStreamGetAttribute_ptsz(Dispatch& d) { get_attribute(d, d.drv.cuStreamGetAttribute_ptsz); }
void cuStreamSetAttribute(Dispatch& d) { set_attribute(d, d.drv.cuStreamSetAttribute); }
void cuStreamSetAttribute_ptsz(Dispatch& d) { set_attribute(d, d.drv.cuStreamSetAttribute_ptsz); }

}  // namespace rgpu::server::handlers
