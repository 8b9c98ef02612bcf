// CUDART_INTERFACE: how cudart reaches into the driver for what the public API lacks: loading the
// fatbins nvcc registers (slots 1, 6, 8; cudart 13 itself loads code with cuLibrary* and was not
// seen calling them), the primary context (slot 2, called by every cudart program), and two
// no-ops. Module loads go through the shim's own cuModuleLoadData, so they are sent and parsed
// like any other image.
#include <cuda.h>

#include <cstdint>

#include "client/call.h"
#include "client/dark_api/dark_api.h"
#include "common/cuda_image.h"

namespace rgpu::client::dark {
namespace {

// The fatbin a __fatBinC_Wrapper_t points at, or the pointer itself when it is not a wrapper
// (some callers hand the fatbin straight in).
const void* fatbin_of(const void* wrapper_or_fatbin) {
  const void* data = image::fatbin_wrapper_data(wrapper_or_fatbin, 16);
  return data ? data : wrapper_or_fatbin;
}

CUresult CUDAAPI get_module_from_cubin(CUmodule* module, const void* wrapper) {
  trace_call("dark:CUDART_INTERFACE[1]");
  if (!module || !wrapper) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, fatbin_of(wrapper));
}

CUresult CUDAAPI primary_context(CUcontext* pctx, CUdevice dev) {
  trace_call("dark:CUDART_INTERFACE[2]");
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  return cuDevicePrimaryCtxRetain(pctx, dev);
}

// The three extra arguments have never been seen non-zero; what they would ask for is unknown.
CUresult CUDAAPI get_module_from_cubin_ext1(CUmodule* module, const void* wrapper, void* a, void* b, unsigned c) {
  trace_call("dark:CUDART_INTERFACE[6]");
  if (a || b || c) return report_unimplemented(TableId::kCudartInterface, 6);
  return get_module_from_cubin(module, wrapper);
}

CUresult CUDAAPI no_op_7(size_t) { return CUDA_SUCCESS; }

CUresult CUDAAPI get_module_from_cubin_ext2(const void* fatbin, CUmodule* module, void* a, void* b, unsigned c) {
  trace_call("dark:CUDART_INTERFACE[8]");
  if (a || b || c) return report_unimplemented(TableId::kCudartInterface, 8);
  if (!module || !fatbin) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, fatbin_of(fatbin));
}

// The real driver loads its PTX compiler and libnvvm here; the server's driver has its own.
CUresult CUDAAPI load_compilers() { return CUDA_SUCCESS; }

}  // namespace

const void* cudart_interface_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kCudartInterface, 13>(true);
    t[1] = slot_fn(&get_module_from_cubin);
    t[2] = slot_fn(&primary_context);
    t[6] = slot_fn(&get_module_from_cubin_ext1);
    t[7] = slot_fn(&no_op_7);
    t[8] = slot_fn(&get_module_from_cubin_ext2);
    t[12] = slot_fn(&load_compilers);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
