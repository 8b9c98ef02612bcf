// Kernel launches. The arguments are packed on the client into one buffer using the kernel's
// parameter layout, known from the module image (client/modules.h) or, failing that, asked once
// from the server with cuFuncGetParamInfo and remembered. A launch is one-way. The wire layout
// (the launch and LaunchArgs) is protocol/wire/launch.h. Being one-way, a launch the driver would
// refuse at once for its dimensions or shared memory is refused before it is sent
// (client/driver/argument_checks.h, checks()).
#include <cuda.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "client/call.h"
#include "client/driver/argument_checks.h"
#include "client/driver/cached_answers.h"
#include "client/driver/host_memory.h"
#include "client/driver/launch_args.h"
#include "client/modules.h"
#include "client/runtime.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/launch.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;
using rgpu::client::ModuleRegistry;

// Which driver call answers for an id: cuFuncGetParamInfo or cuKernelGetParamInfo. The driver
// keeps the two apart (a CUkernel given to cuFuncGetParamInfo fails; inferred from the H200 run
// below, where mixing the two answers broke PyTorch), so answers are cached per kind; kEither asks
// the server to try the function reading first, then the kernel one.
using rgpu::proto::wire::ParamKind;

// Answers the server gave, by (id, kind, index), including "past the last parameter"
// (CUDA_ERROR_INVALID_VALUE) so that repeated walks of a layout cost nothing. Other errors (an
// id of the other kind, a lost connection) are not answers about the kernel and are not kept: a
// kept INVALID_HANDLE for the function reading of a kernel id once hid its kernel reading, and
// PyTorch launched with no parameters (H200, stop 9). Ids are never reused: entries never go stale.
struct ParamAnswer {
  CUresult rc;
  size_t offset, size;
};
using ParamKey = std::tuple<uint64_t, ParamKind, size_t>;
std::mutex g_param_answers_mu;
auto& g_param_answers = *new std::map<ParamKey, ParamAnswer>();

std::atomic<bool> g_layout_op_unsupported{false};

// Asks the server for the whole layout of a kernel or function (kOpParamLayout) and caches every
// index and, when it is "past the last one", the answer after them. Returns the kind that
// answered (kEither asks the function reading, then the kernel one) in *answered and the count in
// *walked. False when the server cannot say (an older server, or an error).
bool fetch_layout(uint64_t id, ParamKind kind, ParamKind* answered, uint32_t* walked) {
  if (g_layout_op_unsupported.load(std::memory_order_relaxed)) return false;
  Call c(rgpu::proto::kOpParamLayout, rgpu::client::kWaits);
  rgpu::proto::wire::put_param_layout_ask(c.args(), {id, static_cast<uint8_t>(kind)});
  CUresult rc = c.invoke();
  if (rc == CUDA_ERROR_NOT_SUPPORTED) g_layout_op_unsupported.store(true, std::memory_order_relaxed);
  if (rc != CUDA_SUCCESS) return false;
  rgpu::proto::wire::ParamLayout layout;
  if (!rgpu::proto::wire::read_param_layout(c.reply(), &layout)) return false;
  const uint32_t n = static_cast<uint32_t>(layout.params.size());
  std::vector<ParamAnswer> got(n);
  for (uint32_t i = 0; i < n; ++i) got[i] = {CUDA_SUCCESS, layout.params[i].first, layout.params[i].second};
  const auto end = static_cast<CUresult>(layout.end);
  const uint8_t used = layout.answered;
  *answered = static_cast<ParamKind>(used);
  *walked = n;
  std::lock_guard lk(g_param_answers_mu);
  for (uint32_t i = 0; i < n; ++i) g_param_answers[{id, *answered, i}] = got[i];
  if (end == CUDA_ERROR_INVALID_VALUE) g_param_answers[{id, *answered, n}] = ParamAnswer{end, 0, 0};
  return end == CUDA_ERROR_INVALID_VALUE;  // anything else: the walk did not reach the end
}

