// The rgpu device on the client: its allocator (storages are handles to server memory), its
// device guard, and the few helpers the ATen kernels share.
//
// A storage's DataPtr holds a RemoteStorage (the storage id the client minted) as its context
// and a fake address as its pointer: unique per storage (torch.save tells storages apart by
// address) and never dereferenced. Nothing on the client reads or writes device bytes; copies go
// through the connection (aten/copy.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <cstdint>

namespace rgpu::torchdev {

inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;

// Devices (runtime/guard.cpp): rgpu:0 .. rgpu:N-1, the devices the server presents (its hello
// says how many). Each thread has a current device (torch.rgpu.set_device, device guards), 0
// at start: where allocations go and what "rgpu" without an index means.
c10::DeviceIndex current_device();
// Sets the calling thread's current device; throws torch's error for an index past the count.
void set_current_device(c10::DeviceIndex index);
// How many devices the server presents (connects on first use; throws what connecting threw).
c10::DeviceIndex device_count();
// Throws when index names no device of the server ("rgpu:3 does not exist...").
void check_device_index(c10::DeviceIndex index);
inline c10::Device device() { return c10::Device(kDeviceType, current_device()); }
inline c10::Device device(c10::DeviceIndex index) { return c10::Device(kDeviceType, index); }

// The allocator registered for PrivateUse1. allocate() mints an id and queues its allocation on
// the current device (it travels with the connection's next frame).
c10::Allocator* allocator();

// A storage on rgpu:device for an id the server will bind by itself (an op's output): nothing
// is posted.
c10::Storage storage_for_id(uint64_t id, size_t nbytes, c10::DeviceIndex device);

// The server-side id of an rgpu storage; throws when the storage is not rgpu's.
uint64_t storage_id(const c10::Storage& s);

// Grows a storage (never shrinks) on both sides, keeping its bytes.
void grow_storage(const c10::Storage& s, size_t nbytes);

// Sets a tensor's sizes and strides, growing its storage when the view needs more bytes.
void restride(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides);

// Pinned host memory (runtime/pinned.cpp): the allocator Tensor.pin_memory() uses, and whether
// a host address lies in memory it gave out.
c10::Allocator* pinned_allocator();
bool is_pinned(const void* p);

// The host memory of `.cpu()` results (runtime/host_cache.cpp): freed ones are kept for the next
// of their size, up to RGPU_HOST_CACHE_MB. empty_host_cache() frees what is kept (returns its
// bytes); host_cache_state() is (bytes kept, allocations served from kept memory).
c10::Allocator* host_cache_allocator();
constexpr size_t kHostCacheMin = size_t{1} << 20;  // smaller results come from malloc as usual
size_t empty_host_cache();
std::pair<size_t, size_t> host_cache_state();

// Waits until the server has run everything sent so far (and raises deferred errors).
void synchronize();

// The bytes of live rgpu storages on device d (-1: the current one), current and peak, as the
// client counts them (never waits): torch.rgpu.memory_allocated, max_memory_allocated.
std::pair<int64_t, int64_t> allocated_bytes(c10::DeviceIndex d);

}  // namespace rgpu::torchdev
