// DEVICE_EXTENDED_RT: device queries cudart makes outside the public API. 31 words on driver
// 580.159.04 (public notes say 26; slot 30 is NULL there). Slot 5 is an attribute query with a
// two-word result, answered from the shim's cuDeviceGetAttribute (the snapshot, no round trip);
// slot 13 writes one byte that the real driver sets to 0.
#include <cuda.h>

#include <cstddef>

#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark {
namespace {

// (device, attribute, int which, size_t result[2]). Probed on the real driver: with which == 0 it
// writes {1, the attribute's value} (SM count 132, compute capability 9/0, 1024 threads...), with
// which == 1 it writes {1, 0}. The shim does the same; other `which` values were not probed and
// get {1, 0} as well.
CUresult CUDAAPI device_attribute_ext(CUdevice dev, int attribute, int which, size_t* result) {
  if (!result) return CUDA_ERROR_INVALID_VALUE;
  int value = 0;
  CUresult rc = cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(attribute), dev);
  if (rc != CUDA_SUCCESS) return rc;
  result[0] = 1;
  result[1] = which == 0 ? static_cast<size_t>(static_cast<unsigned>(value)) : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_byte_13(unsigned char* result, CUdevice) {
  if (!result) return CUDA_ERROR_INVALID_VALUE;
  *result = 0;
  return CUDA_SUCCESS;
}

}  // namespace

const void* device_extended_rt_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kDeviceExtendedRt, 31>(true);
    t[5] = slot_fn(&device_attribute_ext);
    t[13] = slot_fn(&device_byte_13);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
