// Modules and functions: images (cubin, fatbin, PTX) are parsed with common/cuda_image for their
// kernels and parameter layouts; nothing is compiled or run from them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/env.h"
#include "fakecuda/internal.h"

using namespace fake;

namespace {

CUresult load(CUmodule* module, const void* image, size_t max_len) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  // RGPU_FAKE_LOAD_DELAY_MS: each load takes this long, as a real driver's does (milliseconds), so
  // tests can see what runs before a load has finished.
  const int delay_ms = rgpu::env::get().fake_load_delay_ms;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  // A fatbin wrapper (what nvcc registers) points at the fatbin in this same process.
  if (rgpu::image::detect(image, max_len) == rgpu::image::Kind::kFatbinWrapper) {
    image = rgpu::image::fatbin_wrapper_data(image, max_len);
    max_len = SIZE_MAX;
    if (!image) return CUDA_ERROR_INVALID_IMAGE;
  }
  size_t len = rgpu::image::image_size(image, max_len);
  if (len == 0) return CUDA_ERROR_INVALID_IMAGE;
  auto m = std::make_unique<CUmod_st>();
  std::string err;
  if (!rgpu::image::parse(image, len, &m->image, &err)) {
    std::fprintf(stderr, "fakecuda: cannot load module: %s\n", err.c_str());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  m->ctx = c;
  for (const auto& k : m->image.kernels) {
    auto f = std::make_unique<CUfunc_st>();
    f->mod = m.get();
    f->kernel = &k;
    m->funcs.push_back(std::move(f));
  }
  std::lock_guard lk(g_mu);
  for (auto& f : m->funcs) g_funcs.emplace(f.get(), m.get());
  *module = m.get();
  g_modules.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

CUfunc_st* live_func_locked(CUfunction f) { return g_funcs.count(f) ? f : nullptr; }

}  // namespace

FAKE_API CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) { return load(module, image, SIZE_MAX); }

FAKE_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                             CUjit_option* options, void** optionValues) {
  return load(module, image, SIZE_MAX);  // JIT options do not matter: nothing is compiled
}

FAKE_API CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return load(module, fatCubin, SIZE_MAX);
}

FAKE_API CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (!fname) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::ifstream f(fname, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bytes.push_back(0);  // PTX files are not NUL-terminated on disk
  return load(module, bytes.data(), bytes.size());
}

// Lazy, as the real driver's default is since CUDA 12.2; the fake loads eagerly either way.
FAKE_API CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  auto it = g_modules.find(hmod);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Queued launches copied what they need (arguments, host implementation), so unloading now
  // cannot pull anything from under them.
  for (auto& f : it->second->funcs) g_funcs.erase(f.get());
  g_modules.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  auto it = g_modules.find(hmod);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : it->second->funcs) {
    if (f->kernel->name == name) {
      f->as_function = true;
      *hfunc = f.get();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule hmod) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  auto it = g_modules.find(hmod);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  *count = unsigned(it->second->funcs.size());
  return CUDA_SUCCESS;
}

namespace {

// The image's user constant bank (`__constant__` variables), as driver 580 reports it for every
// function of the module, whether it reads them or not: the end of the last one (the test
// kernels' 16-float table: 64 bytes).
uint64_t const_bytes(const rgpu::image::Image& img) {
  uint64_t end = 0;
  for (const auto& g : img.globals)
    if (g.constant) end = std::max(end, g.offset + g.size);
  return end;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!live_func_locked(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = kMaxThreadsPerBlock; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = int(const_bytes(hfunc->mod->image)); break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 16; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = hfunc->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    default:
      if (int(attrib) < 0 || int(attrib) >= int(CU_FUNC_ATTRIBUTE_MAX)) return CUDA_ERROR_INVALID_VALUE;
      *pi = 0;
  }
  return CUDA_SUCCESS;
}

// The dynamic shared memory size is remembered; other attributes are accepted and ignored (the
// fake has no caches or shared-memory carve-outs to configure).
FAKE_API CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!live_func_locked(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > 232448) return CUDA_ERROR_INVALID_VALUE;  // the H200's opt-in maximum
    hfunc->max_dynamic_shared = value;
  }
  // Only these may be set; the rest (max threads, registers, sizes, versions) are read-only and
  // refused (driver 580 on the H200).
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

FAKE_API CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  return live_func_locked(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fake::param_info_locked(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  if (!live_func_locked(func)) return CUDA_ERROR_INVALID_HANDLE;
  const auto& params = func->kernel->params;
  if (paramIndex >= params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = params[paramIndex].offset;
  if (paramSize) *paramSize = params[paramIndex].size;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (live_func_locked(func) && func->as_kernel && !func->as_function) return CUDA_ERROR_INVALID_HANDLE;
  return param_info_locked(func, paramIndex, paramOffset, paramSize);
}

FAKE_API CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!live_func_locked(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->kernel->name.c_str();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (!hmod) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!live_func_locked(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = hfunc->mod;
  return CUDA_SUCCESS;
}

// The image's globals are placed (zeroed) in device memory the first time they are asked for.
FAKE_API CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  CUmod_st* m = nullptr;
  uint64_t size = 0;
  {
    std::lock_guard lk(g_mu);
    auto mod = g_modules.find(hmod);
    if (mod == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
    m = mod->second.get();
    auto it = std::find_if(m->image.globals.begin(), m->image.globals.end(),
                           [&](const rgpu::image::Global& g) { return g.name == name; });
    if (it == m->image.globals.end()) return CUDA_ERROR_NOT_FOUND;
    size = it->size;
    if (auto placed = m->globals.find(name); placed != m->globals.end()) {
      if (dptr) *dptr = placed->second;
      if (bytes) *bytes = size;
      return CUDA_SUCCESS;
    }
  }
  CUdeviceptr p = 0;
  if (CUresult r = cuMemAlloc_v2(&p, size ? size : 1)) return r;
  if (CUresult r = cuMemsetD8_v2(p, 0, size ? size : 1)) return r;
  std::lock_guard lk(g_mu);
  auto [placed, fresh] = m->globals.try_emplace(name, p);
  if (!fresh) cuMemFree_v2(p);  // another thread placed it meanwhile
  if (dptr) *dptr = placed->second;
  if (bytes) *bytes = size;
  return CUDA_SUCCESS;
}
