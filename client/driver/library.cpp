// Libraries and kernels (cuLibrary*, cuKernel*): how cudart 13 loads all code. As for modules
// (module.cpp), the client parses each image it sends, so cuLibraryGetKernel, cuKernelGetFunction,
// cuLibraryGetModule, the kernel count, enumeration and names are answered with client-minted
// handles and no round trip, and a launch of a CUkernel (passed as the CUfunction) knows its
// parameter layout: the layout is recorded under the kernel's id in the ModuleRegistry.
//
// Wire layouts: protocol/wire/module.h. cuLibraryGetKernel is one-way when the client found the
// kernel in the parsed image, waiting otherwise.
#include <cuda.h>

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "client/call.h"
#include "client/contexts.h"
#include "client/driver/cached_answers.h"
#include "client/modules.h"
#include "client/runtime.h"
#include "common/cuda_image.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/module.h"

namespace {

// cuKernelGetFunction's answers, by (kernel id, context).
std::mutex g_kernel_functions_mu;
auto& g_kernel_functions = *new std::map<std::pair<uint64_t, CUcontext>, CUfunction>();

using rgpu::client::Call;
using rgpu::client::handle_from;
using rgpu::client::handle_id;
using rgpu::client::ModuleRegistry;

// The real driver returns the same CUkernel for the same (library, name): so do we, and a
// repeated cuLibraryGetKernel sends nothing.
std::mutex g_mu;
// Leaked on purpose: cudart unloads libraries from its exit handler, after static destructors.
auto& g_kernels = *new std::map<std::pair<uint64_t, std::string>, uint64_t>();
// Names handed out by cuKernelGetName/cuFuncGetName live as long as the process.
auto& g_names = *new std::set<std::string>();

const char* intern(const std::string& s) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_names.insert(s).first->c_str();
}

CUresult load(const char* name, CUlibrary* library, const void* code, size_t max_len) {
  rgpu::client::trace_call(name);
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id;
  CUresult rc = rgpu::client::load_image(rgpu::op::cuLibraryLoadData, name, code, max_len, &id);
  if (rc == CUDA_SUCCESS) *library = handle_from<CUlibrary>(id);
  return rc;
}

// Asks the server for the name of a kernel or function handle the client has no image for.
CUresult name_from_server(uint16_t op, uint64_t id, const char** name) {
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::put_id(c.args(), id);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  std::string s;
  if (!rgpu::proto::wire::read_symbol_name(c.reply(), &s)) return CUDA_ERROR_UNKNOWN;
  *name = intern(s);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                               CUlibraryOption*, void**, unsigned int) {
  return load("cuLibraryLoadData", library, code, SIZE_MAX);
}

// The file names a client path: read here, sent as cuLibraryLoadData.
RGPU_EXPORT CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**,
                                                   unsigned int, CUlibraryOption*, void**, unsigned int) {
  rgpu::client::trace_call("cuLibraryLoadFromFile");
  if (!library || !fileName) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(fileName, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX text files are not NUL-terminated on disk
  return load("cuLibraryLoadFromFile", library, bytes.data(), bytes.size());
}

RGPU_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  CUresult rc = rgpu_fwd_cuLibraryUnload(library);
  if (rc != CUDA_SUCCESS) return rc;
  ModuleRegistry::get().remove_module(handle_id(library));
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_kernels.begin(); it != g_kernels.end();) {
    if (it->first.first == handle_id(library)) it = g_kernels.erase(it);
    else ++it;
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  rgpu::client::trace_call("cuLibraryGetKernel");
  if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_kernels.find({handle_id(library), name});
    if (it != g_kernels.end()) {
      *pKernel = handle_from<CUkernel>(it->second);
      return CUDA_SUCCESS;
    }
  }
  rgpu::image::Kernel k;
  int found = ModuleRegistry::get().find_kernel(handle_id(library), name, &k);
  // Not in what the client could parse: the server's driver has the last word (an image may
  // hold entries the client cannot read), at the price of one round trip.
  if (found != 1)
    rgpu::log::debug("cuLibraryGetKernel(%s): %s; asking the server (one round trip)", name,
                     found < 0 ? "the client could not read the library's image" : "not among the kernels the client read");
  Call c(rgpu::op::cuLibraryGetKernel, found == 1 ? rgpu::client::kOneWay : rgpu::client::kWaits);
  c.via(library);
  const uint64_t id = c.mint();  // the library's server's
  rgpu::proto::wire::put_symbol_lookup(c.args(), id, handle_id(library), name);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  if (found == 1) ModuleRegistry::get().set_function(id, k);
  ModuleRegistry::get().name_function(id, handle_id(library), name);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_kernels[{handle_id(library), name}] = id;
  }
  *pKernel = handle_from<CUkernel>(id);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  std::vector<rgpu::image::Kernel> ks;
  if (count && lib && ModuleRegistry::get().kernels(handle_id(lib), &ks)) {
    rgpu::client::trace_call("cuLibraryGetKernelCount");
    *count = static_cast<unsigned>(ks.size());
    return CUDA_SUCCESS;
  }
  return rgpu_fwd_cuLibraryGetKernelCount(count, lib);
}

