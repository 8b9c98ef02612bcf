// Kernel arguments (LaunchArgs, protocol/wire/launch.h) checked against the driver's own
// parameter layout, shared by launches (server/handlers/launch.cpp) and graph kernel nodes
// (server/handlers/graph.cpp), so both check a packed buffer the same way.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/wire/launch.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {

using KernelArgs = proto::wire::KernelArgs;

// Reads and binds LaunchArgs. Returns false when the payload is malformed (d.args.ok() is then
// false) or a slot lies outside the buffer (CUDA_ERROR_INVALID_VALUE already written to d.reply).
bool read_launch_args(Dispatch& d, KernelArgs* a);
// Rebuilds a's pointers from the driver's layout of f (fid: the client's id for it) and checks
// the buffer holds every parameter. False (nothing written) when it is too short.
bool launch_args_fit(Dispatch& d, uint64_t fid, CUfunction f, KernelArgs* a);
// Writes LaunchArgs for arguments the driver holds (a kernel node's kernelParams or extra),
// packed by the driver's layout of f; no parameters when the driver cannot describe f.
void put_launch_args(Dispatch& d, uint64_t fid, CUfunction f, void** kernelParams, void** extra, Writer& w);

}  // namespace rgpu::server::handlers
