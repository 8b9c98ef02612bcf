// Argument errors of one-way calls, found on the client. A one-way call (a launch, a memset, a
// stream or event created, an attribute set) returns before the server has seen it, and an error
// the server finds comes back with the next call that waits, which then fails in the place of the
// wrong one. The real driver refuses these arguments at once; so does the shim where what it
// already knows (the device snapshot, a function's cached attributes, the flags cuda.h defines)
// makes the answer certain. Where it cannot be certain, each check passes (CUDA_SUCCESS) and the
// server's driver decides: a false error is worse than a late one.
//
// Each rule is what driver 580 answered on the H200 (tests/conformance, the probes named beside
// each check); these functions are pure, so client/driver/argument_checks_test.cpp pins them.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace rgpu::client::checks {

// What the device snapshot says about the current context's device. A field of 0 is unknown (an
// attribute the server's driver did not answer): the checks that need it pass.
struct DeviceLimits {
  int max_threads_per_block = 0;
  int max_block[3] = {0, 0, 0};
  int max_grid[3] = {0, 0, 0};
  int max_shared_per_block_optin = 0;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  int max_shared_per_block = 0;        // the default limit of a function's shared memory (48 KiB)
  int multiprocessors = 0;
};

// What the client knows about the launched function; -1 is unknown.
struct FunctionLimits {
  int max_threads_per_block = -1;  // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (__launch_bounds__)
  // The dynamic shared memory a launch may ask: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
  // or an upper bound of it (the last value the program set, which the driver either took or
  // refused leaving a smaller one).
  long long max_dynamic_shared = -1;
  // Cooperative launches: blocks that can be resident at once (occupancy x multiprocessors).
  long long max_coresident_blocks = -1;
};

struct LaunchShape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared;
  bool cooperative;
};

// cuLaunchKernel, cuLaunchCooperativeKernel, cuLaunchKernelEx: in the driver's order, block
// dimensions (INVALID_VALUE: "launch block 1025", "1024x2", "z 65"), grid dimensions
// (INVALID_VALUE: "launch grid 0", "grid y 65536"), for a cooperative launch the grid that cannot
// be resident (COOPERATIVE_LAUNCH_TOO_LARGE, also for shared memory above the device's opt-in
// maximum: "cooperative launch shared too large"), then dynamic shared memory (INVALID_VALUE:
// "launch shared 48 KiB + 1").
CUresult launch(const DeviceLimits& dev, const FunctionLimits& fn, const LaunchShape& shape);

// cuMemsetD16* and cuMemsetD32* (elem_bytes 2 or 4; D2D forms pass their destination): a
// destination not aligned to the element is INVALID_VALUE ("memset d32 unaligned") when anything
// is to be set (count of elements, or width x height, not 0).
CUresult memset_destination(CUdeviceptr dst, unsigned elem_bytes, size_t count);
// cuMemsetD2D16* and cuMemsetD2D32*: the destination as above (width x height elements), and a
// pitch not a multiple of the element when there is more than one row ("memset d2d32 pitch 258":
// INVALID_VALUE for 2 rows, SUCCESS for 1).
CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned elem_bytes, size_t width, size_t height);

// Flags outside what cuda.h defines for the call: INVALID_VALUE ("stream create bad flags",
// "event create bad flags", "stream wait event flags 7"; each of the 32 bits alone was tried on
// the H200). CU_EVENT_INTERPROCESS without CU_EVENT_DISABLE_TIMING is INVALID_VALUE too. The wait
// and record flags' one defined bit (EXTERNAL) is the server's: ILLEGAL_STATE outside a capture.
CUresult stream_create_flags(unsigned flags);
CUresult event_create_flags(unsigned flags);
CUresult stream_wait_event_flags(unsigned flags);
CUresult event_record_flags(unsigned flags);

// cuFuncSetAttribute and cuKernelSetAttribute: a read-only attribute is INVALID_VALUE ("func set
// max threads (read-only)"), and so is a dynamic shared memory limit above the device's opt-in
// maximum less the function's static shared memory (static_shared -1: unknown, taken as 0)
// ("func set max dynamic shared 300 KiB").
CUresult set_function_attribute(const DeviceLimits& dev, int attribute, int value, int static_shared);

// The limits of the current context's device from the snapshot. False when no context is current
// (the driver then answers CUDA_ERROR_INVALID_CONTEXT before it looks at arguments: the checks
// that need a context are left to the server) or before cuInit.
bool current_device_limits(DeviceLimits* out, CUdevice* dev = nullptr);
// The same for a client device ordinal; false when there is no such device.
bool device_limits(CUdevice dev, DeviceLimits* out);
// A locally refused call: traced as the call and its result (RGPU_TRACE), then rc returned.
CUresult refused(uint16_t op, CUresult rc);

}  // namespace rgpu::client::checks
