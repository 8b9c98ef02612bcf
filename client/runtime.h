// The client's process-wide state: the connection made by cuInit, the device snapshot, the
// client thread id, tracing. Everything hand-written in client/driver/ reaches the server
// through this and client/call.h.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/connection.h"
#include "protocol/snapshot.h"

namespace rgpu::client {

// Connects (once) and fetches the snapshot. Returns the cached result on later calls: the
// server's own cuInit result, or CUDA_ERROR_DEVICE_UNAVAILABLE when the server cannot be reached
// or refuses us (with one error line saying why and what to do).
CUresult init(unsigned flags);
// The first server's connection (the only one unless RGPU_SERVER lists several), or nullptr
// before a successful init().
Connection* connection();
// Server `server`'s connection (RGPU_SERVER's order from 0), or nullptr for no such server.
Connection* connection(int server);
// Every server's connection, by number; empty before a successful init().
const std::vector<Connection*>& connections();
// What a call answers without a connection: CUDA_ERROR_NOT_INITIALIZED before cuInit has been
// tried, CUDA_ERROR_DEVICE_UNAVAILABLE after it failed.
CUresult no_connection_result();
// Valid after a successful init(). Its devices are the visible ones, by client ordinal
// (CUDA_VISIBLE_DEVICES applied; server_device() maps an ordinal to the server's).
const proto::Snapshot& snapshot();
// The snapshot's entry for a client device ordinal, or nullptr when there is no such device.
const proto::DeviceInfo* device_info(CUdevice client_ordinal);
// This thread's id on the wire (small, stable for the thread's life).
uint32_t thread_id();
// False when RGPU_BATCH=0: every call then waits for its reply.
bool batching();

// The architecture (e.g. 90 for compute capability 9.0) whose code the driver will load from a
// fatbin: that of the current context's device, else of device 0; 0 before cuInit.
uint32_t image_arch();

// RGPU_TRACE: a failed call's result on its own trace line, so a trace shows which call failed
// and how (deferred: the error of an earlier one-way call, reported with this reply).
void trace_result(uint16_t op, CUresult rc, bool deferred);

// Call statistics, for RGPU_STATS (client/stats.h): one call of op; wait_us is how long a
// waiting call blocked for its reply. A null-pointer check when RGPU_STATS is unset.
void count_call(uint16_t op, bool waited, uint64_t wait_us = 0);

}  // namespace rgpu::client
