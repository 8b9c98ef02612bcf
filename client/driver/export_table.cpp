// cuGetExportTable: the driver's private tables (shared/reference/dark-api.md), served locally by
// client/dark_api/ because they are function pointers into this process. An unknown UUID is
// logged (once per UUID) and refused: never answered with a guessed table.
#include <cuda.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "client/call.h"
#include "client/dark_api/dark_api.h"
#include "common/log.h"
#include "gen/export.gen.h"

namespace {

void report_unknown(const CUuuid& id) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();
  std::string hex = rgpu::client::dark::uuid_hex(id);
  std::lock_guard<std::mutex> lock(mu);
  if (seen->insert(hex).second)
    rgpu::log::warn("cuGetExportTable: export table %s is unknown to rgpu; returning CUDA_ERROR_NOT_SUPPORTED",
                    hex.c_str());
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  rgpu::client::trace_call("cuGetExportTable");
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  if (const auto* t = rgpu::client::dark::find(*pExportTableId)) {
    *ppExportTable = t->table();
    return CUDA_SUCCESS;
  }
  report_unknown(*pExportTableId);
  *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
