// cuLaunchKernel / cuLaunchKernelEx / cuLaunchCooperativeKernel: checks dimensions, packs the
// arguments by the image's parameter layout, and queues the kernel's host implementation on the
// stream.
//
// A cooperative launch (cuLaunchCooperativeKernel, or cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_COOPERATIVE) must fit on the device at once: more blocks than the occupancy
// per SM (library.cpp) times the SMs → CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE. The host
// implementations run a grid block by block, so grid-wide synchronisation has nothing to do.
//
// Errors at launch: bad dimensions or argument packaging → CUDA_ERROR_INVALID_VALUE; a kernel
// with no host implementation → CUDA_ERROR_NOT_SUPPORTED and one line on stderr naming it.
// A bad device pointer among the arguments is found when the kernel runs: nothing is written,
// the context is poisoned with CUDA_ERROR_ILLEGAL_ADDRESS, and the next synchronize (and every
// later call in that context) reports it, as on the real driver. Pinned by
// fakecuda_test's Launch.BadPointerPoisonsTheContextAtTheNextSynchronize.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "fakecuda/internal.h"

using namespace fake;

namespace {

CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared, CUstream h,
                void** kernelParams, void** extra, bool cooperative = false) {
  // No current context is INVALID_CONTEXT before any argument is looked at (driver 580).
  CUctx_st* current;
  if (CUresult r = current_ctx(&current)) return r;
  for (int i = 0; i < 3; ++i)
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t(block[0]) * block[1] * block[2] > uint64_t(kMaxThreadsPerBlock) || block[2] > 64 ||
      grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  // A cooperative grid that cannot be resident (too much shared memory included: above the
  // function's limit no block fits) is too large before it is invalid (driver 580 on the H200).
  if (cooperative) {
    int max_dynamic;
    {
      std::lock_guard lk(g_mu);
      if (!g_funcs.count(f)) return CUDA_ERROR_INVALID_HANDLE;
      max_dynamic = f->max_dynamic_shared;
    }
    uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
    uint64_t per_sm = shared > unsigned(max_dynamic) ? 0 : blocks_per_sm(int(block[0] * block[1] * block[2]), shared);
    uint64_t resident = per_sm * uint64_t(device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
    if (blocks > resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  if (shared > unsigned(device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)))
    return CUDA_ERROR_INVALID_VALUE;

  std::string name;
  std::vector<rgpu::image::Param> params;
  uint32_t param_bytes;
  {
    std::lock_guard lk(g_mu);
    if (!g_funcs.count(f)) return CUDA_ERROR_INVALID_HANDLE;
    // Dynamic shared memory past the function's limit (48 KiB unless cuFuncSetAttribute or
    // cuKernelSetAttribute raised CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), as driver 580.
    if (shared > unsigned(f->max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
    name = f->kernel->name;
    params = f->kernel->params;
    param_bytes = f->kernel->param_bytes;
  }

  // Pack the parameter buffer: from kernelParams (one pointer per parameter) or from extra.
  std::vector<uint8_t> buf(param_bytes);
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  if (kernelParams) {
    for (const auto& p : params) {
      if (!kernelParams[p.ordinal]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf.data() + p.offset, kernelParams[p.ordinal], p.size);
    }
  } else if (extra) {
    const void* ptr = nullptr;
    const size_t* size = nullptr;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (i > 64) return CUDA_ERROR_INVALID_VALUE;  // unterminated
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        ptr = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = static_cast<const size_t*>(extra[i + 1]);
      else
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!ptr || !size || *size != param_bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf.data(), ptr, param_bytes);
  } else if (param_bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }

  HostKernel impl = find_host_kernel(name);
  // RGPU_FAKE_NOOP_KERNELS=1: such kernels run and do nothing, so a real program's calls (PyTorch
  // training, its start-up round trips) can be followed on the fake; its numbers are garbage.
  if (!impl && rgpu::env::get().fake_noop_kernels) impl = [](const LaunchDims&, const uint8_t*) { return CUDA_SUCCESS; };
  if (!impl) {
    std::fprintf(stderr, "fakecuda: kernel %s has no host implementation\n", name.c_str());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  LaunchDims d{{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}};
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  CUctx_st* ctx = s->ctx;
  submit_locked(s, [impl, d, buf = std::move(buf), ctx] {
    if (CUresult r = impl(d, buf.data())) poison(ctx, r);
  });
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                         unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                         void** kernelParams, void** extra) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(f, grid, block, sharedMemBytes, hStream, kernelParams, extra);
}

FAKE_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                           void** extra) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  // Launch attributes other than cooperative (cluster dims, priorities, ...) change nothing the
  // fake can show.
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) cooperative = config->attrs[i].value.cooperative != 0;
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return launch(f, grid, block, config->sharedMemBytes, config->hStream, kernelParams, extra, cooperative);
}

FAKE_API CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                    unsigned int gridDimZ, unsigned int blockDimX,
                                                    unsigned int blockDimY, unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(f, grid, block, sharedMemBytes, hStream, kernelParams, nullptr, true);
}

FAKE_API CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                         unsigned int gz, unsigned int bx, unsigned int by,
                                                         unsigned int bz, unsigned int shared, CUstream h,
                                                         void** kernelParams) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, h, kernelParams);
}

FAKE_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                              CUstream h, void** kernelParams, void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, h, kernelParams, extra);
}

FAKE_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                                void** extra) {
  return cuLaunchKernelEx(config, f, kernelParams, extra);
}
