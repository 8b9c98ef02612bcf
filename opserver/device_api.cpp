// The device queries of a session (protocol/torch_wire.h: kTorchDeviceProps, kTorchMemory,
// kTorchRng, kTorchEvent): what torch.cuda answers about a device, its memory, its generator and
// its timing events, for torch.rgpu on the client. Everything goes through torch's
// device-generic interfaces (the device allocator, the generator, the device guard), so this
// file needs no CUDA headers; the one exception is the device's description, which torch keeps
// only behind CUDA's headers and which comes from the driver (libcuda.so.1, loaded by torch).
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <unistd.h>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "opserver/session.h"

namespace rgpu::opserver {

using namespace rgpu::torchwire;

namespace {

[[noreturn]] void fail(const std::string& why) { throw CallError(why); }

// /proc/meminfo's value for key, in bytes (0 when absent).
uint64_t meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  uint64_t kib = 0;
  std::string unit;
  while (in >> k >> kib) {
    std::getline(in, unit);
    if (k == key + ":") return kib * 1024;
  }
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "cpu";
}

// The few driver calls the description needs, from the libcuda.so.1 torch has loaded. Values
// of CUdevice_attribute as cuda.h defines them.
struct Driver {
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using TotalMemFn = int (*)(size_t*, int);
  using AttrFn = int (*)(int*, int, int);
  using UuidFn = int (*)(unsigned char*, int);
  GetFn get = nullptr;
  NameFn name = nullptr;
  TotalMemFn total_mem = nullptr;
  AttrFn attr = nullptr;
  UuidFn uuid = nullptr;

  static const Driver& instance() {
    static Driver d = [] {
      Driver d;
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
      if (!lib) return d;
      d.get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
      d.name = reinterpret_cast<NameFn>(dlsym(lib, "cuDeviceGetName"));
      d.total_mem = reinterpret_cast<TotalMemFn>(dlsym(lib, "cuDeviceTotalMem_v2"));
      d.attr = reinterpret_cast<AttrFn>(dlsym(lib, "cuDeviceGetAttribute"));
      d.uuid = reinterpret_cast<UuidFn>(dlsym(lib, "cuDeviceGetUuid_v2"));
      if (!d.uuid) d.uuid = reinterpret_cast<UuidFn>(dlsym(lib, "cuDeviceGetUuid"));
      return d;
    }();
    return d;
  }
};

constexpr int kCuAttr[kPropCount] = {
    75,  // COMPUTE_CAPABILITY_MAJOR
    76,  // COMPUTE_CAPABILITY_MINOR
    16,  // MULTIPROCESSOR_COUNT
    10,  // WARP_SIZE
    39,  // MAX_THREADS_PER_MULTIPROCESSOR
    38,  // L2_CACHE_SIZE
    82,  // MAX_REGISTERS_PER_MULTIPROCESSOR
    18,  // INTEGRATED
    84,  // MULTI_GPU_BOARD
};

std::string uuid_text(const unsigned char* u) {
  std::string s = "GPU-";
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[u[i] >> 4];
    s += hex[u[i] & 15];
  }
  return s;
}

}  // namespace

void Session::device_props(Reader& r, Writer* w) {
  int8_t index = r.get<int8_t>();
  if (!r.ok() || r.left()) throw Malformed("truncated device query");
  c10::Device d = device(index < 0 ? 0 : index);
  int32_t props[kPropCount] = {};
  if (d.is_cpu()) {
    props[kPropMultiProcessors] = static_cast<int32_t>(std::thread::hardware_concurrency());
    props[kPropIntegrated] = 1;
    w->put_str(cpu_model() + " (rgpu-opserver --device cpu)");
    w->put_u64(meminfo("MemTotal"));
    for (int32_t v : props) w->put_i32(v);
    w->put_str("");
    return;
  }
  const Driver& drv = Driver::instance();
  int dev = 0;
  if (!drv.get || !drv.name || !drv.total_mem || !drv.attr || drv.get(&dev, d.index()) != 0)
    fail("the CUDA driver does not describe device " + std::to_string(d.index()));
  char name[256] = {};
  size_t total = 0;
  drv.name(name, sizeof name - 1, dev);
  drv.total_mem(&total, dev);
  for (int k = 0; k < kPropCount; ++k) drv.attr(&props[k], kCuAttr[k], dev);
  unsigned char uuid[16] = {};
  bool has_uuid = drv.uuid && drv.uuid(uuid, dev) == 0;
  w->put_str(name);
  w->put_u64(total);
  for (int32_t v : props) w->put_i32(v);
  w->put_str(has_uuid ? uuid_text(uuid) : "");
}

