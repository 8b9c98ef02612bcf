// The client's side of mapped host memory (cuMemHostAlloc / cuMemHostRegister with DEVICEMAP;
// server/mapped_memory.h has the scheme). The program's buffer stays in this process; the
// server keeps a copy the GPU can reach. Before any call that can make the GPU read memory
// leaves, push() sends the pages the program wrote since the two copies last met; the server's
// kOpMappedUpdate frames bring the GPU's changes back before the reply that follows them.
//
// Finding what the program wrote costs time in proportion to what it wrote, not to the buffer,
// where the kernel can say (Linux 6.7+: userfaultfd asynchronous write-protect, read back with
// the PAGEMAP_SCAN ioctl; mapped_memory.cpp says why that and not a SIGSEGV handler). Elsewhere
// each push compares the buffer with a shadow of what the server holds.
//
// Copies between device memory and a mapped buffer (copy() below) run on the server against its
// copy, so the bytes cross the network once: a device-to-host copy lands in the server's copy
// and comes back as a kOpMappedUpdate; a host-to-device copy reads the server's copy after the
// push that precedes it.
//
// Several servers (RGPU_SERVER=a,b): a range's copy lives on the server of the context current when
// it was made, whose GPUs alone can reach it (a GPU cannot read another host's memory); the
// program's writes go to that server before its calls that can read memory, and only that server
// may send the range's updates.
//
// Managed memory (cuMemAllocManaged) is a mapped range the other way round: the server's driver
// picks the address, and this process maps its copy there (map_managed), so the one pointer
// works as a device pointer in calls and as a host pointer in the program. It ends when the
// server sees the program's cuMemFree_v2 of it and says so (a kOpMappedUpdate, apply_update).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rgpu::client {
class Connection;
}  // namespace rgpu::client

namespace rgpu::client::mapped {

// Asks the server for its copy of [base, base + size) (page-aligned base). On success *dptr is
// the device pointer kernels use (equal to base when the server could map its copy there).
CUresult map(void* base, size_t size, unsigned flags, CUdeviceptr* dptr);
// kOpManagedAlloc: the server allocates managed memory, and this process maps [X, X + size) at
// the address X it returns, tracked like a mapped range. When X is taken here, the server frees
// it again and the call fails with CUDA_ERROR_NOT_SUPPORTED, logged. On success *dptr = X.
CUresult map_managed(size_t size, unsigned flags, CUdeviceptr* dptr);
// Forgets the range and tells the server (one-way). False when base is not a mapped range.
bool unmap(void* base);
// The device pointer for host address p inside a mapped range.
bool device_pointer(const void* p, CUdeviceptr* out);
// Whether [p, p + n) lies inside one mapped range.
bool contains(const void* p, size_t n);
// The managed range (map_managed) holding address p: its base and the size the program asked for
// (the server's driver holds whole 2 MiB granules, server/mapped_memory.cpp).
bool managed_range(uintptr_t p, uintptr_t* base, size_t* size);

extern std::atomic<int> g_count;
inline bool active() { return g_count.load(std::memory_order_relaxed) != 0; }
// Sends the program's changes to the mapped memory of conn's server, ordered before the call `op`
// of this thread on conn, if that call can make the GPU read memory (launches, copies, memsets;
// op_touches_memory).
void push(Connection& conn, uint32_t thread_id, uint16_t op);
// A kOpMappedUpdate payload from the server (reading thread), or its end-of-managed-buffer form
// (unmaps it here). False when it does not lie inside a mapped range, or names a range of another
// server's (the server `from` is then misbehaving).
bool apply_update(const Connection& from, const uint8_t* payload, size_t n);
// A copy between device memory and host memory inside one mapped range (contains(host, n)), as
// kOpMappedCopy: `op` is the driver call the program made (cuMemcpyHtoD_v2, cuMemcpyDtoHAsync_v2,
// their _ptds/_ptsz forms...), `stream` the client handle id for the async ones. Synchronous
// copies wait for the reply (a device-to-host one's bytes arrive before it); async ones are
// one-way.
CUresult copy(uint16_t op, bool async, CUdeviceptr device, const void* host, size_t n, uint64_t stream);

}  // namespace rgpu::client::mapped
