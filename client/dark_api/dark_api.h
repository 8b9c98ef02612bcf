// The driver's private export tables (cuGetExportTable), served by the shim itself: they hold
// function pointers into the driver's own process, so they cannot be forwarded
// (docs/design.md §1, docs/reference/dark-api.md). tables.cpp is the one declarative list of every
// table (UUID, name, size, where it lives); each table with implemented slots has its own file.
//
// Contract: every table in the list is a static array that lives for the whole process; every
// slot is callable. A slot nobody has implemented is a stub that logs once, naming the table and
// the slot, and returns CUDA_ERROR_NOT_SUPPORTED: a gap is loud and named, never a crash.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace rgpu::client::dark {

enum class TableId : uint8_t {
  kCudartInterface,
  kCudartF8cf,
  kToolsTls,
  kToolsRuntimeCallbackHooks,
  kContextLocalStorage,
  kCtxCreateBypass,
  kHeapAccess,
  kDeviceExtendedRt,
  kIntegrityCheck,
  kContextChecks,
  kToolsContext,
  kCublasLt1734,
  kNvrtcCache,
  kToolsModule,
  kNvmlPrivate,
  kCount,
};

struct TableSpec {
  TableId id;
  const char* name;
  CUuuid uuid;     // bytes in the order the caller passes them
  unsigned words;  // pointer-sized slots, the size word included
  bool size_word;  // slot 0 holds words * sizeof(void*)
  const void* (*table)();  // the table's address (built on first use, never freed)
};

// Every table rgpu serves, in tables.cpp's order.
std::span<const TableSpec> all_tables();
// The table with this UUID, or nullptr.
const TableSpec* find(const CUuuid& uuid);
const TableSpec& spec(TableId id);
// 32 lowercase hex digits, byte 0 first.
std::string uuid_hex(const CUuuid& uuid);

// What an unimplemented slot does: one log line per (table, slot) for the life of the process,
// then CUDA_ERROR_NOT_SUPPORTED on every call.
CUresult report_unimplemented(TableId table, unsigned slot);

// Called by client/driver/context.cpp when a context is destroyed or a primary context reset:
// runs the context-local-storage destructors owed for that context (context_local_storage.cpp).
void on_context_destroyed(CUcontext ctx);

// ---- Building tables ----

// The stub for slot `Slot` of table `T`. It takes no arguments: under the x86-64 SysV ABI the
// caller owns its arguments, so a function that ignores them can stand in for any signature.
template <TableId T, unsigned Slot>
CUresult unimplemented_slot() {
  return report_unimplemented(T, Slot);
}

template <class F>
const void* slot_fn(F* f) {
  return reinterpret_cast<const void*>(f);
}

// A table of N words, every slot a stub; slot 0 the size in bytes when the table has a size word.
// Files then overwrite the slots they implement.
template <TableId T, size_t N>
std::array<const void*, N> stub_table(bool size_word) {
  auto table = []<size_t... I>(std::index_sequence<I...>) {
    return std::array<const void*, N>{slot_fn(&unimplemented_slot<T, static_cast<unsigned>(I)>)...};
  }(std::make_index_sequence<N>{});
  if (size_word) table[0] = reinterpret_cast<const void*>(N * sizeof(void*));
  return table;
}

// The accessor of a table with no implemented slot.
template <TableId T, size_t N, bool SizeWord>
const void* stub_only_table() {
  static const auto table = stub_table<T, N>(SizeWord);
  return table.data();
}

// What on_context_destroyed (tables.cpp) does, per table.
void cls_context_destroyed(CUcontext ctx);             // context_local_storage.cpp
void tools_context_destroyed(CUcontext ctx);           // tools_context.cpp: number and object

// For tests: how many times TOOLS_CONTEXT slot 51 has asked the server (tools_context.cpp), and
// TOOLS_MODULE slot 7 (tools_module.cpp), and CUBLASLT_1734DC26 slot 4 (cluster_topology.cpp).
uint64_t tools_context_server_queries();
uint64_t tools_module_server_queries();
uint64_t cluster_topology_server_queries();

// Accessors of the tables with implemented slots, one per file.
const void* cudart_interface_table();       // cudart_interface.cpp
const void* tools_tls_table();              // tools.cpp
const void* tools_callback_hooks_table();   // tools.cpp
const void* context_local_storage_table();  // context_local_storage.cpp
const void* context_checks_table();         // context_checks.cpp
const void* device_extended_rt_table();     // device_extended.cpp
const void* integrity_check_table();        // integrity_check.cpp
const void* tools_context_table();          // tools_context.cpp
const void* tools_module_table();           // tools_module.cpp
const void* nvrtc_cache_table();            // nvrtc_cache.cpp
const void* cublaslt_1734_table();          // cluster_topology.cpp

// What NVRTC's cache (nvrtc_cache.cpp) has done in this process, for tests.
struct NvrtcCacheCounts {
  uint64_t hits, misses, writes;
};
NvrtcCacheCounts nvrtc_cache_counts();
// The cache directory's limit in bytes (default 512 MiB), for tests.
void set_nvrtc_cache_limit(uint64_t bytes);

}  // namespace rgpu::client::dark
