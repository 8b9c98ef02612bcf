// Answers that do not change until this process changes them, kept on the client so that asking
// again costs no round trip (docs/design.md §3: what never changes is asked once). Each cache is
// dropped by the calls that can change what it holds (client/driver/cached_answers.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace rgpu::client {

// Drops every cached answer (a context was destroyed or a primary context reset).
void forget_cached_answers();
// Drops cuKernelGetFunction's table (client/driver/library.cpp); part of forget_cached_answers.
void forget_kernel_functions();
// The ids of the functions cuKernelGetFunction handed out for a kernel (one per context): they
// share the kernel's attributes (client/driver/library.cpp).
std::vector<uint64_t> functions_of_kernel(uint64_t kernel_id);

}  // namespace rgpu::client
