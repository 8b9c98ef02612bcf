// cuGetExportTable: the driver's private tables (docs/reference/dark-api.md), served locally by
// client/dark_api/ because they are function pointers into this process. An unknown UUID is
// logged (once per UUID, with what the server's driver knows of it) and refused: never answered
// with a guessed table.
#include <cuda.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "client/call.h"
#include "client/dark_api/dark_api.h"
#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/dark_api.h"
#include "gen/export.gen.h"

namespace {

// What the server's driver says about a table rgpu does not know: whether it has it, and its
// first word (the size in bytes of tables that start with one), so the log names what is missing.
std::string server_view(const CUuuid& id) {
  rgpu::client::Call c(rgpu::proto::kOpExportTableInfo, rgpu::client::kWaits);
  rgpu::proto::wire::put_export_table_ask(c.args(), id);
  CUresult rc = c.invoke();
  if (rc == CUDA_ERROR_NOT_INITIALIZED || rc == CUDA_ERROR_DEVICE_UNAVAILABLE) return "";
  if (rc != CUDA_SUCCESS) return rgpu::log::format("; the server's driver does not have it either (error %d)", rc);
  uint64_t first = 0;
  if (!rgpu::proto::wire::read_export_table_word(c.reply(), &first)) return "";
  return rgpu::log::format("; the server's driver has it (first word %llu: its size in bytes if it starts with one, "
                    "%llu slots)",
                    static_cast<unsigned long long>(first), static_cast<unsigned long long>(first / 8));
}

void report_unknown(const CUuuid& id) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();
  std::string hex = rgpu::client::dark::uuid_hex(id);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen->insert(hex).second) return;
  }
  rgpu::client::trace_call(("cuGetExportTable: unknown table " + hex).c_str());
  rgpu::log::warn("cuGetExportTable: export table %s is unknown to rgpu%s; returning CUDA_ERROR_NOT_SUPPORTED",
                  hex.c_str(), server_view(id).c_str());
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
