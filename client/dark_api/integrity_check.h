// INTEGRITY_CHECK slot 1: the answer cuBLAS and cuBLASLt on CUDA 13 demand before cublasCreate
// succeeds. It is HMAC-MD2 (md2.h) under a fixed key over a record that binds the calling
// process, the calling thread, the addresses of the driver's own tables and every device's UUID
// and PCI location, so it can only be computed where the tables live: on the client.
//
// The record, packed, little-endian, native pointers (docs/reference/dark-api.md):
//   u32 driver version (cuDriverGetVersion), u32 version (the caller's argument),
//   u32 process id (getpid), u32 thread id (pthread_self() truncated to 32 bits),
//   u64 address of the CUDART_INTERFACE table, u64 address of the INTEGRITY_CHECK table,
//   u64 address of the slot-1 function, u64 unix_seconds (the caller's argument);
//   then per device in ordinal order: 16-byte UUID, i32 PCI domain, i32 PCI bus, i32 PCI device.
// The answer is the 16-byte MAC read as two native u64. Versions ending in 0 or 1 get a fixed
// answer instead.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace rgpu::client::dark {

struct IntegrityDevice {
  uint8_t uuid[16];
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};
static_assert(sizeof(IntegrityDevice) == 28);

struct IntegrityInputs {
  uint32_t driver_version = 0;
  uint32_t process_id = 0;
  uint32_t thread_id = 0;
  uint64_t cudart_interface_table = 0;
  uint64_t integrity_check_table = 0;
  uint64_t integrity_check_fn = 0;
  std::vector<IntegrityDevice> devices;
};

inline constexpr std::array<uint8_t, 16> kIntegrityKey = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                                          0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

// The answer for these inputs (pure; what slot 1 returns once it has gathered them).
std::array<uint64_t, 2> integrity_answer(uint32_t version, uint64_t unix_seconds, const IntegrityInputs& in);

// The thread id the record holds for the calling thread.
uint32_t integrity_thread_id();

}  // namespace rgpu::client::dark
