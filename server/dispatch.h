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

class MappedMemory;

// Host callbacks (protocol/messages.h kOpCallback): what a handler needs to run a function in
// the client process. Implemented by the session.
class ClientCallbacks {
 public:
  virtual ~ClientCallbacks() = default;
  // Sends kOpCallback (run = 1) and blocks until the client answers kOpCallbackDone for id, or
  // the session ends. Called on the driver's host-function thread.
  virtual void run(uint64_t id, int32_t status) = 0;
  // Sends kOpCallback with run = 0: the callback was not queued, the client forgets it.
  virtual void drop(uint64_t id, int32_t status) = 0;
  // Sends a frame that is not a reply (op, flags 0): head then data. False when the connection
  // is gone.
  virtual bool send_frame(uint16_t op, const void* head, size_t head_len, const void* data, size_t n) = 0;
};

struct Dispatch {
  const DriverTable& drv;
  HandleMap& handles;
  Reader& args;
  Writer& reply;
  uint16_t op;
  ClientCallbacks* callbacks = nullptr;  // nullptr where there is no client to call (fuzzing)
  // Bytes sent after the handler's reply without being copied into it (device-to-host data);
  // nullptr where the caller has none to offer (then handlers write bulk data into `reply`).
  Bytes* bulk = nullptr;
  // The session's mirrors of mapped host and managed memory (server/mapped_memory.h); nullptr
  // where there is no session (the kOpMapped* ops then answer CUDA_ERROR_NOT_SUPPORTED).
  MappedMemory* mapped = nullptr;
  // The client sent the call one-way: nobody waits for what the handler writes (NCCL's handlers
  // keep a failure for the next waiting NCCL call instead, server/nccl/nccl_server.h).
  bool one_way = false;
};

using Handler = void (*)(Dispatch&);

// The handler of every op the server accepts (server/dispatch.cpp): control ops, mapped memory,
// CUDA calls and NVML calls; nullptr when the op is unknown (answered with NOT_SUPPORTED). The
// one lookup the session makes per call, and what the dispatch fuzzer feeds.
Handler find_handler(uint16_t op);
// A name for log lines: the CUDA or NVML call's, or the control op's; nullptr when unknown.
const char* op_name(uint16_t op);
// The handlers of CUDA calls only, generated and `custom` (gen/server_dispatch.gen.cpp), which
// find_handler consults last.
Handler find_generated_handler(uint16_t op);

}  // namespace rgpu::server
