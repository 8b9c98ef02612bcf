// Which synchronizes must wait for the server (client/driver/sync.cpp).
//
// A synchronize that only follows work with no effect the program could see before a later call
// (host-to-device copies, memsets, allocations, loads, queries) is sent one-way: the server still
// runs it in order, so everything after it still starts after that work, but the program does not
// wait a round trip. PyTorch's `model.to("cuda")` is such a run: a copy and a synchronize per
// tensor, which at 30 ms round trips was seconds of start-up. Anything else (a launch, a
// device-to-host copy, a host callback, any call not listed as invisible) makes the streams it
// names, or every stream when it names none, "busy" until a synchronize that covers them waits.
// The program then only sees a synchronize return before the copies it issued have reached device
// memory, as a local pageable cudaMemcpy already does. Busy work is kept under the context current
// when it was sent: a context synchronize covers that context's alone (another device's, or
// another server's, stays busy until a synchronize of its own). Errors still come back from the
// synchronize: it waits whenever this thread sent a one-way call since its last reply that the
// client could not check itself (a copy into memory this process holds is checked;
// client/device_memory.h).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace rgpu::client::device_work {

// "No particular stream": the call may have queued work anywhere.
constexpr uint64_t kAnyStream = ~uint64_t{0};

// A call of op is being sent (one-way or waiting), naming stream (kAnyStream if none).
// Synchronizes themselves are not noted.
void note(uint16_t op, uint64_t stream);
// Whether a synchronize of stream (kAnyStream: the whole context) must wait for the server.
bool must_wait(uint64_t stream);
// A synchronize (op) of stream, or of context ctx (stream kAnyStream), waited and succeeded: the
// work it covers is done.
void synced(uint16_t op, uint64_t stream, CUcontext ctx = nullptr);
// This thread sent a one-way call the server might refuse; its error would come back with the
// next waiting call, so a synchronize must be that call (it reports errors of earlier calls).
void unanswered();
// A waiting call of this thread got its reply, with any deferred error.
void answered();
// Whether op queues nothing a synchronize would have to wait for (the list above).
bool invisible(uint16_t op);

}  // namespace rgpu::client::device_work
