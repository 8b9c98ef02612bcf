// Kernel and function attributes, context limits and occupancy, answered from the client after
// the first time (client/cached_answers.h). The PyTorch profile asks cuKernelGetAttribute 144
// times, cuCtxGetLimit 24 and the occupancy calculator 5 times per training step, always the
// same questions; each was a round trip.
//
// What invalidates what:
// - cuKernelSetAttribute, cuKernelSetCacheConfig, cuFuncSetAttribute, cuFuncSetCacheConfig: every
//   attribute and occupancy answer. A kernel and the functions cuKernelGetFunction gives for it
//   share their attributes, and those functions are kept (one per kernel and context), so
//   forgetting only the kernel's own answers left its functions' stale: cuBLAS raises a kernel's
//   dynamic shared memory, reads it back through the function, and failed with
//   CUBLAS_STATUS_INTERNAL_ERROR on the H200.
// - cuCtxSetLimit: the limits of the current context. A context destroyed or a primary context
//   reset: everything.
// CU_LIMIT_STACK_SIZE is never cached: the driver raises it by itself when a kernel needs more.
// A failed answer is not cached. cuKernelSetAttribute is one-way (codegen/annotations.txt): its
// error, if any, comes with the next call that waits, as for launches.
#include <cuda.h>

#include <map>
#include <mutex>
#include <tuple>

#include "client/cached_answers.h"
#include "client/call.h"
#include "client/contexts.h"
#include "client/runtime.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"

namespace {

using rgpu::client::handle_id;

std::mutex& mu() {
  static auto* m = new std::mutex;  // leaked: used from exit handlers
  return *m;
}
// (kernel or function id, attribute, device; -1 for functions) → value
auto& g_attrs = *new std::map<std::tuple<uint64_t, int, int>, int>();
// (context, limit) → value
auto& g_limits = *new std::map<std::pair<CUcontext, int>, size_t>();
// (function id, block size, dynamic shared memory, flags) → blocks per SM
auto& g_occupancy = *new std::map<std::tuple<uint64_t, int, size_t, unsigned>, int>();

void forget_attrs_and_occupancy() {
  std::lock_guard lk(mu());
  g_attrs.clear();
  g_occupancy.clear();
}

template <class Key, class Value, class Ask>
CUresult cached(std::map<Key, Value>& cache, const Key& key, Value* out, Ask ask) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lk(mu());
    if (auto it = cache.find(key); it != cache.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = ask(out);
  if (rc == CUDA_SUCCESS) {
    std::lock_guard lk(mu());
    cache[key] = *out;
  }
  return rc;
}

}  // namespace

namespace rgpu::client {

void forget_cached_answers() {
  {
    std::lock_guard lk(mu());
    g_attrs.clear();
    g_limits.clear();
    g_occupancy.clear();
  }
  forget_kernel_functions();
}

}  // namespace rgpu::client

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  rgpu::client::trace_call("cuKernelGetAttribute");
  if (!kernel) return rgpu_fwd_cuKernelGetAttribute(pi, attrib, kernel, dev);
  return cached(g_attrs, std::make_tuple(handle_id(kernel), static_cast<int>(attrib), static_cast<int>(dev)), pi,
                [&](int* v) { return rgpu_fwd_cuKernelGetAttribute(v, attrib, kernel, dev); });
}

RGPU_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  rgpu::client::trace_call("cuFuncGetAttribute");
  if (!hfunc) return rgpu_fwd_cuFuncGetAttribute(pi, attrib, hfunc);
  return cached(g_attrs, std::make_tuple(handle_id(hfunc), static_cast<int>(attrib), -1), pi,
                [&](int* v) { return rgpu_fwd_cuFuncGetAttribute(v, attrib, hfunc); });
}

RGPU_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  forget_attrs_and_occupancy();
  return rgpu_fwd_cuKernelSetAttribute(attrib, val, kernel, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  forget_attrs_and_occupancy();
  return rgpu_fwd_cuKernelSetCacheConfig(kernel, config, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  forget_attrs_and_occupancy();
  return rgpu_fwd_cuFuncSetAttribute(hfunc, attrib, value);
}

RGPU_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  forget_attrs_and_occupancy();
  return rgpu_fwd_cuFuncSetCacheConfig(hfunc, config);
}

RGPU_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  rgpu::client::trace_call("cuCtxGetLimit");
  CUcontext ctx = rgpu::client::contexts::current();
  if (limit == CU_LIMIT_STACK_SIZE || !ctx) return rgpu_fwd_cuCtxGetLimit(pvalue, limit);
  return cached(g_limits, std::make_pair(ctx, static_cast<int>(limit)), pvalue,
                [&](size_t* v) { return rgpu_fwd_cuCtxGetLimit(v, limit); });
}

RGPU_EXPORT CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  {
    CUcontext ctx = rgpu::client::contexts::current();
    std::lock_guard lk(mu());
    for (auto it = g_limits.begin(); it != g_limits.end();) it = it->first.first == ctx ? g_limits.erase(it) : ++it;
  }
  return rgpu_fwd_cuCtxSetLimit(limit, value);
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                                 int blockSize, size_t dynamicSMemSize,
                                                                                 unsigned int flags) {
  rgpu::client::trace_call("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  if (!func) return rgpu_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                                  dynamicSMemSize, flags);
  return cached(g_occupancy, std::make_tuple(handle_id(func), blockSize, dynamicSMemSize, flags), numBlocks,
                [&](int* v) {
                  return rgpu_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(v, func, blockSize,
                                                                                       dynamicSMemSize, flags);
                });
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                        size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

}  // extern "C"
