// cuGetExportTable: the driver's private tables (shared/reference/dark-api.md). Not served yet:
// every request is logged by UUID and refused, never answered with a guess.
#include <cuda.h>

#include <cstdio>

#include "client/call.h"
#include "common/log.h"
#include "gen/export.gen.h"

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  char hex[33];
  for (int i = 0; i < 16; ++i)
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(pExportTableId->bytes[i]));
  rgpu::client::trace_call("cuGetExportTable");
  rgpu::log::warn("cuGetExportTable: table %s is not provided by rgpu yet (CUDA_ERROR_NOT_SUPPORTED)", hex);
  *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
