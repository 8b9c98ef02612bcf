// Libraries and kernels (cuLibrary*, cuKernel*), and occupancy queries. A library is a module
// loaded the same way (module.cpp); its CUkernel handles are the module's CUfunction objects, so
// a CUkernel passed as the CUfunction of cuLaunchKernel (what cudart 13 does) launches, and
// cuKernelGetFunction returns the same object. Libraries need a current context here (the real
// driver loads them context-free); nothing in rgpu's path loads one without a context.
// Occupancy answers are plausible H200 numbers, not a model of the hardware.
#include <algorithm>
#include <cstring>

#include "fakecuda/internal.h"

struct CUlib_st {
  CUmodule mod = nullptr;
};

using namespace fake;

namespace {

std::unordered_map<CUlib_st*, std::unique_ptr<CUlib_st>>& g_libs = *new std::unordered_map<CUlib_st*, std::unique_ptr<CUlib_st>>;

// The module of a live library, or nullptr. g_mu held.
CUmod_st* lib_module_locked(CUlibrary lib) {
  auto it = g_libs.find(lib);
  if (it == g_libs.end() || !g_modules.count(it->second->mod)) return nullptr;
  return it->second->mod;
}

CUfunction as_func(CUkernel k) { return reinterpret_cast<CUfunction>(k); }

// Libraries belong to no context on the real driver (cudart loads them before making one
// current): with none current, load into device 0's primary context.
template <class F>
CUresult load_without_context(F load) {
  CUcontext cur = nullptr;
  if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) return load();
  CUcontext primary = nullptr;
  if (CUresult r = cuDevicePrimaryCtxRetain(&primary, 0)) return r;
  cuCtxPushCurrent_v2(primary);
  CUresult r = load();
  cuCtxPopCurrent_v2(&cur);
  return r;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                            CUlibraryOption*, void**, unsigned int) {
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  CUmodule m = nullptr;
  if (CUresult r = load_without_context([&] { return cuModuleLoadData(&m, code); })) return r;
  auto lib = std::make_unique<CUlib_st>();
  lib->mod = m;
  std::lock_guard lk(g_mu);
  *library = lib.get();
  g_libs.emplace(lib.get(), std::move(lib));
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**,
                                                unsigned int, CUlibraryOption*, void**, unsigned int) {
  if (!library || !fileName) return CUDA_ERROR_INVALID_VALUE;
  CUmodule m = nullptr;
  if (CUresult r = load_without_context([&] { return cuModuleLoad(&m, fileName); })) return r;
  auto lib = std::make_unique<CUlib_st>();
  lib->mod = m;
  std::lock_guard lk(g_mu);
  *library = lib.get();
  g_libs.emplace(lib.get(), std::move(lib));
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  if (CUresult r = check_init()) return r;
  CUmodule m;
  {
    std::lock_guard lk(g_mu);
    auto it = g_libs.find(library);
    if (it == g_libs.end()) return CUDA_ERROR_INVALID_HANDLE;
    m = it->second->mod;
    g_libs.erase(it);
  }
  return cuModuleUnload(m);
}

FAKE_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUmod_st* m = lib_module_locked(library);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : m->funcs) {
    if (f->kernel->name == name) {
      f->as_kernel = true;
      *pKernel = reinterpret_cast<CUkernel>(f.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUmod_st* m = lib_module_locked(lib);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  *count = unsigned(m->funcs.size());
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  if (!kernels) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUmod_st* m = lib_module_locked(lib);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < numKernels && i < m->funcs.size(); ++i) kernels[i] = reinterpret_cast<CUkernel>(m->funcs[i].get());
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (!pMod) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUmod_st* m = lib_module_locked(library);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = m;
  return CUDA_SUCCESS;
}

// A library's globals are its module's.
FAKE_API CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  CUmodule m = nullptr;
  if (CUresult r = cuLibraryGetModule(&m, library)) return r;
  return cuModuleGetGlobal_v2(dptr, bytes, m, name);
}

