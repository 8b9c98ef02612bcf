// Export-table slots the client cannot answer itself (protocol/messages.h kOpToolsContextObject,
// kOpModuleFunctions, kOpClusterTopology; their layout in protocol/wire/dark_api.h): run here on the
// driver's own tables, with the session's contexts and modules. What the driver hands back (its objects, its function pointers) stays in this process;
// the client gets values and names. Signatures: client/dark_api/README.md.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/dark_api.h"
#include "server/handlers/control.h"

namespace rgpu::server::handlers {
namespace {

constexpr CUuuid kToolsContext = {{0x21, 0x31, char(0x8c), 0x60, char(0x97), 0x14, 0x32, 0x48, char(0x8c),
                                   char(0xa6), 0x41, char(0xff), 0x73, 0x24, char(0xc8), char(0xf2)}};
constexpr CUuuid kToolsModule = {{0x6e, 0x16, 0x3f, char(0xbe), char(0xb9), 0x58, 0x44, 0x4d, char(0x83), 0x5c,
                                  char(0xe1), char(0x82), char(0xaf), char(0xf1), char(0x99), 0x1e}};
constexpr CUuuid kCublasLt1734 = {{0x17, 0x34, char(0xdc), 0x26, char(0x80), 0x0d, 0x47, 0x45, char(0x87), 0x26,
                                   char(0xc0), char(0xf1), char(0xe7), char(0xdd), char(0x8b), char(0xca)}};
constexpr unsigned kToolsContextObjectSlot = 51, kToolsContextQuerySlot = 39, kToolsModuleWalkSlot = 7;
constexpr unsigned kClusterTopologySlot = 4, kClusterTopologyFreeSlot = 13;

using ContextObjectFn = CUresult (*)(CUcontext, CUstream, void**);
using ContextQueryFn = CUresult (*)(CUcontext, void*, void*);
using FunctionVisitor = int (*)(void* user, CUfunction f, const char* name);
using ModuleWalkFn = uint64_t (*)(CUcontext, CUmodule, FunctionVisitor, void*);
using ClusterTopologyFn = CUresult (*)(void** data, uint64_t* token);
using ClusterTopologyFreeFn = CUresult (*)(void* data, uint64_t token);

// Slot `slot` of the driver's table `id`, or nullptr (with a log line naming both) when the driver
// has no such table or the table is too short. Asked every time: cuGetExportTable is a lookup.
// A plain void*: the slot holds a function pointer, which clang refuses to reinterpret_cast from
// a pointer to const (casting away qualifiers), where g++ lets it pass.
void* driver_slot(Dispatch& d, const CUuuid& id, const char* table, unsigned slot) {
  const void* t = nullptr;
  if (!d.drv.cuGetExportTable || d.drv.cuGetExportTable(&t, &id) != CUDA_SUCCESS || !t) {
    log::warn("the driver does not serve export table %s; slot %u is answered CUDA_ERROR_NOT_SUPPORTED", table, slot);
    return nullptr;
  }
  auto* words = static_cast<const void* const*>(t);
  size_t bytes = reinterpret_cast<uintptr_t>(words[0]);
  if (bytes <= slot * sizeof(void*) || !words[slot]) {
    log::warn("the driver's export table %s (%zu bytes) has no slot %u; answering CUDA_ERROR_NOT_SUPPORTED", table,
              bytes, slot);
    return nullptr;
  }
  return const_cast<void*>(words[slot]);
}

// The context a request names: the client's handle, or this thread's current one for 0. Never
// NULL on success: the driver's slots are not known to accept it.
CUresult context_of(Dispatch& d, uint64_t id, CUcontext* out) {
  CUcontext ctx = nullptr;
  if (id == 0) {
    if (!d.drv.cuCtxGetCurrent || d.drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  } else if (!d.handles.get(id, &ctx)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = ctx;
  return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

struct Visit {
  std::vector<std::string> names;
};

int collect(void* user, CUfunction, const char* name) {
  static_cast<Visit*>(user)->names.emplace_back(name ? name : "");
  return 0;  // driver 580 ignores what the visitor returns (probed: 0 and 1 both walk every function)
}

}  // namespace

void tools_context_object(Dispatch& d) {
  proto::wire::ToolsContextAsk req;
  if (!proto::wire::read_tools_context_ask(d.args, &req)) return;
  const uint64_t ctx_id = req.context, stream_id = req.stream;
  CUcontext ctx;
  if (CUresult rc = context_of(d, ctx_id, &ctx)) return d.reply.put<int32_t>(rc);
  CUstream stream = nullptr;
  if (!d.handles.get(stream_id, &stream)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  auto get = reinterpret_cast<ContextObjectFn>(driver_slot(d, kToolsContext, "TOOLS_CONTEXT", kToolsContextObjectSlot));
  auto query = reinterpret_cast<ContextQueryFn>(driver_slot(d, kToolsContext, "TOOLS_CONTEXT", kToolsContextQuerySlot));
  if (!get || !query) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  void* object = nullptr;
  CUresult rc = get(ctx, stream, &object);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  // Room beyond the 8 bytes slot 39 was seen to write: a wider write lands here, not on the stack.
  uint64_t out[4] = {};
  rc = query(ctx, object, out);
  proto::wire::put_tools_context_value(d.reply, {rc, out[0]});
}

void module_functions(Dispatch& d) {
  proto::wire::ModuleFunctionsAsk req;
  if (!proto::wire::read_module_functions_ask(d.args, &req)) return;
  const uint64_t ctx_id = req.context, module_id = req.module;
  CUcontext ctx;
  if (CUresult rc = context_of(d, ctx_id, &ctx)) return d.reply.put<int32_t>(rc);
  CUmodule module = nullptr;
  if (!d.handles.get(module_id, &module) || !module) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  auto walk = reinterpret_cast<ModuleWalkFn>(driver_slot(d, kToolsModule, "TOOLS_MODULE", kToolsModuleWalkSlot));
  if (!walk) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  Visit v;
  uint64_t count = walk(ctx, module, &collect, &v);
  if (count != v.names.size())
    log::warn("TOOLS_MODULE slot 7 returned %llu but visited %zu functions; sending the visited ones",
              static_cast<unsigned long long>(count), v.names.size());
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_function_names(d.reply, v.names);
}

void cluster_topology(Dispatch& d) {
  uint64_t ctx_id = 0;
  if (!proto::wire::read_context_ask(d.args, &ctx_id)) return;
  CUcontext ctx;
  if (CUresult rc = context_of(d, ctx_id, &ctx)) return d.reply.put<int32_t>(rc);
  CUdevice dev = 0;
  int sms = 0;
  if (!d.drv.cuCtxPushCurrent_v2 || !d.drv.cuCtxPopCurrent_v2 || !d.drv.cuCtxGetDevice || !d.drv.cuDeviceGetAttribute)
    return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  auto get = reinterpret_cast<ClusterTopologyFn>(driver_slot(d, kCublasLt1734, "CUBLASLT_1734DC26", kClusterTopologySlot));
  auto release =
      reinterpret_cast<ClusterTopologyFreeFn>(driver_slot(d, kCublasLt1734, "CUBLASLT_1734DC26", kClusterTopologyFreeSlot));
  if (!get || !release) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  // Slot 4 takes no context: it answers for the current one, which is the request's while asked.
  if (CUresult rc = d.drv.cuCtxPushCurrent_v2(ctx)) return d.reply.put<int32_t>(rc);
  void* data = nullptr;
  uint64_t token = 0;
  CUresult rc = d.drv.cuCtxGetDevice(&dev);
  if (rc == CUDA_SUCCESS) rc = d.drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (rc == CUDA_SUCCESS) rc = get(&data, &token);
  CUcontext popped = nullptr;
  d.drv.cuCtxPopCurrent_v2(&popped);
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  // cuBLASLt 13.0 reads one byte per TPC (two SMs on compute capability 9.0) and nothing more.
  uint32_t n = data ? static_cast<uint32_t>(std::min<int>(std::max(sms, 0) / 2, proto::kMaxClusterTopology)) : 0;
  proto::wire::put_cluster_topology(d.reply, data, n);
  if (data) release(data, token);
}

void export_table_info(Dispatch& d) {
  CUuuid id;
  if (!proto::wire::read_export_table_ask(d.args, &id)) return;
  if (!d.drv.cuGetExportTable) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const void* table = nullptr;
  CUresult rc = d.drv.cuGetExportTable(&table, &id);
  if (rc == CUDA_SUCCESS && !table) rc = CUDA_ERROR_NOT_FOUND;
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_export_table_word(d.reply, *static_cast<const uint64_t*>(table));
}

}  // namespace rgpu::server::handlers
