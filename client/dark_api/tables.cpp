// The one list of export tables the shim serves: UUID, name, size, where the table lives. Slot
// counts are what the CUDA 13.0 stack was observed to get from the real driver
// (docs/reference/cuda13-observed/README.md), which wins over older public notes. Names follow
// public work where it has one (ZLUDA's, or the driver's own CU_ETID_* symbols); tables nobody
// has named are named after their caller.
#include <atomic>
#include <cstdio>
#include <cstring>

#include "client/dark_api/dark_api.h"
#include "common/log.h"

namespace rgpu::client::dark {
namespace {

constexpr int hex_digit(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

// A UUID from its 32 lowercase hex digits, byte 0 first (how the notes and logs write it).
constexpr CUuuid U(const char (&hex)[33]) {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(hex_digit(hex[2 * i]) * 16 + hex_digit(hex[2 * i + 1]));
  return u;
}

using T = TableId;

// clang-format off
const TableSpec kTables[] = {
  {T::kCudartInterface, "CUDART_INTERFACE",
   U("6bd5fb6c5bf4e74a8987d93912fd9df9"), 13, true,
   cudart_interface_table},
  // Asked by every cudart 13 program at start-up, no slot ever called.
  {T::kCudartF8cf, "CUDART_F8CFF951",
   U("f8cff95121468b4eb9e2fb469e7c0dd9"), 3, true,
   stub_only_table<T::kCudartF8cf, 3, true>},
  {T::kToolsTls, "TOOLS_TLS",
   U("42d85a8123f6cb478298f6e78a3aecdc"), 3, true,
   tools_tls_table},
  {T::kToolsRuntimeCallbackHooks, "TOOLS_RUNTIME_CALLBACK_HOOKS",
   U("a094798c2e742e7493f20800200c0a66"), 7, true,
   tools_callback_hooks_table},
  // No size word: slot 0 is a function.
  {T::kContextLocalStorage, "CONTEXT_LOCAL_STORAGE",
   U("c693336e1121df11a8c368f355d89593"), 4, false,
   context_local_storage_table},
  // Slot 1 (create a context bypassing checks): callers accept CUDA_ERROR_NOT_SUPPORTED.
  {T::kCtxCreateBypass, "CTX_CREATE_BYPASS",
   U("0ca50b8c1004929a89a7d0df10e77286"), 2, true,
   stub_only_table<T::kCtxCreateBypass, 2, true>},
  // Slots 1, 2 (heap alloc and free): callers accept CUDA_ERROR_NOT_SUPPORTED. Driver 580 does
  // not serve this table at all (CUDA_ERROR_INVALID_VALUE); served here as the notes describe it.
  {T::kHeapAccess, "HEAP_ACCESS",
   U("195bcbf4d67d024aacc51d29cea631ae"), 3, true,
   stub_only_table<T::kHeapAccess, 3, true>},
  // 31 words on driver 580.159.04 (probed), not the 26 of the public notes.
  {T::kDeviceExtendedRt, "DEVICE_EXTENDED_RT",
   U("b10541e1f7c7c74a9f64f223be99f1e2"), 31, true,
   device_extended_rt_table},
  {T::kIntegrityCheck, "INTEGRITY_CHECK",
   U("d4082055bde6704b8d34ba123c66e1f2"), 3, true,
   integrity_check_table},
  {T::kContextChecks, "CONTEXT_CHECKS",
   U("263e88607cd2614392f6bbd5006dfa7e"), 15, true,
   context_checks_table},
  // The driver's CU_ETID_ToolsContext; cuBLASLt (slot 4 on every matmul) and cuSOLVER (39, 51).
  {T::kToolsContext, "TOOLS_CONTEXT",
   U("21318c60971432488ca641ff7324c8f2"), 93, true,
   tools_context_table},
  // cuBLASLt, slots 4 and 13 (bf16 matmul, AMP): the device's GPC of each TPC, and its release.
  {T::kCublasLt1734, "CUBLASLT_1734DC26",
   U("1734dc26800d47458726c0f1e7dd8bca"), 17, true,
   cublaslt_1734_table},
  // NVRTC keeps its compiles in the driver's compute cache through it; rgpu keeps them on the
  // client (nvrtc_cache.cpp).
  {T::kNvrtcCache, "NVRTC_CACHE",
   U("da9151d33ae6cc41a5c04f26d533e328"), 7, true,
   nvrtc_cache_table},
  // The driver's CU_ETID_ToolsModule; cuFFT calls slot 7 (walks a module's functions with a
  // visitor that receives each CUfunction and its name).
  {T::kToolsModule, "TOOLS_MODULE",
   U("6e163fbeb958444d835ce182aff1991e"), 99, true,
   tools_module_table},
  // Asked by the real libnvidia-ml; gone once rgpu's NVML replaces it.
  {T::kNvmlPrivate, "NVML_PRIVATE",
   U("69a28e9f24498b47b030c5da330ea4e9"), 34, true,
   stub_only_table<T::kNvmlPrivate, 34, true>},
};
// clang-format on

static_assert(std::size(kTables) == static_cast<size_t>(TableId::kCount), "one entry per TableId");

constexpr unsigned kMaxWords = 128;
std::atomic<bool> g_reported[static_cast<size_t>(TableId::kCount)][kMaxWords];

}  // namespace

std::span<const TableSpec> all_tables() { return kTables; }

const TableSpec* find(const CUuuid& uuid) {
  for (const auto& t : kTables)
    if (std::memcmp(t.uuid.bytes, uuid.bytes, sizeof uuid.bytes) == 0) return &t;
  return nullptr;
}

const TableSpec& spec(TableId id) { return kTables[static_cast<size_t>(id)]; }

std::string uuid_hex(const CUuuid& uuid) {
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
  return hex;
}

CUresult report_unimplemented(TableId table, unsigned slot) {
  auto& reported = g_reported[static_cast<size_t>(table)][slot < kMaxWords ? slot : kMaxWords - 1];
  if (!reported.exchange(true, std::memory_order_relaxed)) {
    const TableSpec& t = spec(table);
    log::warn("export table %s(%s) slot %u is not implemented; returning CUDA_ERROR_NOT_SUPPORTED",
              uuid_hex(t.uuid).c_str(), t.name, slot);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

void on_context_destroyed(CUcontext ctx) {
  cls_context_destroyed(ctx);
  tools_context_destroyed(ctx);
}

}  // namespace rgpu::client::dark
