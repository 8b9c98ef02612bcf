// The device guard of rgpu (what c10::DeviceGuard and the autograd engine use), and the current
// device of each thread (runtime/device.h). The server presents rgpu:0 .. rgpu:N-1 and runs
// each client's calls in the order they were sent, whatever their device, so each device has
// one in-order stream: events are complete, as far as any later call can tell, once the calls
// before them were sent, and waiting on a stream, an event or a device is one round trip
// (kTorchSync). Timing events (torch.Event(enable_timing=True)) are also recorded on the server
// (kTorchEvent), where the work runs, so elapsed_time() measures the server's time.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "protocol/torch_wire.h"

#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

using namespace rgpu::torchwire;

thread_local c10::DeviceIndex t_current = 0;

struct RgpuEvent {
  uint64_t id = 0;      // the server's event id, 0 until a timing record
  bool timed = false;
};

// The one stream of a device; an unindexed device means the current one.
c10::Stream stream_of(c10::Device d) { return c10::Stream(c10::Stream::DEFAULT, d.has_index() ? d : device()); }

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
  c10::Stream getStream(c10::Device d) const override { return stream_of(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return stream_of(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return stream_of(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return stream_of(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return stream_of(s.device()); }
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
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex index, const c10::EventFlag flag) const override {
    if (!*event) *event = new RgpuEvent{0, flag == c10::EventFlag::BACKEND_DEFAULT};
    auto* e = static_cast<RgpuEvent*>(*event);
    if (!e->timed) return;
    Connection& c = Connection::get();
    if (!e->id) e->id = c.mint();
    Writer w;
    w.put_u8(kEventRecord);
    w.put_u64(e->id);
    w.put<int8_t>(static_cast<int8_t>(index >= 0 ? index : s.device_index()));
    c.post(kTorchEvent, w);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    auto* e = static_cast<RgpuEvent*>(event);
    if (!e) return;
    if (e->id) {
      if (Connection* c = Connection::existing()) {
        try {
          Writer w;
          w.put_u8(kEventDestroy);
          w.put_u64(e->id);
          c->post(kTorchEvent, w);
        } catch (...) {
          // The connection is gone, and the server's events with it.
        }
      }
    }
    delete e;
  }
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override {
    auto* ea = static_cast<RgpuEvent*>(a);
    auto* eb = static_cast<RgpuEvent*>(b);
    TORCH_CHECK(ea && eb && ea->timed && eb->timed && ea->id && eb->id,
                "rgpu: elapsed_time needs two events created with enable_timing=True and recorded");
    Writer w;
    w.put_u8(kEventElapsed);
    w.put_u64(ea->id);
    w.put_u64(eb->id);
    Bytes body = Connection::get().call(kTorchEvent, w, "elapsed_time");
    Reader r(body.data(), body.size());
    double ms = r.get<double>();
    TORCH_CHECK(r.ok(), "rgpu: rgpu-opserver sent a malformed elapsed_time reply");
    return ms;
  }
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
