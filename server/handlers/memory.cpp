// Host↔device copies (wire layouts in client/driver/memory.cpp). One handler body per
// direction, parameterised by the driver entry point the op names.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "protocol/messages.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

using SyncHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using AsyncHtoD = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
using SyncDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using AsyncDtoH = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);

void not_supported(Dispatch& d) { d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED); }

void htod(Dispatch& d, SyncHtoD fn) {
  CUdeviceptr dst = d.args.u64();
  size_t n = 0;
  const uint8_t* data = d.args.bytes(&n);
  if (!d.args.ok()) return;
  if (!fn) return not_supported(d);
  d.reply.put<int32_t>(fn(dst, data, n));
}

void free_buffer(void* p) { delete static_cast<std::vector<uint8_t>*>(p); }

void htod_async(Dispatch& d, AsyncHtoD fn) {
  CUdeviceptr dst = d.args.u64();
  uint64_t stream_id = d.args.u64();
  size_t n = 0;
  const uint8_t* data = d.args.bytes(&n);
  if (!d.args.ok()) return;
  CUstream stream;
  if (!d.handles.get(stream_id, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
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
void dtoh(Dispatch& d, SyncDtoH sync_fn, AsyncDtoH async_fn, bool async) {
  CUdeviceptr src = d.args.u64();
  uint64_t stream_id = async ? d.args.u64() : 0;
  uint64_t n = d.args.u64();
  if (!d.args.ok()) return;
  if (n > proto::kMaxPayload - 64) {
    d.args.fail();  // a client of ours never asks for more than one frame
    return;
  }
  CUstream stream = nullptr;
  if (!d.handles.get(stream_id, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (async ? !async_fn : !sync_fn) return not_supported(d);
  auto& body = d.reply.buf();
  size_t at = body.size();
  body.resize(at + sizeof(int32_t) + n);
  uint8_t* dst = body.data() + at + sizeof(int32_t);
  CUresult rc;
  if (async) {
    rc = async_fn(dst, src, n, stream);
    if (rc == CUDA_SUCCESS && d.drv.cuStreamSynchronize) rc = d.drv.cuStreamSynchronize(stream);
  } else {
    rc = sync_fn(dst, src, n);
  }
  std::memcpy(body.data() + at, &rc, sizeof rc);
  if (rc != CUDA_SUCCESS) body.resize(at + sizeof(int32_t));
}

}  // namespace

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
