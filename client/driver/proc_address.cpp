// cuGetProcAddress.
//
// cuGetProcAddress resolves a base name ("cuMemAlloc") to the variant a caller built for a given
// CUDA version would use. This is the interim rule: prefer the per-thread-stream variant
// (_ptsz, then _ptds) when the caller asks for per-thread default stream semantics, then the
// highest _vN, then the bare name. The exact (name, version, flags) table read off the real
// driver replaces it (issue 3).
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "client/call.h"
#include "common/log.h"
#include "gen/client_exports.gen.h"
#include "gen/export.gen.h"

namespace {

void* find_export(const std::string& name) {
  using rgpu::client::kExportCount;
  using rgpu::client::kExports;
  const auto* end = kExports + kExportCount;
  const auto* it = std::lower_bound(kExports, end, name,
                                    [](const rgpu::client::ExportEntry& e, const std::string& n) { return e.name < n; });
  return (it != end && name == it->name) ? it->fn : nullptr;
}

void* resolve(const char* symbol, cuuint64_t flags) {
  std::string base(symbol);
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (const char* version : {"_v4", "_v3", "_v2", ""}) {
    std::string name = base + version;
    if (per_thread) {
      if (void* p = find_export(name + "_ptsz")) return p;
      if (void* p = find_export(name + "_ptds")) return p;
    }
    if (void* p = find_export(name)) return p;
  }
  return nullptr;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  void* p = resolve(symbol, flags);
  if (symbolStatus) *symbolStatus = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (!p) {
    *pfn = nullptr;
    return symbolStatus ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  }
  *pfn = p;
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  void* p = resolve(symbol, flags);
  if (!p) return CUDA_ERROR_NOT_FOUND;  // *pfn left alone, as the real driver's v1 does
  *pfn = p;
  return CUDA_SUCCESS;
}

}  // extern "C"
