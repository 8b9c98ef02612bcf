// Host functions of graph host nodes (client/driver/graph.cpp), run through the host-callback
// machinery of client/driver/host_callback.cpp (protocol/messages.h, kOpCallback). Unlike a
// stream callback, which runs once, a host node's id runs at every launch of every instance of
// its graph, so the id is kept until the process ends.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace rgpu::client {

// Registers fn(user) under a fresh callback id; 0 when there is no connection.
uint64_t register_host_node(CUhostFn fn, void* user);
// Forgets an id that the server never accepted.
void forget_host_node(uint64_t id);
// The function of a registered id; false for an unknown one.
bool host_node(uint64_t id, CUhostFn* fn, void** user);
// Announces n host-node callbacks to come (call before sending the launch that causes them), to
// the connection of the server that holds graph instance `exec`.
void expect_host_callbacks(uint64_t n, const void* exec);

}  // namespace rgpu::client
