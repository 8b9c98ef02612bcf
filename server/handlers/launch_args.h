// Kernel arguments as they travel (LaunchArgs, wire layout in client/driver/launch.cpp), shared
// by launches (server/handlers/launch.cpp) and graph kernel nodes (server/handlers/graph.cpp), so
// both check a packed buffer against the driver's own parameter layout the same way.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/dispatch.h"

namespace rgpu::server::handlers {

// Decoded LaunchArgs: pointers into the request's buffer, valid while the handler runs. Not
// copyable: extra[3] points at extra_len.
struct KernelArgs {
  KernelArgs() = default;
  KernelArgs(const KernelArgs&) = delete;
  KernelArgs& operator=(const KernelArgs&) = delete;
  std::vector<void*> ptrs;  // one per parameter (the kernelParams form)
  const uint8_t* packed = nullptr;
  size_t packed_len = 0;
  size_t extra_len = 0;  // > 0: the `extra` form, a CU_LAUNCH_PARAM_BUFFER_POINTER over packed
  void* extra[5] = {};
  void** params() { return extra_len ? nullptr : ptrs.data(); }
  void** extras() { return extra_len ? extra : nullptr; }
};

// Reads LaunchArgs. Returns false when the payload is malformed (d.args.ok() is then false) or
// the layout is refused (CUDA_ERROR_INVALID_VALUE already written to d.reply).
bool read_launch_args(Dispatch& d, KernelArgs* a);
// Rebuilds a's pointers from the driver's layout of f (fid: the client's id for it) and checks
// the buffer holds every parameter. False (nothing written) when it is too short.
bool launch_args_fit(Dispatch& d, uint64_t fid, CUfunction f, KernelArgs* a);
// Writes LaunchArgs for arguments the driver holds (a kernel node's kernelParams or extra),
// packed by the driver's layout of f; no parameters when the driver cannot describe f.
void put_launch_args(Dispatch& d, uint64_t fid, CUfunction f, void** kernelParams, void** extra, Writer& w);

}  // namespace rgpu::server::handlers
