// The client's own record of contexts: which device each belongs to and which is current on
// each thread (the driver's per-thread context stack). It lets cuCtxGetCurrent and
// cuCtxGetDevice (thousands of calls per training step, docs/reference/cuda13-observed) and the
// context-local storage export table answer without the network. The calls that change the
// stack still go to the server, so the server thread of each client thread has the same stack.
#pragma once

#include <cuda.h>

namespace rgpu::client::contexts {

// A context the client now knows (created, or a device's primary context).
void learn(CUcontext ctx, CUdevice dev);
// The context was destroyed: forgotten, and popped from this thread's stack if on top.
void forget(CUcontext ctx);
// This thread's current context, or nullptr.
CUcontext current();
// Replaces the top of this thread's stack (pushes when empty; nullptr empties the top).
void set_current(CUcontext ctx);
void push(CUcontext ctx);
// Pops and returns the top, or nullptr when the stack is empty.
CUcontext pop();
// The device of a known context. False when the client has not seen it.
bool device_of(CUcontext ctx, CUdevice* dev);

}  // namespace rgpu::client::contexts
