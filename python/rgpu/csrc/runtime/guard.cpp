// The device guard of rgpu (what c10::DeviceGuard and the autograd engine use), and the current
// device of each thread (runtime/device.h). The server presents rgpu:0 .. rgpu:N-1 and runs
// each client's calls in the order they were sent, whatever their device, so each device has
// one in-order stream: events are complete once the calls before them were sent, and waiting on
// a stream or a device is one round trip (kTorchSync).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

thread_local c10::DeviceIndex t_current = 0;

struct RgpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = device();
    if (d.has_index()) set_current_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return device(); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDeviceType, "rgpu: not an rgpu device: ", d);
    if (d.has_index()) set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) t_current = d.index();
  }
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return c10::Stream(c10::Stream::DEFAULT, s.device()); }
  // The autograd engine asks once, at the first backward of the process (rgpu or not), and
  // keeps one thread per device: connecting here is what makes its answer right. A server that
  // cannot be reached counts as one device (the error comes at the first rgpu tensor).
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return device_count();
    } catch (...) {
      return 1;
    }
  }
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
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, RgpuGuardImpl);

c10::DeviceIndex current_device() { return t_current; }

c10::DeviceIndex device_count() { return static_cast<c10::DeviceIndex>(Connection::get().device_count()); }

void check_device_index(c10::DeviceIndex index) {
  int n = device_count();
  TORCH_CHECK_INDEX(index >= 0 && index < n, "rgpu:", static_cast<int>(index), " does not exist: rgpu-opserver at ",
                    Connection::get().address(), " presents ", n, " device", n == 1 ? "" : "s", " (rgpu:0",
                    n > 1 ? " .. rgpu:" + std::to_string(n - 1) : std::string(), ")");
}

void set_current_device(c10::DeviceIndex index) {
  if (index == t_current) return;
  check_device_index(index);
  t_current = index;
}

}  // namespace rgpu::torchdev