// Kernels in image order (the driver documents no order). Each is bound as cuLibraryGetKernel.
RGPU_EXPORT CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  rgpu::client::trace_call("cuLibraryEnumerateKernels");
  if (!kernels) return CUDA_ERROR_INVALID_VALUE;
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<rgpu::image::Kernel> ks;
  if (!ModuleRegistry::get().kernels(handle_id(lib), &ks)) {
    rgpu::log::error("cuLibraryEnumerateKernels: rgpu could not read this library's image, so it cannot list its "
                     "kernels; look them up by name with cuLibraryGetKernel");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  for (unsigned i = 0; i < numKernels && i < ks.size(); ++i) {
    if (CUresult rc = cuLibraryGetKernel(&kernels[i], lib, ks[i].name.c_str())) return rc;
  }
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  CUresult rc = rgpu_fwd_cuLibraryGetModule(pMod, library);
  if (rc == CUDA_SUCCESS) ModuleRegistry::get().copy_module(handle_id(library), handle_id(*pMod));
  return rc;
}

}  // extern "C"

namespace rgpu::client {
void forget_kernel_functions() {
  std::lock_guard lk(g_kernel_functions_mu);
  g_kernel_functions.clear();
}

bool is_library_kernel(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& [key, kernel] : g_kernels)
    if (kernel == id) return true;
  return false;
}

std::vector<uint64_t> functions_of_kernel(uint64_t kernel_id) {
  std::lock_guard lk(g_kernel_functions_mu);
  std::vector<uint64_t> ids;
  for (auto it = g_kernel_functions.lower_bound({kernel_id, nullptr});
       it != g_kernel_functions.end() && it->first.first == kernel_id; ++it)
    ids.push_back(handle_id(it->second));
  return ids;
}
}  // namespace rgpu::client

extern "C" {

// The driver hands out one CUfunction per kernel and context; so does the shim, from a table
// (PyTorch asks 12 times per training step, and a fresh handle each time would also miss the
// attribute caches of client/driver/cached_answers.cpp). Dropped with the other cached answers.
RGPU_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  const auto key = std::make_pair(handle_id(kernel), rgpu::client::contexts::current());
  if (pFunc && kernel) {
    std::lock_guard lk(g_kernel_functions_mu);
    if (auto it = g_kernel_functions.find(key); it != g_kernel_functions.end()) {
      rgpu::client::trace_call("cuKernelGetFunction");
      *pFunc = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = rgpu_fwd_cuKernelGetFunction(pFunc, kernel);
  if (rc != CUDA_SUCCESS) return rc;
  if (auto k = ModuleRegistry::get().function(handle_id(kernel))) ModuleRegistry::get().set_function(handle_id(*pFunc), *k);
  ModuleRegistry::get().same_as(handle_id(*pFunc), handle_id(kernel));
  std::lock_guard lk(g_kernel_functions_mu);
  g_kernel_functions[key] = *pFunc;
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  rgpu::client::trace_call("cuKernelGetName");
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!hfunc) return CUDA_ERROR_INVALID_HANDLE;
  if (auto k = ModuleRegistry::get().function(handle_id(hfunc)); k && !k->name.empty()) {
    *name = intern(k->name);
    return CUDA_SUCCESS;
  }
  return name_from_server(rgpu::op::cuKernelGetName, handle_id(hfunc), name);
}

RGPU_EXPORT CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  rgpu::client::trace_call("cuFuncGetName");
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!hfunc) return CUDA_ERROR_INVALID_HANDLE;
  if (auto k = ModuleRegistry::get().function(handle_id(hfunc)); k && !k->name.empty()) {
    *name = intern(k->name);
    return CUDA_SUCCESS;
  }
  return name_from_server(rgpu::op::cuFuncGetName, handle_id(hfunc), name);
}

}  // extern "C"
