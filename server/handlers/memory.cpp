// Host↔device copies (wire layouts in protocol/wire/copy.h). One handler body per
// direction, parameterised by the driver entry point the op names.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "protocol/messages.h"
#include "protocol/pointer_attributes.h"
#include "protocol/wire/copy.h"
#include "protocol/wire/memory.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using SyncHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using AsyncHtoD = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
using SyncDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using AsyncDtoH = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);

void not_supported(Dispatch& d) { d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED); }

void htod(Dispatch& d, SyncHtoD fn) {
  proto::wire::HtoD c;
  if (!proto::wire::read_htod(d.args, false, &c)) return;
  if (!fn) return not_supported(d);
  d.reply.put<int32_t>(fn(c.dst, c.data, c.n));
}

void free_buffer(void* p) { delete static_cast<std::vector<uint8_t>*>(p); }

void htod_async(Dispatch& d, AsyncHtoD fn) {
  proto::wire::HtoD c;
  if (!proto::wire::read_htod(d.args, true, &c)) return;
  const CUdeviceptr dst = c.dst;
  const uint8_t* data = c.data;
  const size_t n = c.n;
  CUstream stream;
  if (!d.handles.get(c.stream, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return not_supported(d);
  // The source must outlive the copy: keep it until the stream passes this point.
  auto* keep = new std::vector<uint8_t>(data, data + n);
  CUresult rc = fn(dst, keep->data(), n, stream);
  if (rc != CUDA_SUCCESS) {
    delete keep;
  } else if (!d.drv.cuLaunchHostFunc || d.drv.cuLaunchHostFunc(stream, free_buffer, keep) != CUDA_SUCCESS) {
    if (d.drv.cuStreamSynchronize) d.drv.cuStreamSynchronize(stream);
    delete keep;
  }
  d.reply.put<int32_t>(rc);
}

// The reply is the CUresult followed by the bytes, read by the driver straight into the reply.
// Async copies carry a delivery id and are one-way: the bytes go out as a kOpAsyncData frame once
// the copy has run, and the reply (if one is wanted) has no data.
void dtoh(Dispatch& d, SyncDtoH sync_fn, AsyncDtoH async_fn, bool async) {
  proto::wire::DtoH c;
  if (!proto::wire::read_dtoh(d.args, async, &c)) return;
  const CUdeviceptr src = c.src;
  const uint64_t n = c.n;
  CUstream stream = nullptr;
  if (!d.handles.get(c.stream, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (async ? !async_fn : !sync_fn) return not_supported(d);
  // The data goes to d.bulk when the session offers it (no copy, no zeroing), else into the reply.
  Bytes scratch;
  Bytes& out = d.bulk ? *d.bulk : scratch;
  out.resize(n);
  CUresult rc;
  if (async) {
    rc = async_fn(out.data(), src, n, stream);
    if (rc == CUDA_SUCCESS && d.drv.cuStreamSynchronize) rc = d.drv.cuStreamSynchronize(stream);
  } else {
    rc = sync_fn(out.data(), src, n);
  }
  if (async) {
    // The data (or the failure) goes to the buffer the client registered under the id.
    uint8_t head[proto::wire::kAsyncDataHead];
    proto::wire::put_async_data_head(head, c.delivery, rc);
    if (d.callbacks) d.callbacks->send_frame(proto::kOpAsyncData, head, sizeof head, out.data(), rc ? 0 : out.size());
    out.clear();
    return d.reply.put<int32_t>(rc);
  }
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) {
    out.clear();
  } else if (!d.bulk) {
    d.reply.append(out.data(), out.size());
  }
}

// Pointer attributes (wire layout in protocol/wire/memory.h). `each`: one driver call per
// attribute (cuPointerGetAttribute); otherwise one cuPointerGetAttributes for all.
void pointer_attributes(Dispatch& d, bool each) {
  proto::wire::PointerAttributes req;
  if (!proto::wire::read_pointer_attributes(d.args, each, &req)) return;
  const uint64_t ptr = req.pointer;
  const uint32_t n = static_cast<uint32_t>(req.attrs.size());
  // Checked as integers first: only known attributes become the enum.
  const std::vector<int32_t>& raw = req.attrs;
  for (int32_t a : raw)
    if (proto::pointer_attribute_size(a) == 0) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  std::vector<CUpointer_attribute> attrs(n);
  for (uint32_t i = 0; i < n; ++i) attrs[i] = static_cast<CUpointer_attribute>(raw[i]);
  if (each ? !d.drv.cuPointerGetAttribute : !d.drv.cuPointerGetAttributes) return not_supported(d);
  std::vector<std::array<uint8_t, 16>> values(n);
  std::vector<CUresult> results(n, CUDA_SUCCESS);
  if (each) {
    results[0] = d.drv.cuPointerGetAttribute(values[0].data(), attrs[0], ptr);
  } else {
    std::vector<void*> data(n);
    for (uint32_t i = 0; i < n; ++i) data[i] = values[i].data();
    CUresult rc = d.drv.cuPointerGetAttributes(n, attrs.data(), data.data(), ptr);
    if (rc != CUDA_SUCCESS) return d.reply.put<int32_t>(rc);
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t size = proto::pointer_attribute_size(attrs[i]);
    if (results[i] == CUDA_SUCCESS &&
        (attrs[i] == proto::kPointerAttributeContext || attrs[i] == proto::kPointerAttributeMempool)) {
      void* real;
      std::memcpy(&real, values[i].data(), sizeof real);
      uint64_t id = real ? d.handles.id_for(real) : 0;
      std::memcpy(values[i].data(), &id, sizeof id);
    }
    proto::wire::put_pointer_attribute_value(d.reply, results[i], values[i].data(), size);
  }
}

}  // namespace

void cuPointerGetAttribute(Dispatch& d) { pointer_attributes(d, true); }
void cuPointerGetAttributes(Dispatch& d) { pointer_attributes(d, false); }

void cuMemcpyHtoD_v2(Dispatch& d) { htod(d, d.drv.cuMemcpyHtoD_v2); }
void cuMemcpyHtoD_v2_ptds(Dispatch& d) { htod(d, d.drv.cuMemcpyHtoD_v2_ptds); }
void cuMemcpyHtoD(Dispatch& d) { htod(d, d.drv.cuMemcpyHtoD_v2); }
void cuMemcpyHtoDAsync_v2(Dispatch& d) { htod_async(d, d.drv.cuMemcpyHtoDAsync_v2); }
void cuMemcpyHtoDAsync_v2_ptsz(Dispatch& d) { htod_async(d, d.drv.cuMemcpyHtoDAsync_v2_ptsz); }
void cuMemcpyHtoDAsync(Dispatch& d) { htod_async(d, d.drv.cuMemcpyHtoDAsync_v2); }
void cuMemcpyDtoH_v2(Dispatch& d) { dtoh(d, d.drv.cuMemcpyDtoH_v2, nullptr, false); }
void cuMemcpyDtoH_v2_ptds(Dispatch& d) { dtoh(d, d.drv.cuMemcpyDtoH_v2_ptds, nullptr, false); }
void cuMemcpyDtoH(Dispatch& d) { dtoh(d, d.drv.cuMemcpyDtoH_v2, nullptr, false); }
void cuMemcpyDtoHAsync_v2(Dispatch& d) { dtoh(d, nullptr, d.drv.cuMemcpyDtoHAsync_v2, true); }
void cuMemcpyDtoHAsync_v2_ptsz(Dispatch& d) { dtoh(d, nullptr, d.drv.cuMemcpyDtoHAsync_v2_ptsz, true); }
void cuMemcpyDtoHAsync(Dispatch& d) { dtoh(d, nullptr, d.drv.cuMemcpyDtoHAsync_v2, true); }

}  // namespace rgpu::server::handlers
