// Kernel launches (wire layout in protocol/wire/launch.h). The packed argument buffer is
// validated against the layout sent with it before the driver sees a single pointer into it.
#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "server/dispatch.h"
#include "server/handlers/launch_args.h"

namespace rgpu::server::handlers {
namespace {

using proto::wire::kMaxParams;

struct Launch {
  proto::wire::Launch in;  // as it came
  CUfunction f = nullptr;
  CUstream stream = nullptr;
};

// What the driver says about a kernel's parameters, reduced to what a launch checks.
struct DriverLayout {
  std::vector<size_t> offsets;  // of each parameter, in order
  std::vector<size_t> sizes;    // ... and its size (what a graph kernel node's parameters are read back with)
  size_t bytes = 0;             // the end of the last one: what the packed buffer must hold
};

// The driver's parameter layout of a function (or kernel), asked once per handle and kept,
// keyed by the client's id (never reused, unlike the driver's addresses after an unload).
// nullptr when the driver cannot tell (then the launch is not checked against it).
std::shared_ptr<const DriverLayout> driver_layout(Dispatch& d, uint64_t fid, CUfunction f) {
  // Cached either way, "cannot tell" too: asking the driver costs more than the launch (a
  // parameterless kernel was launched at 0.41x the local rate while it was asked every time).
  // Shared, not copied: this runs on every launch.
  static std::mutex mu;
  static std::unordered_map<uint64_t, std::shared_ptr<const DriverLayout>> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(fid); it != known.end()) return it->second;
  // The handle may be a CUfunction or a CUkernel (cudart launches kernels by their CUkernel); the
  // driver answers INVALID_VALUE at index 0 when asked about the wrong kind, so ask both ways.
  auto ask = [&](auto query, auto handle, DriverLayout* layout) {
    if (!query) return false;
    for (size_t i = 0; i < kMaxParams; ++i) {
      size_t off = 0, size = 0;
      CUresult rc = query(handle, i, &off, &size);
      if (rc == CUDA_ERROR_INVALID_VALUE) return true;  // past the last parameter
      if (rc != CUDA_SUCCESS) return false;
      layout->offsets.push_back(off);
      layout->sizes.push_back(size);
      layout->bytes = std::max(layout->bytes, off + size);
    }
    return true;
  };
  auto layout = std::make_shared<DriverLayout>();
  bool ok = ask(d.drv.cuFuncGetParamInfo, f, layout.get());
  if (layout->offsets.empty()) ok = ask(d.drv.cuKernelGetParamInfo, reinterpret_cast<CUkernel>(f), layout.get());
  // A kernel with no parameters, or one the driver cannot describe, is not checked: the driver
  // then reads nothing the client did not send.
  if (!ok || layout->offsets.empty()) layout = nullptr;
  known[fid] = layout;
  return layout;
}

// The driver reads every parameter of the kernel at its full size, wherever the client's layout
// says it is. So where the driver can describe the kernel, the argument pointers are rebuilt from
// the driver's own layout over the packed buffer (the client packs at the same offsets, read from
// the image), and a buffer too short to hold them all is refused. Returns false to refuse.
bool arguments_fit(Dispatch& d, uint64_t fid, CUfunction f, KernelArgs* a, bool params_form) {
  std::shared_ptr<const DriverLayout> want = driver_layout(d, fid, f);
  if (!want) return true;
  if (a->packed_len < want->bytes) return false;
  if (params_form) {
    a->ptrs.clear();
    for (size_t off : want->offsets) a->ptrs.push_back(const_cast<uint8_t*>(a->packed) + off);
  }
  return true;
}

// Reads the common head and, if with_attrs, the attributes. Returns false after writing the
// reply when the call fails before the driver; d.args.ok() tells a malformed payload apart.
bool read_head(Dispatch& d, Launch* l, bool with_attrs) {
  if (!proto::wire::read_launch(d.args, &l->in, with_attrs)) return false;
  if (!l->in.args.bind()) {
    d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    return false;
  }
  if (!d.handles.get(l->in.function, &l->f) || !l->f || !d.handles.get(l->in.stream, &l->stream)) {
    d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
    return false;
  }
  if (!arguments_fit(d, l->in.function, l->f, &l->in.args, l->in.args.extra_len == 0)) {
    d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    return false;
  }
  // Attributes that name events carry client ids.
  for (auto& a : l->in.attrs) {
    // The id came off the wire: read it as an integer, not as the enum it may not be.
    std::underlying_type_t<CUlaunchAttributeID> id;
    std::memcpy(&id, reinterpret_cast<const char*>(&a) + offsetof(CUlaunchAttribute, id), sizeof id);
    CUevent* ev = nullptr;
    if (id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) ev = &a.value.programmaticEvent.event;
    if (id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) ev = &a.value.launchCompletionEvent.event;
    if (id >= CU_LAUNCH_ATTRIBUTE_MAX || id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) {
      d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
      return false;
    }
    if (ev && !d.handles.get(reinterpret_cast<uint64_t>(*ev), ev)) {
      d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
      return false;
    }
  }
  return true;
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using CoopFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

void launch(Dispatch& d, LaunchFn fn) {
  Launch l;
  if (!read_head(d, &l, false)) return;
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const auto& g = l.in.dims.grid;
  const auto& b = l.in.dims.block;
  d.reply.put<int32_t>(
      fn(l.f, g[0], g[1], g[2], b[0], b[1], b[2], l.in.dims.shared_bytes, l.stream, l.in.args.params(), l.in.args.extras()));
}

void launch_cooperative(Dispatch& d, CoopFn fn) {
  Launch l;
  if (!read_head(d, &l, false)) return;
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  if (l.in.args.extra_len) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  const auto& g = l.in.dims.grid;
  const auto& b = l.in.dims.block;
  d.reply.put<int32_t>(
      fn(l.f, g[0], g[1], g[2], b[0], b[1], b[2], l.in.dims.shared_bytes, l.stream, l.in.args.ptrs.data()));
}

void launch_ex(Dispatch& d, LaunchExFn fn) {
  Launch l;
  if (!read_head(d, &l, true)) return;
  if (!fn) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUlaunchConfig config{};
  config.gridDimX = l.in.dims.grid[0];
  config.gridDimY = l.in.dims.grid[1];
  config.gridDimZ = l.in.dims.grid[2];
  config.blockDimX = l.in.dims.block[0];
  config.blockDimY = l.in.dims.block[1];
  config.blockDimZ = l.in.dims.block[2];
  config.sharedMemBytes = l.in.dims.shared_bytes;
  config.hStream = l.stream;
  config.attrs = l.in.attrs.empty() ? nullptr : l.in.attrs.data();
  config.numAttrs = static_cast<unsigned>(l.in.attrs.size());
  d.reply.put<int32_t>(fn(&config, l.f, l.in.args.params(), l.in.args.extras()));
}

}  // namespace

bool read_launch_args(Dispatch& d, KernelArgs* a) {
  if (!proto::wire::read_launch_args(d.args, a)) return false;
  if (!a->bind()) {
    d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    return false;
  }
  return true;
}

bool launch_args_fit(Dispatch& d, uint64_t fid, CUfunction f, KernelArgs* a) {
  return arguments_fit(d, fid, f, a, a->extra_len == 0);
}

void put_launch_args(Dispatch& d, uint64_t fid, CUfunction f, void** kernelParams, void** extra, Writer& w) {
  if (extra) {
    const void* buf = nullptr;
    size_t size = 0;
    for (int i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) size = *static_cast<const size_t*>(extra[i + 1]);
    }
    proto::wire::put_extra_args(w, buf, size);
    return;
  }
  std::shared_ptr<const DriverLayout> k = kernelParams ? driver_layout(d, fid, f) : nullptr;
  if (!k) {  // no parameters, or none the driver can describe
    proto::wire::put_packed_args(w, std::vector<proto::wire::ParamSlot>{}, 0);
    return;
  }
  std::vector<proto::wire::ParamSlot> slots(k->offsets.size());
  for (size_t i = 0; i < slots.size(); ++i)
    slots[i] = {static_cast<uint32_t>(k->offsets[i]), static_cast<uint32_t>(k->sizes[i])};
  size_t at = proto::wire::put_packed_args(w, slots, k->bytes);
  for (size_t i = 0; i < k->offsets.size(); ++i)
    if (kernelParams[i]) std::memcpy(w.buf().data() + at + k->offsets[i], kernelParams[i], k->sizes[i]);
}

