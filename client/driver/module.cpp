// Module loading and function lookup. The client parses each image it sends
// (common/cuda_image.h) so that cuModuleGetFunction is answered locally with a client-minted
// handle (no round trip) and launches know their parameter layout.
//
// Wire layouts: protocol/wire/module.h. cuModuleGetFunction is one-way when the client found the
// kernel in the parsed image, waiting otherwise.
#include <cuda.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "client/call.h"
#include "client/modules.h"
#include "client/runtime.h"
#include "common/cuda_image.h"
#include "common/log.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/module.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_from;
using rgpu::client::handle_id;
using rgpu::client::ModuleRegistry;

CUresult load(uint16_t op, const char* name, CUmodule* module, const void* image, size_t max_len) {
  rgpu::client::trace_call(name);
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id;
  CUresult rc = rgpu::client::load_image(op, name, image, max_len, &id);
  if (rc == CUDA_SUCCESS) *module = handle_from<CUmodule>(id);
  return rc;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  return load(rgpu::op::cuModuleLoadData, "cuModuleLoadData", module, image, SIZE_MAX);
}

// JIT options are not forwarded: they carry host pointers (log buffers) that mean nothing on the
// server. The image itself loads the same way.
RGPU_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                                CUjit_option* options, void** optionValues) {
  for (unsigned i = 0; options && optionValues && i < numOptions; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      optionValues[i] = nullptr;  // nothing written to the logs
  }
  return load(rgpu::op::cuModuleLoadData, "cuModuleLoadDataEx", module, image, SIZE_MAX);
}

RGPU_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return load(rgpu::op::cuModuleLoadData, "cuModuleLoadFatBinary", module, fatCubin, SIZE_MAX);
}

// The file is read on the client (it names a client path).
RGPU_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  rgpu::client::trace_call("cuModuleLoad");
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(fname, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX text files are not NUL-terminated on disk
  return load(rgpu::op::cuModuleLoadData, "cuModuleLoad", module, bytes.data(), bytes.size());
}

RGPU_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  rgpu::client::trace_call("cuModuleUnload");
  if (!hmod) return CUDA_ERROR_INVALID_HANDLE;
  Call c(rgpu::op::cuModuleUnload, rgpu::client::kOneWay);
  rgpu::proto::wire::put_id(c.args(), handle_id(hmod));
  CUresult rc = c.invoke();
  if (rc == CUDA_SUCCESS) ModuleRegistry::get().remove_module(handle_id(hmod));
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  rgpu::client::trace_call("cuModuleGetFunction");
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!hmod) return CUDA_ERROR_INVALID_HANDLE;
  rgpu::image::Kernel k;
  int found = ModuleRegistry::get().find_kernel(handle_id(hmod), name, &k);
  // Not in what the client could parse: the server's driver has the last word (an image may
  // hold entries the client cannot read), at the price of one round trip.
  Call c(rgpu::op::cuModuleGetFunction, found == 1 ? rgpu::client::kOneWay : rgpu::client::kWaits);
  c.via(hmod);
  const uint64_t id = c.mint();  // the module's server's
  rgpu::proto::wire::put_symbol_lookup(c.args(), id, handle_id(hmod), name);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  if (found == 1) ModuleRegistry::get().set_function(id, k);
  ModuleRegistry::get().name_function(id, handle_id(hmod), name);
  *hfunc = handle_from<CUfunction>(id);
  return CUDA_SUCCESS;
}

}  // extern "C"
