// The two tables cudart's tools support asks for at start-up (CUPTI and friends hook in through
// them): TOOLS_RUNTIME_CALLBACK_HOOKS hands out two buffers the runtime fills with its callback
// state, TOOLS_TLS is called around runtime API events (slot 1) and by cuBLAS for the current
// context (slot 2). With no tool attached the driver does nothing else with either.
#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "client/contexts.h"
#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark {
namespace {

// The sizes the real driver reports (1024 and 14, docs/reference/cuda13-observed). The unit is
// not known (ZLUDA uses 32-bit words), so each entry gets 8 bytes: a caller that writes
// pointer-sized entries stays inside the buffer.
alignas(64) uint64_t g_hooks_buffer1[1024];
alignas(64) uint64_t g_hooks_buffer2[14];

// The driver's function returns the buffer in rax as well (observed); callers that read it get it.
void* CUDAAPI hooks_buffer1(void** buffer, size_t* size) {
  if (buffer) *buffer = g_hooks_buffer1;
  if (size) *size = std::size(g_hooks_buffer1);
  return g_hooks_buffer1;
}

void* CUDAAPI hooks_buffer2(void** buffer, size_t* size) {
  if (buffer) *buffer = g_hooks_buffer2;
  if (size) *size = std::size(g_hooks_buffer2);
  return g_hooks_buffer2;
}

// Called with an event record and an event id (30 times in a torch run); the real driver answered
// 0 every time, and 0 is what public work returns for slot 1 too.
CUresult CUDAAPI tls_slot1() { return CUDA_SUCCESS; }

// Slot 2 writes the calling thread's current context into the first word its first argument
// points at, and nothing else (driver 580, traced around cublasSgemm on the H200 with the memory
// dumped before and after: the word went from 0 or stale stack bytes to the CUcontext that
// cuBLAS then hands to TOOLS_CONTEXT slots 4 and 51; the other arguments varied from call to call
// and changed nothing). Answering 0 without writing left cuBLAS a stack address as its context,
// and cublasSgemm NN/TN/TT failed with CUBLAS_STATUS_INTERNAL_ERROR through rgpu.
CUresult CUDAAPI tls_current_context(CUcontext* out) {
  if (out) *out = contexts::current();
  return CUDA_SUCCESS;
}

}  // namespace

const void* tools_callback_hooks_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kToolsRuntimeCallbackHooks, 7>(true);
    t[2] = slot_fn(&hooks_buffer1);
    t[6] = slot_fn(&hooks_buffer2);
    return t;
  }();
  return table.data();
}

const void* tools_tls_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kToolsTls, 3>(true);
    t[1] = slot_fn(&tls_slot1);
    t[2] = slot_fn(&tls_current_context);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
