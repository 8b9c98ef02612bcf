// Implementation of server/limits.h.
#include "server/limits.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "common/log.h"

namespace rgpu::server::limits {
namespace {

using proto::table::kGpu;
using proto::table::kHost;

// The driver's own entry points, which the wrappers call.
DriverTable g_real;

// What each live allocation counted: device pointers and VMM handles.
std::mutex& g_mu = *new std::mutex;
std::unordered_map<uint64_t, uint64_t>& g_ptrs = *new std::unordered_map<uint64_t, uint64_t>;
std::unordered_map<uint64_t, uint64_t>& g_handles = *new std::unordered_map<uint64_t, uint64_t>;

bool reserve_gpu(uint64_t bytes, const char* call) {
  std::string why;
  if (proto::table::reserve(kGpu, bytes, settings().gpu, &why)) return true;
  log::warn("%s refused with CUDA_ERROR_OUT_OF_MEMORY: %s", call, why.c_str());
  return false;
}

void counted(std::unordered_map<uint64_t, uint64_t>& map, uint64_t key, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  map[key] += bytes;
}

void uncount(std::unordered_map<uint64_t, uint64_t>& map, uint64_t key) {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = map.find(key);
    if (it == map.end()) return;
    bytes = it->second;
    map.erase(it);
  }
  proto::table::unreserve(kGpu, bytes);
}

// An allocation of `bytes` made by `alloc` (which returns the driver's result and sets *ptr):
// counted first, given back if the driver fails.
template <class Alloc>
CUresult counted_alloc(const char* call, CUdeviceptr* ptr, uint64_t bytes, Alloc alloc) {
  if (!reserve_gpu(bytes, call)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = alloc();
  if (rc != CUDA_SUCCESS || !ptr) {
    proto::table::unreserve(kGpu, bytes);
    return rc;
  }
  counted(g_ptrs, *ptr, bytes);
  return rc;
}

CUresult CUDAAPI w_cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  return counted_alloc("cuMemAlloc", p, n, [&] { return g_real.cuMemAlloc_v2(p, n); });
}
CUresult CUDAAPI w_cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned int flags) {
  return counted_alloc("cuMemAllocManaged", p, n, [&] { return g_real.cuMemAllocManaged(p, n, flags); });
}
CUresult CUDAAPI w_cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream s) {
  return counted_alloc("cuMemAllocAsync", p, n, [&] { return g_real.cuMemAllocAsync(p, n, s); });
}
CUresult CUDAAPI w_cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, CUstream s) {
  return counted_alloc("cuMemAllocAsync", p, n, [&] { return g_real.cuMemAllocAsync_ptsz(p, n, s); });
}
CUresult CUDAAPI w_cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool pool, CUstream s) {
  return counted_alloc("cuMemAllocFromPoolAsync", p, n, [&] { return g_real.cuMemAllocFromPoolAsync(p, n, pool, s); });
}
CUresult CUDAAPI w_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t n, CUmemoryPool pool, CUstream s) {
  return counted_alloc("cuMemAllocFromPoolAsync", p, n,
                       [&] { return g_real.cuMemAllocFromPoolAsync_ptsz(p, n, pool, s); });
}
// The pitch is the driver's choice: the allocation is counted once it is known (width * height
// first, so a request past the limit by itself never reaches the driver).
CUresult CUDAAPI w_cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned int elem) {
  const uint64_t least = static_cast<uint64_t>(width) * height;
  if (height && least / height != width) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!reserve_gpu(least, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
  proto::table::unreserve(kGpu, least);
  const CUresult rc = g_real.cuMemAllocPitch_v2(p, pitch, width, height, elem);
  if (rc != CUDA_SUCCESS || !p || !pitch) return rc;
  const uint64_t bytes = static_cast<uint64_t>(*pitch) * height;
  if (!reserve_gpu(bytes, "cuMemAllocPitch")) {
    g_real.cuMemFree_v2(*p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  counted(g_ptrs, *p, bytes);
  return rc;
}
CUresult CUDAAPI w_cuMemCreate(CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* prop,
                               unsigned long long flags) {
  if (!reserve_gpu(n, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = g_real.cuMemCreate(h, n, prop, flags);
  if (rc != CUDA_SUCCESS || !h) {
    proto::table::unreserve(kGpu, n);
    return rc;
  }
  counted(g_handles, static_cast<uint64_t>(*h), n);
  return rc;
}

CUresult CUDAAPI w_cuMemFree_v2(CUdeviceptr p) {
  const CUresult rc = g_real.cuMemFree_v2(p);
  if (rc == CUDA_SUCCESS) uncount(g_ptrs, p);
  return rc;
}
CUresult CUDAAPI w_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  const CUresult rc = g_real.cuMemFreeAsync(p, s);
  if (rc == CUDA_SUCCESS) uncount(g_ptrs, p);
  return rc;
}
CUresult CUDAAPI w_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  const CUresult rc = g_real.cuMemFreeAsync_ptsz(p, s);
  if (rc == CUDA_SUCCESS) uncount(g_ptrs, p);
  return rc;
}
CUresult CUDAAPI w_cuMemRelease(CUmemGenericAllocationHandle h) {
  const CUresult rc = g_real.cuMemRelease(h);
  if (rc == CUDA_SUCCESS) uncount(g_handles, static_cast<uint64_t>(h));
  return rc;
}

// Free memory as the session may use it: no more than its limits leave (a caching allocator that
// sizes itself by it then stays inside them; and a tenant's session does not see how much of the
// GPU the other tenants use while a limit binds).
CUresult CUDAAPI w_cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  const CUresult rc = g_real.cuMemGetInfo_v2(free_bytes, total);
  if (rc == CUDA_SUCCESS && free_bytes)
    *free_bytes = static_cast<size_t>(std::min<uint64_t>(*free_bytes, proto::table::headroom(kGpu, settings().gpu)));
  return rc;
}

}  // namespace

Settings& settings() {
  static Settings s;
  return s;
}

uint64_t machine_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

void install(DriverTable* t) {
  g_real = *t;
  // Only what the driver has is wrapped; the rest stays null (the handlers answer NOT_SUPPORTED).
#define RGPU_WRAP(name) \
  if (t->name) t->name = w_##name
  RGPU_WRAP(cuMemAlloc_v2);
  RGPU_WRAP(cuMemAllocManaged);
  RGPU_WRAP(cuMemAllocAsync);
  RGPU_WRAP(cuMemAllocAsync_ptsz);
  RGPU_WRAP(cuMemAllocFromPoolAsync);
  RGPU_WRAP(cuMemAllocFromPoolAsync_ptsz);
  RGPU_WRAP(cuMemAllocPitch_v2);
  RGPU_WRAP(cuMemCreate);
  RGPU_WRAP(cuMemFree_v2);
  RGPU_WRAP(cuMemFreeAsync);
  RGPU_WRAP(cuMemFreeAsync_ptsz);
  RGPU_WRAP(cuMemRelease);
  RGPU_WRAP(cuMemGetInfo_v2);
#undef RGPU_WRAP
}

bool reserve_host(uint64_t bytes, const char* what) {
  std::string why;
  if (proto::table::reserve(kHost, bytes, settings().host, &why)) return true;
  log::warn("%s refused with CUDA_ERROR_OUT_OF_MEMORY: %s", what, why.c_str());
  return false;
}

void unreserve_host(uint64_t bytes) { proto::table::unreserve(kHost, bytes); }

}  // namespace rgpu::server::limits