// The layout of f: from the image, or asked from the server once.
std::shared_ptr<const rgpu::image::Kernel> layout(CUfunction f) {
  auto k = ModuleRegistry::get().function(handle_id(f));
  // An image layout with parameter records the client could not read is no layout: packing by it
  // would send a buffer of zeros (issue 3: an 8 KiB struct parameter became an illegal address).
  if (k && k->layout_known) return k;
  rgpu::image::Kernel asked;
  auto add = [&](uint32_t i, size_t off, size_t size) {
    asked.params.push_back({i, static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
    asked.param_bytes = std::max<uint32_t>(asked.param_bytes, static_cast<uint32_t>(off + size));
  };
  // f may be a CUfunction or a CUkernel (cudart launches kernels by their CUkernel): one round
  // trip asks the server for either.
  ParamKind kind;
  uint32_t n = 0;
  if (fetch_layout(handle_id(f), ParamKind::kEither, &kind, &n)) {
    std::lock_guard lk(g_param_answers_mu);
    for (uint32_t i = 0; i < n; ++i) {
      const auto& a = g_param_answers[{handle_id(f), kind, i}];
      add(i, a.offset, a.size);
    }
  } else {
    // A server without kOpParamLayout: index by index, as a function and then as a kernel.
    for (int as_kernel = 0; as_kernel < 2 && asked.params.empty(); ++as_kernel) {
      for (uint32_t i = 0;; ++i) {
        size_t off = 0, size = 0;
        CUresult rc = as_kernel ? cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), i, &off, &size)
                                : cuFuncGetParamInfo(f, i, &off, &size);
        if (rc != CUDA_SUCCESS || off > (1u << 20) || size > (1u << 20)) break;  // past the last one
        add(i, off, size);
      }
    }
  }
  ModuleRegistry::get().set_function(handle_id(f), asked);
  return ModuleRegistry::get().function(handle_id(f));
}

// One parameter's offset and size: from the image's layout, else from the cache, else the whole
// layout from the server, else ask() for this index alone.
template <class Ask>
CUresult param_info(const char* name, uint64_t id, size_t index, size_t* offset, size_t* size, ParamKind kind,
                    Ask ask) {
  auto answer = [&](const ParamAnswer& a) {
    if (a.rc == CUDA_SUCCESS) {
      if (offset) *offset = a.offset;
      if (size) *size = a.size;
    }
    return a.rc;
  };
  auto k = ModuleRegistry::get().function(id);
  if (k && k->layout_known) {
    rgpu::client::trace_call(name);
    if (index >= k->params.size()) return CUDA_ERROR_INVALID_VALUE;
    return answer({CUDA_SUCCESS, k->params[index].offset, k->params[index].size});
  }
  auto cached = [&]() -> const ParamAnswer* {
    std::lock_guard lk(g_param_answers_mu);
    auto it = g_param_answers.find({id, kind, index});
    return it == g_param_answers.end() ? nullptr : &it->second;  // map nodes stay put
  };
  if (const ParamAnswer* a = cached()) {
    rgpu::client::trace_call(name);
    return answer(*a);
  }
  // The whole layout in one round trip (kOpParamLayout), cached for every index; servers without
  // the op are asked index by index.
  ParamKind answered;
  uint32_t walked = 0;
  if (fetch_layout(id, kind, &answered, &walked)) {
    if (const ParamAnswer* a = cached()) return answer(*a);
    if (index > walked) return CUDA_ERROR_INVALID_VALUE;  // past the last one
  }
  ParamAnswer a{};
  a.rc = ask(&a.offset, &a.size);
  if (a.rc == CUDA_SUCCESS || a.rc == CUDA_ERROR_INVALID_VALUE) {
    std::lock_guard lk(g_param_answers_mu);
    g_param_answers[{id, kind, index}] = a;
  }
  return answer(a);
}

