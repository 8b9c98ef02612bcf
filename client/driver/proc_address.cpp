// cuGetProcAddress: resolves a base name ("cuMemAlloc") to the variant a caller built for a given
// CUDA version and stream mode would get from the real driver ("cuMemAlloc_v2",
// "cuMemcpyHtoD_v2_ptds" ...). The answers come from gen/proc_address.gen.cpp, read off the real
// driver by codegen/probe/ (issue 3); every variant it names is also an exported symbol here.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "client/call.h"
#include "gen/client_exports.gen.h"
#include "gen/export.gen.h"
#include "gen/proc_address.gen.h"

namespace rgpu::client {
void* interop_export(std::string_view name);  // client/driver/interop.cpp
}

namespace {

using rgpu::client::kProcAddress;
using rgpu::client::kProcAddressCount;

// An exported entry point by its exact name, for callers that ask for a full variant name.
void* find_export(std::string_view name) {
  using rgpu::client::kExportCount;
  using rgpu::client::kExports;
  const auto* end = kExports + kExportCount;
  const auto* it = std::lower_bound(kExports, end, name, [](const rgpu::client::ExportEntry& e, std::string_view n) {
    return std::string_view(e.name) < n;
  });
  return (it != end && name == it->name) ? it->fn : nullptr;
}

// Returns the entry point, or nullptr with *status saying why.
void* resolve(const char* symbol, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  std::string_view name(symbol);
  int mode = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 2
             : (flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM)          ? 1
                                                                     : 0;
  const auto* end = kProcAddress + kProcAddressCount;
  auto key = [](const rgpu::client::ProcAddressEntry& e) { return std::make_pair(std::string_view(e.name), e.flags); };
  const auto* lo = std::lower_bound(kProcAddress, end, std::make_pair(name, mode),
                                    [&](const auto& e, const auto& k) { return key(e) < k; });
  const auto* hi = std::upper_bound(lo, end, std::make_pair(name, mode),
                                    [&](const auto& k, const auto& e) { return k < key(e); });
  if (lo == hi || std::all_of(lo, hi, [](const auto& e) { return e.fn == nullptr; })) {
    // Not a cuda.h name the table knows: an exact exported name, or an interop/profiler entry.
    void* fn = find_export(name);
    if (!fn) fn = rgpu::client::interop_export(name);
    *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return fn;
  }
  void* fn = nullptr;
  for (const auto* e = lo; e != hi && e->min_version <= version; ++e) fn = e->fn;
  if (fn) {
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return fn;
  }
  bool later = std::any_of(lo, hi, [](const auto& e) { return e.fn != nullptr; });
  *status = later ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return nullptr;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  CUdriverProcAddressQueryResult status;
  void* p = resolve(symbol, cudaVersion, flags, &status);
  if (symbolStatus) *symbolStatus = status;
  *pfn = p;
  if (p) return CUDA_SUCCESS;
  return symbolStatus ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

RGPU_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  CUdriverProcAddressQueryResult status;
  void* p = resolve(symbol, cudaVersion, flags, &status);
  if (!p) return CUDA_ERROR_NOT_FOUND;  // *pfn left alone, as the real driver's v1 does
  *pfn = p;
  return CUDA_SUCCESS;
}

}  // extern "C"
