// Handlers for control ops that are not CUDA entry points (protocol/messages.h).
#pragma once

#include "server/dispatch.h"

namespace rgpu::server::handlers {

// kOpSnapshot: initialises the driver (cuInit runs here, in the session's process only) and
// answers protocol/snapshot.h.
void snapshot(Dispatch& d);

}  // namespace rgpu::server::handlers
