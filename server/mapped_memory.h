// Mapped host memory (cuMemHostAlloc / cuMemHostRegister with DEVICEMAP) across the network.
//
// A kernel reads and writes mapped host memory through a pointer, so the memory must be in the
// server process, where the GPU is. Each mapped buffer therefore exists twice: the client's (the
// one its program uses) and a server copy, registered with the real driver. The server tries to
// map its copy at the client's address, so that under unified addressing the device pointer is
// the host pointer on both ends and kernels given the host pointer itself work too.
//
// The two copies meet at call boundaries (protocol/messages.h, kOpMapped*): before the client
// sends a call that can make the GPU touch memory, it sends the pages its program wrote since
// they last met (kOpMappedWrite; client/mapped_memory.h says how it finds them); before the
// server replies to a synchronizing call, it sends the pages the GPU changed (kOpMappedUpdate),
// so the client sees a kernel's writes once a synchronizing call returns, as with a local GPU.
//
// What the GPU changed: its writes are DMA, invisible to the CPU's page tables, so the server
// compares its copy with a shadow of what the client last saw, but only where GPU work since
// could have written (note_gpu_work): a copy or memset names its destination, so one whose
// destination is no mapped buffer costs nothing, and kOpMappedCopy marks exactly the bytes it
// writes; a kernel or graph can write anywhere, so it marks every buffer whole. Marks stay until
// a cuCtxSynchronize has seen all the work that set them finish (a synchronize of one stream
// says nothing of the others, whose writes may still land): until then each synchronizing reply
// compares the marked pages again, and sends only those that changed.
//
// Managed memory (cuMemAllocManaged, kOpManagedAlloc) is mirrored the same way, except that the
// server copy is the allocation itself: the driver's address is the client address, the server
// address and the device pointer. On a real GPU the CPU reads and writes here (comparing,
// kOpMappedWrite) migrate the touched pages to the host and a later kernel migrates them back:
// correct, but each synchronizing reply after a launch moves the whole buffer across PCIe. The
// program's cuMemFree_v2 of the address ends it (forget_managed, called before the free runs).
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
#include "server/handle_map.h"

namespace rgpu::server {

class MappedMemory {
 public:
  // Sends one kOpMappedUpdate payload (the session writes the frame).
  using SendUpdate = std::function<bool(const std::vector<uint8_t>& payload)>;

  // kOpMappedAlloc: maps `size` bytes (at client_base if free here), registers them with the
  // driver for device access. Writes CUresult, then u64 device pointer, u64 server address.
  void alloc(const DriverTable& drv, Reader& in, Writer& out);
  // kOpManagedAlloc: cuMemAllocManaged, recorded as a buffer at the address it returns.
  // Writes CUresult, then u64 that address.
  void managed_alloc(const DriverTable& drv, Reader& in, Writer& out);
  // kOpMappedFree: unregisters and unmaps (managed buffers: cuMemFree). Writes CUresult.
  void free(const DriverTable& drv, Reader& in, Writer& out);
  // Before the session runs cuMemFree_v2(`address`): when that is a managed buffer's address,
  // forgets it and sends the client the kOpMappedUpdate that drops its copy. False when sending
  // failed.
  bool forget_managed(uint64_t address, const SendUpdate& send);
  // kOpMappedWrite: client pages into the server copy. Writes CUresult.
  void write(Reader& in, Writer& out);
  // kOpMappedCopy: a copy between device memory and the server copy. Writes CUresult.
  void copy(const DriverTable& drv, HandleMap& handles, Reader& in, Writer& out);
  // After the session ran a call that can make the GPU touch memory (op_touches_memory) other
  // than kOpMappedCopy, before its reply: marks what it may write. `args` is the call's payload.
  // (After, not before: a cuCtxSynchronize on another thread that began before the call was
  // made must not forget its mark.)
  void note_gpu_work(uint16_t op, const uint8_t* args, size_t n);
  // How many marks note_gpu_work and copy have made: taken before a cuCtxSynchronize runs, it
  // names the marks that synchronize has seen finish.
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  // Sends the pages the GPU changed since the client last saw them, where marked. With
  // `finished_up_to` (the generation() taken before a successful cuCtxSynchronize), forgets the
  // marks made up to then. Cheap when nothing is mapped or marked.
  bool send_updates(const SendUpdate& send, const uint64_t* finished_up_to = nullptr);
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

 private:
  struct Buffer {
    uint64_t client_base = 0;
    uint8_t* data = nullptr;      // the server copy, registered with the driver
    CUdeviceptr dptr = 0;         // its device pointer
    std::vector<uint8_t> shadow;  // what the client last saw
    size_t size = 0;
    // Where GPU work may have written since the marks were last forgotten.
    bool gpu_all = false;
    std::map<size_t, size_t> gpu_ranges;  // offset -> end, disjoint
    uint64_t marked_at = 0;               // generation of the latest mark
    bool managed = false;                 // data is a cuMemAllocManaged allocation
    uint64_t host_bytes = 0;              // server host memory it holds (server/limits.h)
  };
  void mark_locked(Buffer& b, size_t offset, size_t len);
  Buffer* find_locked(uint64_t client_address, uint64_t n);
  // Records a mirrored buffer whose two copies start zeroed (a fresh mapping and fresh managed
  // pages both read as zero). Records nothing and answers CUDA_ERROR_INVALID_VALUE when its range
  // overlaps a recorded buffer's, CUDA_ERROR_OUT_OF_MEMORY when its shadow cannot be had.
  // host_bytes: the server host memory it holds, given back when it is freed (server/limits.h).
  CUresult add(uint64_t client_base, uint8_t* data, CUdeviceptr dptr, size_t size, bool managed, uint64_t host_bytes);

  std::mutex mu_;
  std::map<uint64_t, Buffer> by_client_;  // by client base address
  std::atomic<size_t> count_{0};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace rgpu::server
