// How the server runs one decoded call: the interface between the session loop, the generated
// handlers (gen/server_dispatch.gen.cpp) and the hand-written ones (server/handlers/*.cpp).
//
// A handler reads its arguments from d.args, calls the driver through d.drv, and writes the
// CUresult followed by its outputs to d.reply. If the arguments do not decode (d.args.ok() is
// false after reading), the handler returns without writing; the session then drops the
// connection as hostile. A handler never trusts a length or a handle from the wire: handles go
// through d.handles, which answers CUDA_ERROR_INVALID_HANDLE for ids the client does not own.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/wire.h"
#include "gen/driver_table.gen.h"
#include "server/handle_map.h"

namespace rgpu::server {

struct Dispatch {
  const DriverTable& drv;
  HandleMap& handles;
  Reader& args;
  Writer& reply;
  uint16_t op;
};

using Handler = void (*)(Dispatch&);

// The handler for an op, or nullptr when the op is unknown (answered with NOT_SUPPORTED).
Handler find_handler(uint16_t op);

}  // namespace rgpu::server
