// What a spare session process (protocol/accept_loop.h) does before its client arrives, so the
// client's first calls do not wait for it: the driver's cuInit, device 0's primary context, and
// NVML's init. On the H200 the first two cost a client ~0.3 s of its start-up (cuInit inside the
// snapshot, the context inside its first cuDevicePrimaryCtxRetain).
//
// The context is held for the client: its first cuDevicePrimaryCtxRetain of device 0 takes the
// hold over instead of creating a context. Until then the client must not see it. The shim never
// asks for cuDevicePrimaryCtxGetState (it answers from its own count, client/driver/context.cpp),
// so only the calls that change the state are wrapped: cuDevicePrimaryCtxSetFlags, Release and
// Reset drop the hold first (destroying the context), so the driver answers them exactly as it
// would have without. A hold the client has not taken
// kHoldFor after its session started is dropped too (a session of NVML calls only, or one that
// never uses device 0), so no GPU memory stays tied up for nothing.
#pragma once

#include <chrono>
#include <string>

#include "gen/driver_table.gen.h"

namespace rgpu::server::prewarm {

enum class Level {
  kNone,     // nothing ahead: every call as the client makes it
  kInit,     // cuInit and NVML's init
  kContext,  // and device 0's primary context (the default)
};

inline constexpr auto kHoldFor = std::chrono::seconds(20);

// "none", "init" or "context".
bool parse_level(const std::string& text, Level* out);

// In the spare process: starts the warm-up on a thread of its own and wraps table's cuInit and
// primary-context entry points so that calls wait for the warm-up and see the hold as described
// above. Returns at once.
void start(DriverTable* table, Level level);

// In the session process, when its client has connected: starts kHoldFor's count.
void session_started();

}  // namespace rgpu::server::prewarm
