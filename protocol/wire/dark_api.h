// Export-table slots answered by the server's driver on the wire (kOpToolsContextObject,
// kOpModuleFunctions, kOpClusterTopology) and kOpExportTableInfo. Used by
// client/dark_api/tools_context.cpp, client/dark_api/tools_module.cpp,
// client/dark_api/cluster_topology.cpp and client/driver/export_table.cpp, and by
// server/handlers/dark_api.cpp. protocol/messages.h says what each op does; contexts, streams
// and modules are client handles.
//
// Layout:
//  kOpToolsContextObject: u64 context (0: the calling thread's current one), u64 stream (absent
//    in clients older than it: then 0). Reply: CUresult of slot 51; when that succeeded, i32
//    CUresult of slot 39 and u64 value (the 8 bytes slot 39 writes).
//  kOpModuleFunctions: u64 context (0: current), u64 module. Reply: CUresult; on success u32 n,
//    n × str name (at most kMaxSymbolName bytes each), in the driver's order.
//  kOpClusterTopology: u64 context (0: current). Reply: CUresult of slot 4; on success u32 n (at
//    most kMaxClusterTopology, protocol/messages.h), then n bytes.
//  kOpExportTableInfo: 16 bytes UUID. Reply: CUresult of the server driver's cuGetExportTable;
//    on success u64 the table's first word.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto::wire {

struct ToolsContextAsk {
  uint64_t context = 0, stream = 0;
};
void put_tools_context_ask(Writer& w, const ToolsContextAsk& v);
bool read_tools_context_ask(Reader& r, ToolsContextAsk* out);
// The reply after slot 51's CUresult, when it succeeded.
struct ToolsContextValue {
  int32_t query_result = 0;
  uint64_t value = 0;
};
void put_tools_context_value(Writer& w, const ToolsContextValue& v);
bool read_tools_context_value(Reader& r, ToolsContextValue* out);

struct ModuleFunctionsAsk {
  uint64_t context = 0, module = 0;
};
void put_module_functions_ask(Writer& w, const ModuleFunctionsAsk& v);
bool read_module_functions_ask(Reader& r, ModuleFunctionsAsk* out);
// The reply after the CUresult.
void put_function_names(Writer& w, const std::vector<std::string>& names);
bool read_function_names(Reader& r, std::vector<std::string>* names);

// kOpClusterTopology's request: the context.
void put_context_ask(Writer& w, uint64_t context);
bool read_context_ask(Reader& r, uint64_t* context);
// The reply after the CUresult.
void put_cluster_topology(Writer& w, const void* data, uint32_t n);
bool read_cluster_topology(Reader& r, std::vector<uint8_t>* out);

void put_export_table_ask(Writer& w, const CUuuid& id);
bool read_export_table_ask(Reader& r, CUuuid* id);
// The reply after the CUresult, on success.
void put_export_table_word(Writer& w, uint64_t first);
bool read_export_table_word(Reader& r, uint64_t* first);

}  // namespace rgpu::proto::wire
