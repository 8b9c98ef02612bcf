// The memory a session may take (issue 17): GPU memory per session and per tenant, and the
// server's host memory (mapped and managed buffers' copies) per session and in total. Counts live
// in the listener's session table (protocol/session_table.h), so the per-tenant and total sums
// span the session processes; a process that ends gives its share back when it is reaped.
//
// GPU memory is counted where it is made, in the driver table: install() wraps the table's
// allocating entry points (cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemAllocAsync,
// cuMemAllocFromPoolAsync and their _ptsz twins, cuMemCreate) and the frees that end them
// (cuMemFree_v2, cuMemFreeAsync, cuMemRelease), so every handler, generated or hand-written
// (kOpAllocAhead, kOpAllocMany, managed memory), is counted without knowing it. An allocation past
// a limit fails with CUDA_ERROR_OUT_OF_MEMORY, as the driver's own would, and the server logs which
// limit. cuMemGetInfo_v2's free memory is no more than the limits leave. Not counted: memory a context's destruction frees implicitly (its allocations stay
// counted until the session ends), and the legacy 32-bit cuMemAlloc.
#pragma once

#include <cstdint>
#include <string>

#include "gen/driver_table.gen.h"
#include "protocol/session_table.h"

namespace rgpu::server::limits {

struct Settings {
  proto::table::Limits gpu{0, 0, 0, "--memory-limit-mb", "--tenant-memory-limit-mb", ""};
  proto::table::Limits host{0, 0, 0, "--session-host-memory-limit-mb", "", "--host-memory-limit-mb"};
};
// The limits in force (set once by main, before the accept loop forks).
Settings& settings();

// The machine's RAM in bytes (sysconf), for the host limits' defaults.
uint64_t machine_ram();

// Wraps the table's allocating and freeing entry points (above). Call once, before sessions start.
void install(DriverTable* table);

// Host memory the session is about to hold (`what` names it for the log): false, logged, when that
// would pass a limit; the caller answers CUDA_ERROR_OUT_OF_MEMORY.
bool reserve_host(uint64_t bytes, const char* what);
void unreserve_host(uint64_t bytes);

}  // namespace rgpu::server::limits
