// The device guard of rgpu (what c10::DeviceGuard and the autograd engine use). rgpu has one
// device and one in-order stream per device: the server runs a client's calls in the order they
// were sent, so events are always complete once the calls before them were sent, and waiting on
// a stream or the device is one round trip (kTorchSync).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

struct RgpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return device();
  }
  c10::Device getDevice() const override { return device(); }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return c10::Stream(c10::Stream::DEFAULT, s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // Events: a non-null token, complete as soon as recorded (see the file comment).
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    if (!*event) *event = new char(0);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { delete static_cast<char*>(event); }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override { synchronize(); }
  void synchronizeEvent(void*) const override { synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { synchronize(); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}

 private:
  static void check(c10::Device d) {
    TORCH_CHECK(d.type() == kDeviceType && (!d.has_index() || d.index() == 0), "rgpu has one device, rgpu:0; got ", d);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, RgpuGuardImpl);

}  // namespace rgpu::torchdev