FAKE_API CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard lk(g_mu);
  if (!g_funcs.count(as_func(kernel))) return CUDA_ERROR_INVALID_HANDLE;
  as_func(kernel)->as_function = true;
  *pFunc = as_func(kernel);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  if (!pLib) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  auto f = g_funcs.find(as_func(kernel));
  if (f == g_funcs.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [raw, lib] : g_libs) {
    if (lib->mod == f->second) {
      *pLib = raw;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

FAKE_API CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) { return cuFuncGetName(name, as_func(hfunc)); }

// The kernel keeps its own dynamic shared memory limit: a cuFuncSetAttribute on its function
// changes what the function launches with, not what the kernel answers (driver 580 on the H200).
FAKE_API CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult r = cuFuncGetAttribute(pi, attrib, as_func(kernel));
  if (r == CUDA_SUCCESS && attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    std::lock_guard lk(g_mu);
    *pi = as_func(kernel)->kernel_max_dynamic_shared;
  }
  return r;
}

FAKE_API CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult r = cuFuncSetAttribute(as_func(kernel), attrib, val);
  if (r == CUDA_SUCCESS && attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    std::lock_guard lk(g_mu);
    if (g_funcs.count(as_func(kernel))) as_func(kernel)->kernel_max_dynamic_shared = val;
  }
  return r;
}

FAKE_API CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return cuFuncSetCacheConfig(as_func(kernel), config);
}

FAKE_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  return param_info_locked(as_func(kernel), paramIndex, paramOffset, paramSize);
}

// ---------- occupancy ----------

namespace {

CUresult live_func(CUfunction f) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  return g_funcs.count(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

// 2048 threads and 32 blocks per SM; shared memory limits blocks too.
int fake::blocks_per_sm(int block_size, size_t smem) {
  if (block_size <= 0 || block_size > kMaxThreadsPerBlock) return 0;
  int by_threads = 2048 / block_size;
  size_t sm_smem = size_t(device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  if (smem > size_t(device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))) return 0;
  int by_smem = smem ? int(sm_smem / smem) : 32;
  return std::max(0, std::min({by_threads, by_smem, 32}));
}

FAKE_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                               int blockSize, size_t dynamicSMemSize,
                                                                               unsigned int flags) {
  if (!numBlocks) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = live_func(func)) return r;
  int max_dynamic;
  {
    std::lock_guard lk(g_mu);
    max_dynamic = func->max_dynamic_shared;
  }
  // More dynamic shared memory than the function may have (48 KiB unless raised): no block fits
  // (SUCCESS with 0, as driver 580).
  *numBlocks = dynamicSMemSize > size_t(max_dynamic) ? 0 : blocks_per_sm(blockSize, dynamicSMemSize);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                      size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

FAKE_API CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                                  int numBlocks, int blockSize) {
  if (!dynamicSmemSize || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = live_func(func)) return r;
  size_t sm_smem = size_t(device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  size_t block_max = size_t(device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  *dynamicSmemSize = std::min(sm_smem / size_t(numBlocks), block_max);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func, const CUlaunchConfig* config) {
  if (!numClusters || !config) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = live_func(func)) return r;
  unsigned cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      cluster = a.value.clusterDim.x * a.value.clusterDim.y * a.value.clusterDim.z;
  }
  if (cluster == 0) return CUDA_ERROR_INVALID_VALUE;
  // Hopper's limit (16 blocks with non-portable sizes allowed): a probe for the largest width
  // stops here, as on the real driver (without it, cuBLASLt's probe overflowed its stack).
  if (cluster > 16) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  int per_sm = blocks_per_sm(int(config->blockDimX * config->blockDimY * config->blockDimZ), config->sharedMemBytes);
  *numClusters = int(per_sm * device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) / cluster);
  return CUDA_SUCCESS;
}