void Session::memory(Reader& r, bool want_reply, Writer* w) {
  int8_t index = r.get<int8_t>();
  uint8_t action = r.u8();
  if (!r.ok() || r.left() || action > kMemResetPeak) throw Malformed("malformed memory query");
  c10::Device d = device(index < 0 ? 0 : index);
  if (d.is_cpu()) {
    // No caching allocator on a cpu server: what it reserves is what its client allocated.
    if (!want_reply) return;
    w->put_u64(meminfo("MemAvailable"));
    w->put_u64(meminfo("MemTotal"));
    w->put_u8(0);
    return;
  }
  c10::DeviceAllocator* a = c10::getDeviceAllocator(d.type());
  if (action == kMemEmptyCache) a->emptyCache();
  if (action == kMemResetPeak) a->resetPeakStats(d.index());
  if (!want_reply) return;
  auto [free_bytes, total_bytes] = a->getMemoryInfo(d.index());
  auto st = a->getDeviceStats(d.index());
  constexpr size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  w->put_u64(free_bytes);
  w->put_u64(total_bytes);
  w->put_u8(1);
  for (int64_t v : {st.reserved_bytes[all].current, st.reserved_bytes[all].peak, st.segment[all].current,
                    st.segment[all].peak})
    w->put_u64(static_cast<uint64_t>(std::max<int64_t>(v, 0)));
}

void Session::rng(Reader& r, bool want_reply, Writer* w) {
  int8_t index = r.get<int8_t>();
  uint8_t action = r.u8();
  if (!r.ok() || action > kRngManualSeed) throw Malformed("malformed generator call");
  const bool asks = action == kRngGetState || action == kRngSeed || action == kRngInitialSeed;
  if (asks != want_reply) throw Malformed("a generator call sent the wrong way (one-way or not)");
  size_t len = 0;
  const uint8_t* state = nullptr;
  uint64_t seed = 0;
  if (action == kRngSetState) state = r.bytes(&len, kMaxRngState);
  if (action == kRngManualSeed) seed = r.u64();
  if (!r.ok() || r.left()) throw Malformed("malformed generator call");
  c10::Device d = device(index < 0 ? 0 : index);
  at::Generator gen = at::globalContext().defaultGenerator(d);
  std::lock_guard<std::mutex> lock(gen.mutex());
  switch (action) {
    case kRngGetState: {
      at::Tensor s = gen.get_state();
      w->put_bytes(s.const_data_ptr(), s.nbytes());
      break;
    }
    case kRngSetState: {
      at::Tensor s = at::empty({static_cast<int64_t>(len)}, at::TensorOptions().dtype(at::kByte));
      if (len) std::memcpy(s.data_ptr(), state, len);
      gen.set_state(s);  // checks the size and contents (a c10::Error reaches the client)
      break;
    }
    case kRngSeed:
      w->put_u64(gen.seed());
      break;
    case kRngInitialSeed:
      w->put_u64(gen.current_seed());
      break;
    case kRngManualSeed:
      gen.set_current_seed(seed);
      break;
  }
}

void Session::event(Reader& r, bool want_reply, Writer* w) {
  uint8_t action = r.u8();
  if (!r.ok() || action > kEventDestroy || want_reply != (action == kEventElapsed))
    throw Malformed("malformed event call");
  if (action == kEventRecord) {
    uint64_t id = r.u64();
    int8_t index = r.get<int8_t>();
    if (!r.ok() || r.left()) throw Malformed("malformed event record");
    c10::Device d = device(index < 0 ? 0 : index);
    if (!events_.count(id) && events_.size() >= kMaxEvents) fail("too many timing events; destroy some");
    EventSlot& e = events_[id];
    e.device = d;
    if (d.is_cpu()) {
      // Calls run in order on this thread: everything before the event has finished now.
      e.at = std::chrono::steady_clock::now();
      return;
    }
    auto* guard = c10::impl::getDeviceGuardImpl(d.type());
    c10::DeviceGuard on(d);
    guard->record(&e.native, guard->getStream(d), d.index(), c10::EventFlag::BACKEND_DEFAULT);
    return;
  }
  if (action == kEventDestroy) {
    uint64_t id = r.u64();
    if (!r.ok() || r.left()) throw Malformed("malformed event destroy");
    drop_event(id);
    return;
  }
  uint64_t a = r.u64(), b = r.u64();
  if (!r.ok() || r.left()) throw Malformed("malformed elapsed time query");
  auto ia = events_.find(a), ib = events_.find(b);
  if (ia == events_.end() || ib == events_.end())
    fail("elapsed_time: both events must have been recorded (with enable_timing=True)");
  if (ia->second.device != ib->second.device) fail("elapsed_time: the events were recorded on different devices");
  double ms;
  if (ia->second.device.is_cpu()) {
    ms = std::chrono::duration<double, std::milli>(ib->second.at - ia->second.at).count();
  } else {
    auto* guard = c10::impl::getDeviceGuardImpl(ia->second.device.type());
    guard->synchronizeEvent(ia->second.native);
    guard->synchronizeEvent(ib->second.native);
    ms = guard->elapsedTime(ia->second.native, ib->second.native, ia->second.device.index());
  }
  w->put<double>(ms);
}

Session::~Session() {
  while (!events_.empty()) drop_event(events_.begin()->first);
  log_graph_summary();
}

void Session::drop_event(uint64_t id) {
  auto it = events_.find(id);
  if (it == events_.end()) return;
  if (it->second.native)
    c10::impl::getDeviceGuardImpl(it->second.device.type())->destroyEvent(it->second.native, it->second.device.index());
  events_.erase(it);
}

}  // namespace rgpu::opserver
