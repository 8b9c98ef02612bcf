// The PrivateUse1 hooks of rgpu: what ATen asks a backend it does not know (is it available, how
// many devices, which device a pointer is on, how to resize a storage).
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

struct RgpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = current_device();
    set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  // Storage addresses are not real (runtime/device.h): the current device is the best answer.
  at::Device getDeviceFromPtr(void*) const override { return device(); }
  // Tensor.is_pinned() asks the accelerator, which is rgpu once it is registered. Memory pinned by
  // rgpu's allocator is ours; but where the local torch has CUDA and a GPU,
  // torch.empty(pin_memory=True) takes CUDA's pinned allocator (ATen prefers CUDA's there), so
  // such a pointer is asked of CUDA, when CUDA has a context (without one nothing of it is pinned,
  // and asking would make one).
  bool isPinnedPtr(const void* p) const override {
    if (is_pinned(p)) return true;
    const at::CUDAHooksInterface& cuda = at::detail::getCUDAHooks();
    if (!cuda.hasCUDA()) return false;
    for (c10::DeviceIndex d = 0; d < cuda.deviceCount(); ++d)
      if (cuda.hasPrimaryContext(d)) return cuda.isPinnedPtr(p);
    return false;
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    TORCH_CHECK(false,
                "rgpu: random numbers are drawn on the server by its own generator; seed it with torch.manual_seed(). "
                "torch.Generator(device=\"rgpu\") and rgpu RNG state are not supported");
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(newsize >= storage.nbytes(), "rgpu: storages can grow, not shrink");
    grow_storage(storage, newsize);
  }
};

struct Register {
  Register() { at::RegisterPrivateUse1HooksInterface(new RgpuHooks()); }
} g_register;

}  // namespace
}  // namespace rgpu::torchdev
