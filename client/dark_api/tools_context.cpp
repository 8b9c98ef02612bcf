// TOOLS_CONTEXT (the driver's CU_ETID_ToolsContext, 93 words): cuBLASLt calls slot 4 on every
// matmul path, cuSOLVER calls 39 and 51.
//
// Slot 4 is (CUcontext, uint64_t *out) and writes the context's number, the value cuCtxGetId
// reports (probed on driver 580: 1 for the primary context of a fresh process; a NULL context gets
// 0 and success; public tooling names the slot "getContextNumber"). The shim numbers contexts
// itself, from 1 in the order it first sees them: unique per process, as callers that key caches
// by it need, and answered without a round trip.
// Slot 3 is (CUcontext, CUdevice *out): the context's device (probed: 0 for device 0's primary).
//
// Slot 51 returns a driver-private object that slot 39 then queries (cuSOLVER); what the object
// is has not been worked out, so both stay unimplemented stubs (README.md has what was probed).
#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "client/contexts.h"
#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark {
namespace {

std::mutex g_mu;
std::unordered_map<CUcontext, uint64_t>* g_numbers = new std::unordered_map<CUcontext, uint64_t>();
uint64_t g_next = 1;

CUresult CUDAAPI context_device(CUcontext ctx, CUdevice* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetDevice_v2(out, ctx);
}

CUresult CUDAAPI context_number(CUcontext ctx, uint64_t* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) {
    *out = 0;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto [it, fresh] = g_numbers->try_emplace(ctx, g_next);
  if (fresh) ++g_next;
  *out = it->second;
  return CUDA_SUCCESS;
}

}  // namespace

// A destroyed context's handle may come back for a new context, which must get a new number.
void forget_context_number(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_numbers->erase(ctx);
}

const void* tools_context_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kToolsContext, 93>(true);
    t[3] = slot_fn(&context_device);
    t[4] = slot_fn(&context_number);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
