// Device memory from cuMemAlloc, as the client knows it: the allocations this process holds, and
// allocations made ahead of the program's asking.
//
// Allocating ahead: a cuMemAlloc the client cannot answer asks the server (kOpAllocAhead) for
// that allocation and a few more of the same size in the same context; the next cuMemAlloc calls
// of that size take one of those with no message at all. PyTorch's caching allocator asks for
// few sizes many times (2 MiB and 20 MiB segments), one round trip each before: 81 of them, 2.5
// s, before the first training step at 30 ms. The extra count doubles with each refill of a size
// (1, 2, 4, ... kMaxAllocAhead), and allocations held ahead never pass kAheadBytes in all. They
// are real allocations: when the server runs out of memory they are freed and the request is
// asked again, once, without extras. RGPU_ALLOC_AHEAD=0 turns it off.
//
// Predicted: the sizes a run allocated (and how many of each) are kept across runs with the
// answer cache (client/answer_store.h) under the device and the program (executable and its
// first argument that is not an option, a Python program's script); the next run's first
// cuMemAlloc makes all of them at once (kOpAllocMany: at most a quarter of the device's memory,
// and never leaving less than a quarter of it free for other programs)
// and keeps them ahead, so a second run of a training script asks about no allocation until it
// allocates something the last run did not.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace rgpu::client::device_memory {

// Bytes held ahead at most (all sizes and contexts together).
constexpr uint64_t kAheadBytes = 256ull << 20;

// cuMemAlloc_v2: an allocation held ahead when there is one, else the server's.
CUresult allocate(CUdeviceptr* dptr, size_t size);
// cuMemFree_v2 of ptr: forgets it (the caller still forwards the free).
void forget(CUdeviceptr ptr);
// Whether [ptr, ptr + n) lies inside one allocation this process got from cuMemAlloc and holds.
bool contains(CUdeviceptr ptr, size_t n);
// Bytes allocated ahead and not yet handed out.
uint64_t ahead_bytes();

}  // namespace rgpu::client::device_memory