void cuLaunchKernel(Dispatch& d) { launch(d, d.drv.cuLaunchKernel); }
void cuLaunchKernel_ptsz(Dispatch& d) { launch(d, d.drv.cuLaunchKernel_ptsz); }
void cuLaunchCooperativeKernel(Dispatch& d) { launch_cooperative(d, d.drv.cuLaunchCooperativeKernel); }
void cuLaunchCooperativeKernel_ptsz(Dispatch& d) { launch_cooperative(d, d.drv.cuLaunchCooperativeKernel_ptsz); }
void cuLaunchKernelEx(Dispatch& d) { launch_ex(d, d.drv.cuLaunchKernelEx); }
void cuLaunchKernelEx_ptsz(Dispatch& d) { launch_ex(d, d.drv.cuLaunchKernelEx_ptsz); }

void cuFuncGetParamInfo(Dispatch& d) {
  proto::wire::ParamInfo req;
  if (!proto::wire::read_param_info(d.args, &req)) return;
  const uint64_t fid = req.function, index = req.index;
  CUfunction f;
  if (!d.handles.get(fid, &f) || !f) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuFuncGetParamInfo) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  size_t off = 0, size = 0;
  CUresult rc = d.drv.cuFuncGetParamInfo(f, index, &off, &size);
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) proto::wire::put_param_info_reply(d.reply, off, size);
}

}  // namespace rgpu::server::handlers
