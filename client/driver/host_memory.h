// The client's pinned host memory: ranges allocated (cuMemHostAlloc, cuMemAllocHost) or
// registered (cuMemHostRegister) in this process. Pinning is a promise about the client's own
// memory, so it is kept here; the server is not told. Copies use these ranges to tell host
// addresses from device ones (cuMemcpy with unified addressing), and pointer attributes of these
// ranges are answered without the network.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace rgpu::client {

struct HostRange {
  uintptr_t base = 0;
  size_t size = 0;
  unsigned flags = 0;      // as given to cuMemHostAlloc / cuMemHostRegister
  bool registered = false;  // cuMemHostRegister (else allocated by us)
  uint64_t id = 0;          // unique per range, for CU_POINTER_ATTRIBUTE_BUFFER_ID
};

// True when [p, p + n) lies inside one pinned range (n = 0: p inside one); fills *out.
bool find_host_range(const void* p, size_t n, HostRange* out);

// How a copy with unified addressing (cuMemcpy, cuMemcpy2D/3D, graph memcpy nodes) tells the
// sides apart: p is device memory when it lies in none of this process's pinned ranges and the
// server's driver says it is device, array or unified memory (one round trip); anything else is
// host memory of this process.
bool is_device(CUdeviceptr p);

// Kernels given the address of pinned host memory that is not mirrored on the server (allocated
// or registered without DEVICEMAP): with unified addressing a kernel may read pinned memory by its
// host address, which the GPU cannot reach across the network. While such memory exists the
// launch path records the last launches' arguments (note_launch, cheap; nothing is recorded
// otherwise), and when the server reports CUDA_ERROR_ILLEGAL_ADDRESS, explain_illegal_address
// names the kernel and the address (once per process).
bool pinned_memory_exists();
void note_launch(uint64_t function_id, const uint8_t* params, size_t n);
void explain_illegal_address();

// Host callbacks (client/driver/host_callback.cpp) queued and not yet finished. An async copy
// from pinned memory reads the buffer when it is issued, where the driver reads it when the
// stream reaches the copy; a callback ahead of it on the stream may still write the buffer, so
// such a copy first waits for the callbacks queued before it to run.
bool host_callbacks_pending();
void wait_host_callbacks();

// Waits until every async device-to-host copy issued so far (by any thread) to `server` has
// landed in its buffer (client/driver/memory.cpp). Called when a synchronizing call to that
// server succeeds: it covers none of another server's work (RGPU_SERVER=a,b), and nothing reads
// another server's connection meanwhile.
void wait_async_copies(int server);

}  // namespace rgpu::client
