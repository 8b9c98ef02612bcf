// The door from rgpu's libnccl.so.2 into libcuda.so.1 (both client/): the NCCL shim sends its
// calls over the CUDA shim's own connections, so the device pointers, streams and context an NCCL
// call names are those of the session that holds them (docs/design.md §6, "NCCL"). These are the
// only names besides cu* that libcuda.so.1 exports for it (client/exports.map); both libraries are
// built together, so the interface is not versioned.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Sends one NCCL op (protocol/wire/nccl.h) to server `server` (-1: the server of this thread's
// current context). `stream` is the client stream handle the call queues work on (~0: none).
// One-way (oneway = 1, with batching on): returns CUDA_SUCCESS once queued and sets *reply_len to
// 0. Otherwise waits and copies the reply after the CUresult (NcclReply and what follows) into
// reply, at most cap bytes, setting *reply_len. Returns a CUresult: the connection's, never NCCL's.
int rgpu_nccl_call(uint16_t op, int server, int oneway, uint64_t stream, const void* args, size_t args_len,
                   void* reply, size_t cap, size_t* reply_len);
// The server of this thread's current context (0 when none is current, or one server).
int rgpu_nccl_current_server(void);
// The server of a handle id (client/call.h handle_server): -1 for NULL and the special streams.
int rgpu_nccl_handle_server(uint64_t id);
// A client device ordinal's server and the server's ordinal for it (-1 for no such device), and
// back (-1 for a device the client cannot see).
int rgpu_nccl_device_server(int client_ordinal);
int rgpu_nccl_server_device(int client_ordinal);
int rgpu_nccl_client_device(int server_ordinal, int server);
// How many servers RGPU_SERVER lists (after cuInit).
int rgpu_nccl_servers(void);
}
