// Entry points the real driver exports that cuda.h does not declare: graphics interop
// (cudaGL.h, cudaEGL.h, cudaVDPAU.h) and the profiler control (cudaProfiler.h). Programs and
// libraries resolve them by name (matrixMulDynlinkJIT refuses to start without cuProfilerStop),
// so they must exist. Graphics interop needs the GPU host's display stack: refused, naming
// itself. Profiler start/stop only mark a range for a profiler attached to the process; there is
// none in this process, so they succeed and do nothing, as on a driver with no profiler.
#include <cuda.h>

#include <string_view>
#include <utility>

#include "client/call.h"
#include "gen/export.gen.h"

#define RGPU_REFUSED(name) \
  RGPU_EXPORT CUresult CUDAAPI name() { return rgpu::client::unsupported(#name " (graphics interop)"); }

extern "C" {

RGPU_REFUSED(cuEGLApiInit)
RGPU_REFUSED(cuEGLStreamConsumerAcquireFrame)
RGPU_REFUSED(cuEGLStreamConsumerConnect)
RGPU_REFUSED(cuEGLStreamConsumerConnectWithFlags)
RGPU_REFUSED(cuEGLStreamConsumerDisconnect)
RGPU_REFUSED(cuEGLStreamConsumerReleaseFrame)
RGPU_REFUSED(cuEGLStreamProducerConnect)
RGPU_REFUSED(cuEGLStreamProducerDisconnect)
RGPU_REFUSED(cuEGLStreamProducerPresentFrame)
RGPU_REFUSED(cuEGLStreamProducerReturnFrame)
RGPU_REFUSED(cuGLCtxCreate)
RGPU_REFUSED(cuGLCtxCreate_v2)
RGPU_REFUSED(cuGLGetDevices)
RGPU_REFUSED(cuGLGetDevices_v2)
RGPU_REFUSED(cuGLInit)
RGPU_REFUSED(cuGLMapBufferObject)
RGPU_REFUSED(cuGLMapBufferObjectAsync)
RGPU_REFUSED(cuGLMapBufferObjectAsync_v2)
RGPU_REFUSED(cuGLMapBufferObjectAsync_v2_ptsz)
RGPU_REFUSED(cuGLMapBufferObject_v2)
RGPU_REFUSED(cuGLMapBufferObject_v2_ptds)
RGPU_REFUSED(cuGLRegisterBufferObject)
RGPU_REFUSED(cuGLSetBufferObjectMapFlags)
RGPU_REFUSED(cuGLUnmapBufferObject)
RGPU_REFUSED(cuGLUnmapBufferObjectAsync)
RGPU_REFUSED(cuGLUnregisterBufferObject)
RGPU_REFUSED(cuGraphicsEGLRegisterImage)
RGPU_REFUSED(cuGraphicsGLRegisterBuffer)
RGPU_REFUSED(cuGraphicsGLRegisterImage)
RGPU_REFUSED(cuGraphicsResourceGetMappedEglFrame)
RGPU_REFUSED(cuGraphicsVDPAURegisterOutputSurface)
RGPU_REFUSED(cuGraphicsVDPAURegisterVideoSurface)
RGPU_REFUSED(cuVDPAUCtxCreate)
RGPU_REFUSED(cuVDPAUCtxCreate_v2)
RGPU_REFUSED(cuVDPAUGetDevice)

RGPU_EXPORT CUresult CUDAAPI cuProfilerInitialize(const char*, const char*, int) {
  rgpu::client::trace_call("cuProfilerInitialize");
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuProfilerStart(void) {
  rgpu::client::trace_call("cuProfilerStart");
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuProfilerStop(void) {
  rgpu::client::trace_call("cuProfilerStop");
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace rgpu::client {

// These entry points are not in cuda.h, so gen/proc_address.gen.cpp cannot name them; cudart
// resolves cuProfilerStart/Stop through cuGetProcAddress all the same (cudaProfilerStart).
void* interop_export(std::string_view name) {
  static const std::pair<std::string_view, void*> kNames[] = {
      {"cuProfilerInitialize", reinterpret_cast<void*>(&cuProfilerInitialize)},
      {"cuProfilerStart", reinterpret_cast<void*>(&cuProfilerStart)},
      {"cuProfilerStop", reinterpret_cast<void*>(&cuProfilerStop)},
  };
  for (const auto& [n, fn] : kNames)
    if (n == name) return fn;
  return nullptr;
}

}  // namespace rgpu::client
