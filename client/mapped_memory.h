// The client's side of mapped host memory (cuMemHostAlloc / cuMemHostRegister with DEVICEMAP;
// server/mapped_memory.h has the scheme). The program's buffer stays in this process; the
// server keeps a copy the GPU can reach. Before any call leaves, push() sends the pages the
// program changed since the two copies last met; the server's kOpMappedUpdate frames bring the
// GPU's changes back before the reply that follows them.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rgpu::client::mapped {

// Asks the server for its copy of [base, base + size) (page-aligned base). On success *dptr is
// the device pointer kernels use (equal to base when the server could map its copy there).
CUresult map(void* base, size_t size, unsigned flags, CUdeviceptr* dptr);
// Forgets the range and tells the server (one-way). False when base is not a mapped range.
bool unmap(void* base);
// The device pointer for host address p inside a mapped range.
bool device_pointer(const void* p, CUdeviceptr* out);

extern std::atomic<int> g_count;
inline bool active() { return g_count.load(std::memory_order_relaxed) != 0; }
// Sends the program's changes to mapped memory, ordered before the call `op` of this thread, if
// that call can make the GPU read memory (launches, copies, memsets; op_touches_memory).
void push(uint32_t thread_id, uint16_t op);
// A kOpMappedUpdate payload from the server (reading thread). False when it does not lie inside
// a mapped range (the server is then misbehaving).
bool apply_update(const uint8_t* payload, size_t n);

}  // namespace rgpu::client::mapped
