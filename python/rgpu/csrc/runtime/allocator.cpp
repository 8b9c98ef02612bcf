// The rgpu allocator (runtime/device.h): storages are ids the client mints; the server allocates
// lazily when it first sees the id used, so allocation never waits for the network. Allocations
// and frees travel in the connection's next frame (runtime/connection.h), not on their own.
//
// It is a c10::DeviceAllocator, the interface torch.accelerator's memory functions use: the
// allocation counters are the client's own (every live rgpu storage, whichever side minted its
// id), so memory_allocated() never waits; what the server reserves beyond that comes from a
// server with a caching allocator (cuda), one round trip per question; a cpu server reserves
// exactly what its client allocated.
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <array>
#include <mutex>

#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;
using c10::CachingDeviceAllocator::DeviceStats;

namespace {

constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr size_t kSmall = static_cast<size_t>(c10::CachingAllocator::StatType::SMALL_POOL);
constexpr size_t kLarge = static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL);
// torch.cuda's pools split at 1 MiB; the same split keeps memory_stats() comparable.
constexpr size_t kSmallSize = 1u << 20;
constexpr int kMaxDevices = 64;

struct RemoteStorage {
  uint64_t id;
  size_t nbytes;
  c10::DeviceIndex device;
};

// The client's counters, per device.
std::mutex g_stats_mu;
std::array<DeviceStats, kMaxDevices> g_stats;

void count(c10::DeviceIndex d, size_t nbytes, bool alloc) {
  if (d < 0 || d >= kMaxDevices) return;
  std::lock_guard<std::mutex> lk(g_stats_mu);
  DeviceStats& s = g_stats[d];
  for (size_t pool : {kAll, nbytes < kSmallSize ? kSmall : kLarge}) {
    for (auto* stat : {&s.allocation[pool], &s.active[pool]}) alloc ? stat->increase(1) : stat->decrease(1);
    for (auto* stat : {&s.allocated_bytes[pool], &s.active_bytes[pool], &s.requested_bytes[pool]})
      alloc ? stat->increase(nbytes) : stat->decrease(nbytes);
  }
}

void free_remote(void* ctx) {
  auto* rs = static_cast<RemoteStorage*>(ctx);
  count(rs->device, rs->nbytes, false);
  if (Connection* c = Connection::existing()) c->release(rs->id);
  delete rs;
}

c10::DataPtr data_ptr_for(uint64_t id, size_t nbytes, c10::DeviceIndex index) {
  // A fake address, unique per storage: 16 MiB apart, never dereferenced.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(id) << 24);
  count(index, nbytes, true);
  return c10::DataPtr(fake, new RemoteStorage{id, nbytes, index}, &free_remote, device(index));
}

// The server's answer to kMemQuery: free, total, and whether it caches (then reserved bytes and
// segments, current and peak).
struct ServerMemory {
  uint64_t free = 0, total = 0;
  bool cached = false;
  uint64_t reserved = 0, reserved_peak = 0, segments = 0, segments_peak = 0;
};

ServerMemory ask_server(Connection& c, c10::DeviceIndex d) {
  Writer w;
  w.put<int8_t>(static_cast<int8_t>(d));
  w.put_u8(kMemQuery);
  Bytes body = c.call(kTorchMemory, w, "memory");
  Reader r(body.data(), body.size());
  ServerMemory m;
  m.free = r.u64();
  m.total = r.u64();
  m.cached = r.u8() != 0;
  if (m.cached) {
    m.reserved = r.u64();
    m.reserved_peak = r.u64();
    m.segments = r.u64();
    m.segments_peak = r.u64();
  }
  TORCH_CHECK(r.ok(), "rgpu: rgpu-opserver sent a malformed memory reply");
  return m;
}

void post_memory(c10::DeviceIndex d, MemoryAction action) {
  Connection* c = Connection::existing();
  if (!c) return;  // not connected: the server holds nothing of this process
  Writer w;
  w.put<int8_t>(static_cast<int8_t>(d));
  w.put_u8(action);
  c->post(kTorchMemory, w);
}

class RgpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = current_device();
    return data_ptr_for(Connection::get().allocate(nbytes, static_cast<uint8_t>(index)), nbytes, index);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "rgpu: device bytes cannot be copied on the client; copy tensors with .copy_() or .to()");
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    empty_host_cache();  // the kept .cpu() results' memory (runtime/host_cache.cpp) as well
    post_memory(-1, kMemEmptyCache);
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex d) override {
    DeviceStats s = client_stats(d);
    // Reserved is what the server's cache holds; without a cache, what was allocated.
    s.reserved_bytes = s.allocated_bytes;
    s.segment = s.allocation;
    Connection* c = Connection::existing();
    if (c && c->server_device() != "cpu") {
      ServerMemory m = ask_server(*c, d);
      if (m.cached) {
        s.reserved_bytes = {};
        s.segment = {};
        s.reserved_bytes[kAll].current = static_cast<int64_t>(m.reserved);
        s.reserved_bytes[kAll].peak = static_cast<int64_t>(m.reserved_peak);
        s.segment[kAll].current = static_cast<int64_t>(m.segments);
        s.segment[kAll].peak = static_cast<int64_t>(m.segments_peak);
      }
    }
    return s;
  }

  void resetAccumulatedStats(c10::DeviceIndex d) override {
    std::lock_guard<std::mutex> lk(g_stats_mu);
    DeviceStats& s = stats_of(d);
    for (auto* arr : {&s.allocation, &s.active, &s.allocated_bytes, &s.active_bytes, &s.requested_bytes})
      for (auto& stat : *arr) stat.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex d) override {
    {
      std::lock_guard<std::mutex> lk(g_stats_mu);
      DeviceStats& s = stats_of(d);
      for (auto* arr : {&s.allocation, &s.active, &s.allocated_bytes, &s.active_bytes, &s.requested_bytes})
        for (auto& stat : *arr) stat.reset_peak();
    }
    post_memory(d, kMemResetPeak);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex d) override {
    ServerMemory m = ask_server(Connection::get(), d);
    return {static_cast<size_t>(m.free), static_cast<size_t>(m.total)};
  }

  DeviceStats client_stats(c10::DeviceIndex d) {
    std::lock_guard<std::mutex> lk(g_stats_mu);
    return stats_of(d);
  }

 private:
  static DeviceStats& stats_of(c10::DeviceIndex d) {
    if (d < 0) d = device().index();
    TORCH_CHECK(d < kMaxDevices, "rgpu: no device rgpu:", static_cast<int>(d));
    return g_stats[d];
  }
};

RgpuAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

std::pair<int64_t, int64_t> allocated_bytes(c10::DeviceIndex d) {
  DeviceStats s = g_allocator.client_stats(d);
  return {s.allocated_bytes[kAll].current, s.allocated_bytes[kAll].peak};
}

c10::Allocator* allocator() { return &g_allocator; }

c10::Storage storage_for_id(uint64_t id, size_t nbytes, c10::DeviceIndex device) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                           data_ptr_for(id, nbytes, device), &g_allocator, /*resizable=*/true));
}

uint64_t storage_id(const c10::Storage& s) {
  const c10::DataPtr& dp = s.data_ptr();
  TORCH_CHECK(dp.get_deleter() == &free_remote, "rgpu: a tensor on device ", s.device(),
              " has no rgpu storage (was it made by another backend?)");
  return static_cast<RemoteStorage*>(dp.get_context())->id;
}

void grow_storage(const c10::Storage& s, size_t nbytes) {
  if (nbytes <= s.nbytes()) return;
  Writer w;
  w.put_u64(storage_id(s));
  w.put_u64(nbytes);
  Connection::get().post(kTorchResize, w);
  auto* rs = static_cast<RemoteStorage*>(s.data_ptr().get_context());
  count(rs->device, rs->nbytes, false);
  count(rs->device, nbytes, true);
  rs->nbytes = nbytes;
  s.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

void restride(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  auto* impl = t.unsafeGetTensorImpl();
  if (!t.sizes().equals(sizes) || !t.strides().equals(strides)) impl->set_sizes_and_strides(sizes, strides);
  if (t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (size_t k = 0; k < sizes.size(); ++k) last += (sizes[k] - 1) * strides[k];
  grow_storage(t.storage(), static_cast<size_t>(last + 1) * t.element_size());
}

void synchronize() {
  Connection::get().call(kTorchSync, Writer(), "synchronize");
}

}  // namespace rgpu::torchdev
