// The argument checks of one-way calls (argument_checks.h): pure functions of what the client knows.
#include "client/driver/argument_checks.h"

#include "client/call.h"
#include "client/contexts.h"
#include "client/runtime.h"
#include "gen/ops.gen.h"

namespace rgpu::client::checks {

CUresult launch(const DeviceLimits& dev, const FunctionLimits& fn, const LaunchShape& shape) {
  unsigned long long threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (shape.block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev.max_block[i] > 0 && shape.block[i] > static_cast<unsigned>(dev.max_block[i])) return CUDA_ERROR_INVALID_VALUE;
    threads *= shape.block[i];
  }
  if (dev.max_threads_per_block > 0 && threads > static_cast<unsigned long long>(dev.max_threads_per_block))
    return CUDA_ERROR_INVALID_VALUE;
  if (fn.max_threads_per_block > 0 && threads > static_cast<unsigned long long>(fn.max_threads_per_block))
    return CUDA_ERROR_INVALID_VALUE;
  unsigned long long blocks = 1;
  for (int i = 0; i < 3; ++i) {
    if (shape.grid[i] == 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev.max_grid[i] > 0 && shape.grid[i] > static_cast<unsigned>(dev.max_grid[i])) return CUDA_ERROR_INVALID_VALUE;
    blocks *= shape.grid[i];
  }
  const bool above_optin =
      dev.max_shared_per_block_optin > 0 && shape.shared > static_cast<unsigned>(dev.max_shared_per_block_optin);
  if (shape.cooperative) {
    // No block fits on a multiprocessor: none can be resident (the driver's answer on the H200).
    if (above_optin) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    if (fn.max_coresident_blocks >= 0 && blocks > static_cast<unsigned long long>(fn.max_coresident_blocks))
      return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  if (above_optin) return CUDA_ERROR_INVALID_VALUE;
  if (fn.max_dynamic_shared >= 0 && shape.shared > fn.max_dynamic_shared) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult memset_destination(CUdeviceptr dst, unsigned elem_bytes, size_t count) {
  if (count == 0 || elem_bytes <= 1) return CUDA_SUCCESS;  // nothing to set: the driver's to say
  return dst % elem_bytes ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned elem_bytes, size_t width, size_t height) {
  if (width == 0 || height == 0 || elem_bytes <= 1) return CUDA_SUCCESS;
  if (dst % elem_bytes) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && pitch % elem_bytes) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult stream_create_flags(unsigned flags) {
  return flags & ~unsigned(CU_STREAM_NON_BLOCKING) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult event_create_flags(unsigned flags) {
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult stream_wait_event_flags(unsigned flags) {
  return flags & ~unsigned(CU_EVENT_WAIT_EXTERNAL) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult event_record_flags(unsigned flags) {
  return flags & ~unsigned(CU_EVENT_RECORD_EXTERNAL) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult set_function_attribute(const DeviceLimits& dev, int attribute, int value, int static_shared) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
      return CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0) return CUDA_ERROR_INVALID_VALUE;  // "set dyn -1"
      if (dev.max_shared_per_block_optin > 0 &&
          static_cast<long long>(value) > dev.max_shared_per_block_optin - (static_shared > 0 ? static_shared : 0))
        return CUDA_ERROR_INVALID_VALUE;
      return CUDA_SUCCESS;
    default:
      // Past the last attribute: INVALID_VALUE ("func set attr 16", "99"); below 0 is not known.
      return attribute >= CU_FUNC_ATTRIBUTE_MAX ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  }
}

bool current_device_limits(DeviceLimits* out, CUdevice* dev_out) {
  if (!connection()) return false;
  CUdevice dev = -1;
  if (!contexts::device_of(contexts::current(), &dev)) return false;
  if (!device_limits(dev, out)) return false;
  if (dev_out) *dev_out = dev;
  return true;
}

bool device_limits(CUdevice dev, DeviceLimits* out) {
  if (!connection()) return false;
  const proto::DeviceInfo* d = device_info(dev);
  if (!d) return false;
  auto attr = [&](CUdevice_attribute a) {
    const auto i = static_cast<size_t>(a);
    return i < d->attrs.size() && d->attrs[i].result == CUDA_SUCCESS ? d->attrs[i].value : 0;
  };
  *out = {};
  out->max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  out->max_block[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  out->max_block[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  out->max_block[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  out->max_grid[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  out->max_grid[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  out->max_grid[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  out->max_shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  out->max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  out->multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  return true;
}

CUresult refused(uint16_t op, CUresult rc) {
  trace_call(op::name(op));
  trace_result(op, rc, false);
  return rc;
}

}  // namespace rgpu::client::checks
