// Answers that do not change until this process changes them, kept on the client so that asking
// again costs no round trip (docs/design.md §3: what never changes is asked once). Each cache is
// dropped by the calls that can change what it holds (client/driver/cached_answers.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "client/driver/argument_checks.h"

namespace rgpu::client {

// Drops every cached answer (a context was destroyed or a primary context reset).
void forget_cached_answers();
// Drops cuKernelGetFunction's table (client/driver/library.cpp); part of forget_cached_answers.
void forget_kernel_functions();
// The ids of the functions cuKernelGetFunction handed out for a kernel (one per context): they
// share the kernel's attributes (client/driver/library.cpp).
std::vector<uint64_t> functions_of_kernel(uint64_t kernel_id);
// Whether id is a CUkernel cuLibraryGetKernel handed out (client/driver/library.cpp).
bool is_library_kernel(uint64_t id);

// What the client knows for sure about launching function (or kernel) `id` in the current
// context, on client device `dev`, with `threads` per block and `shared` bytes of dynamic shared
// memory, for checks::launch (client/driver/argument_checks.h). From the attribute and occupancy
// caches and the last limit the program set, each used only while no attribute or cache
// configuration was set since on anything (a set on a function changes what its kernel may
// launch with, and the other way round: seen on the H200). One round trip at most per function
// and process: when `shared` is above the device's default per-block limit
// (`default_shared`) and nothing says whether the function was allowed more, its attributes are
// asked (and kept across runs, client/answer_store.h). `multiprocessors` turns a cached occupancy
// into the blocks a cooperative launch can have.
checks::FunctionLimits launch_limits(uint64_t id, CUdevice dev, unsigned threads, unsigned shared, bool cooperative,
                                     unsigned default_shared, int multiprocessors);
// The function's static shared memory when its attributes are cached, else -1.
int cached_static_shared(uint64_t id, int dev);

}  // namespace rgpu::client