// Appends LaunchArgs. Returns CUDA_ERROR_INVALID_VALUE when the arguments cannot be read.
CUresult put_args(rgpu::Writer& w, CUfunction f, void** kernelParams, void** extra) {
  if (extra && kernelParams) return CUDA_ERROR_INVALID_VALUE;  // the driver's rule: one form only
  if (extra) {
    const void* buf = nullptr;
    const size_t* size = nullptr;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
      else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<const size_t*>(e[1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf || !size) return CUDA_ERROR_INVALID_VALUE;
    auto k = ModuleRegistry::get().function(handle_id(f));
    if (k && !k->params.empty() && *size < k->param_bytes) return CUDA_ERROR_INVALID_VALUE;
    rgpu::proto::wire::put_extra_args(w, buf, *size);
    return CUDA_SUCCESS;
  }
  auto k = layout(f);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!k->params.empty() && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < k->params.size(); ++i)
    if (!kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
  // The packed arguments go straight into the call's buffer; the padding between parameters
  // stays zero.
  size_t at = rgpu::proto::wire::put_packed_args(w, k->params, k->param_bytes);
  for (size_t i = 0; i < k->params.size(); ++i)
    std::memcpy(w.buf().data() + at + k->params[i].offset, kernelParams[i], k->params[i].size);
  // Arguments that may point into pinned host memory: kept for explaining an illegal address.
  if (rgpu::client::pinned_memory_exists())
    rgpu::client::note_launch(handle_id(f), w.buf().data() + at, k->param_bytes);
  return CUDA_SUCCESS;
}

rgpu::proto::wire::LaunchDims dims_of(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                      unsigned shmem) {
  return {{gx, gy, gz}, {bx, by, bz}, shmem};
}

// The driver's immediate answer to a launch's shape, as far as the client can be sure of it
// (CUDA_SUCCESS: the server's driver decides). Nothing is checked without a current context: the
// driver answers CUDA_ERROR_INVALID_CONTEXT first (on the H200, for a block of 1025 too).
CUresult checks(uint16_t op, CUfunction f, const rgpu::proto::wire::LaunchDims& d, bool cooperative) {
  namespace checks = rgpu::client::checks;
  checks::DeviceLimits dev;
  CUdevice ordinal = -1;
  if (!checks::current_device_limits(&dev, &ordinal)) return CUDA_SUCCESS;
  const checks::LaunchShape shape{{d.grid[0], d.grid[1], d.grid[2]}, {d.block[0], d.block[1], d.block[2]}, d.shared_bytes, cooperative};
  // The device's limits alone first: a shape they refuse needs nothing about the function.
  CUresult rc = checks::launch(dev, {}, shape);
  if (rc == CUDA_SUCCESS) {
    const unsigned threads = d.block[0] * d.block[1] * d.block[2];  // <= the device's maximum here
    rc = checks::launch(dev,
                        rgpu::client::launch_limits(handle_id(f), ordinal, threads, d.shared_bytes, cooperative,
                                                    static_cast<unsigned>(dev.max_shared_per_block), dev.multiprocessors),
                        shape);
  }
  return rc == CUDA_SUCCESS ? rc : checks::refused(op, rc);
}

CUresult launch(uint16_t op, const char* name, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                unsigned by, unsigned bz, unsigned shmem, CUstream s, void** kernelParams, void** extra) {
  if (!f) {
    rgpu::client::trace_call(name);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const auto dims = dims_of(gx, gy, gz, bx, by, bz, shmem);
  const bool cooperative = op == rgpu::op::cuLaunchCooperativeKernel || op == rgpu::op::cuLaunchCooperativeKernel_ptsz;
  if (CUresult rc = checks(op, f, dims, cooperative)) return rc;
  rgpu::client::trace_call(name);
  Call c(op, rgpu::client::kOneWay);
  c.via(f);
  c.via(s);
  c.on_stream(s);
  rgpu::proto::wire::put_launch_head(c.args(), handle_id(f), dims, handle_id(s));
  CUresult rc = put_args(c.args(), f, kernelParams, extra);
  return rc == CUDA_SUCCESS ? c.invoke() : rc;
}

CUresult launch_ex(uint16_t op, const char* name, const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                   void** extra) {
  if (!config || !f || (config->numAttrs && !config->attrs)) {
    rgpu::client::trace_call(name);
    if (config && !f) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto dims = dims_of(config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                            config->blockDimZ, config->sharedMemBytes);
  // A cluster dimension changes what the driver checks and in which order: the server's to say.
  bool cooperative = false, clustered = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) cooperative = config->attrs[i].value.cooperative != 0;
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION ||
        config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION)
      clustered = true;
  }
  if (!clustered)
    if (CUresult rc = checks(op, f, dims, cooperative)) return rc;
  rgpu::client::trace_call(name);
  Call c(op, rgpu::client::kOneWay);
  c.via(f);
  c.via(config->hStream);
  c.on_stream(config->hStream);
  rgpu::proto::wire::put_launch_ex_head(c.args(), handle_id(f), dims, handle_id(config->hStream), config->attrs,
                                        config->numAttrs);
  CUresult rc = put_args(c.args(), f, kernelParams, extra);
  return rc == CUDA_SUCCESS ? c.invoke() : rc;
}

}  // namespace

