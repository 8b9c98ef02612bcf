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
inline c10::Device device() { return c10::Device(kDeviceType, 0); }

// The allocator registered for PrivateUse1. allocate() mints an id and queues its allocation
// (it travels with the connection's next frame).
c10::Allocator* allocator();

// A storage for an id the server will bind by itself (an op's output): nothing is posted.
c10::Storage storage_for_id(uint64_t id, size_t nbytes);

// The server-side id of an rgpu storage; throws when the storage is not rgpu's.
uint64_t storage_id(const c10::Storage& s);

// Grows a storage (never shrinks) on both sides, keeping its bytes.
void grow_storage(const c10::Storage& s, size_t nbytes);

// Sets a tensor's sizes and strides, growing its storage when the view needs more bytes.
void restride(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides);

// Waits until the server has run everything sent so far (and raises deferred errors).
void synchronize();

}  // namespace rgpu::torchdev
