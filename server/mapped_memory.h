// Mapped host memory (cuMemHostAlloc / cuMemHostRegister with DEVICEMAP) across the network.
//
// A kernel reads and writes mapped host memory through a pointer, so the memory must be in the
// server process, where the GPU is. Each mapped buffer therefore exists twice: the client's (the
// one its program uses) and a server copy, registered with the real driver. The server tries to
// map its copy at the client's address, so that under unified addressing the device pointer is
// the host pointer on both ends and kernels given the host pointer itself work too.
//
// The two copies meet at call boundaries (protocol/messages.h, kOpMapped*): before the client
// sends any call, it sends the pages its program changed since they last met (kOpMappedWrite);
// before the server sends any reply, it sends the pages the GPU changed (kOpMappedUpdate), so the
// client sees a kernel's writes once a synchronizing call returns, as with a local GPU. Each end
// finds changed pages by comparing the buffer with a shadow of what the other end last saw.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "common/wire.h"
#include "gen/driver_table.gen.h"

namespace rgpu::server {

class MappedMemory {
 public:
  // Sends one kOpMappedUpdate payload (the session writes the frame).
  using SendUpdate = std::function<bool(const std::vector<uint8_t>& payload)>;

  // kOpMappedAlloc: maps `size` bytes (at client_base if free here), registers them with the
  // driver for device access. Writes CUresult, then u64 device pointer, u64 server address.
  void alloc(const DriverTable& drv, Reader& in, Writer& out);
  // kOpMappedFree: unregisters and unmaps. Writes CUresult.
  void free(const DriverTable& drv, Reader& in, Writer& out);
  // kOpMappedWrite: client pages into the server copy. Writes CUresult.
  void write(Reader& in, Writer& out);
  // Sends the pages the GPU changed since the client last saw them. Cheap when nothing is mapped.
  bool send_updates(const SendUpdate& send);
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

 private:
  struct Buffer {
    uint64_t client_base = 0;
    uint8_t* data = nullptr;      // the server copy, registered with the driver
    std::vector<uint8_t> shadow;  // what the client last saw
    size_t size = 0;
  };
  std::mutex mu_;
  std::map<uint64_t, Buffer> by_client_;  // by client base address
  std::atomic<size_t> count_{0};
};

}  // namespace rgpu::server
