// Kernel arguments packed for the wire (LaunchArgs, client/driver/launch.cpp) by the kernel's
// parameter layout from its module image (client/modules.h), or asked from the server once. The
// one packer of kernel arguments: launches and graph kernel nodes (client/driver/graph.cpp).
#pragma once

#include <cuda.h>

#include "common/wire.h"

namespace rgpu::client {

// Appends LaunchArgs for f (a CUfunction, or a CUkernel passed as one) from kernelParams or
// extra (at most one of them). CUDA_ERROR_INVALID_VALUE when the arguments cannot be read,
// CUDA_ERROR_INVALID_HANDLE when f's layout is unknown.
CUresult put_launch_args(Writer& w, CUfunction f, void** kernelParams, void** extra);

}  // namespace rgpu::client
