// NCCL calls in a session (protocol/wire/nccl.h, ops from proto::kFirstNcclOp): rgpu's
// libnccl.so.2 forwards the NCCL API here, and the session runs it on the NCCL library it loads,
// in the session's own process, with the client thread's context current on the worker thread
// (docs/design.md §6, "NCCL"). Communicators cross the wire as ids the session mints (with its
// handle space, so the client routes by them); an id this session did not hand out is refused, so
// no client value reaches NCCL as a communicator. Device pointers are the session's own; streams
// go through the session's handle map.
//
// The library is opened by the first NCCL call of a session (rgpu-server never loads NCCL itself):
// --nccl PATH, else libnccl.so.2 as the dynamic loader finds it, else the NVIDIA pip package's
// copy in the system's Python; with --driver fake, rgpu's fake NCCL (fakecuda/nccl/).
//
// Results: every handler answers CUDA_SUCCESS to the session and NCCL's own result in NcclReply.
// A one-way call's failure is kept (the first one) and reported by the next waiting NCCL call, and
// by ncclCommGetAsyncError of its communicator. ncclInProgress (non-blocking communicators) is
// waited out here, polling ncclCommGetAsyncError, so the client sees a call that has finished.
#pragma once

#include <string>

#include "server/dispatch.h"

namespace rgpu::server::nccl {

// The library sessions load (rgpu-server's --nccl; empty: the default search).
void set_library(const std::string& path);
// The handler of an NCCL op, nullptr for others.
Handler find_handler(uint16_t op);

}  // namespace rgpu::server::nccl