CUresult rgpu::client::put_launch_args(Writer& w, CUfunction f, void** kernelParams, void** extra) {
  return put_args(w, f, kernelParams, extra);
}

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void** kernelParams,
                                            void** extra) {
  return launch(rgpu::op::cuLaunchKernel, "cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shmem, s, kernelParams, extra);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                 unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                                 void** kernelParams, void** extra) {
  return launch(rgpu::op::cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, shmem, s,
                kernelParams, extra);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                       CUstream s, void** kernelParams) {
  return launch(rgpu::op::cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shmem, s,
                kernelParams, nullptr);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                            unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                            CUstream s, void** kernelParams) {
  return launch(rgpu::op::cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel_ptsz", f, gx, gy, gz, bx, by, bz,
                shmem, s, kernelParams, nullptr);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                              void** extra) {
  return launch_ex(rgpu::op::cuLaunchKernelEx, "cuLaunchKernelEx", config, f, kernelParams, extra);
}

RGPU_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                                   void** extra) {
  return launch_ex(rgpu::op::cuLaunchKernelEx_ptsz, "cuLaunchKernelEx_ptsz", config, f, kernelParams, extra);
}

// cuFuncGetParamInfo and cuKernelGetParamInfo: answered from the layout the client read in the
// image; otherwise asked from the server once per (id, index), answer or error, since a loaded
// kernel's parameters never change (the GPU ladder asked cuKernelGetParamInfo 208 times).
RGPU_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                                size_t* paramSize) {
  if (!func) return CUDA_ERROR_INVALID_HANDLE;
  return param_info("cuFuncGetParamInfo", handle_id(func), paramIndex, paramOffset, paramSize, ParamKind::kFunction, [&](size_t* off, size_t* size) {
    Call c(rgpu::op::cuFuncGetParamInfo, rgpu::client::kWaits);
    rgpu::proto::wire::put_param_info(c.args(), {handle_id(func), paramIndex});
    CUresult rc = c.invoke();
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t o = 0, s = 0;
    if (!rgpu::proto::wire::read_param_info_reply(c.reply(), &o, &s)) return CUDA_ERROR_UNKNOWN;
    *off = o;
    *size = s;
    return CUDA_SUCCESS;
  });
}

RGPU_EXPORT CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                                  size_t* paramSize) {
  if (!kernel) return CUDA_ERROR_INVALID_HANDLE;
  return param_info("cuKernelGetParamInfo", handle_id(kernel), paramIndex, paramOffset, paramSize, ParamKind::kKernel, [&](size_t* off, size_t* size) {
    return rgpu_fwd_cuKernelGetParamInfo(kernel, paramIndex, off, size);
  });
}

}  // extern "C"
