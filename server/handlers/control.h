// Handlers for control ops that are not CUDA entry points (protocol/messages.h).
#pragma once

#include <memory>

#include "protocol/tls.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {

// kOpSnapshot: initialises the driver (cuInit runs here, in the session's process only) and
// answers protocol/snapshot.h.
void snapshot(Dispatch& d);
// kOpModuleByHash: loads an image from the server's module cache (server/module_cache.h) by its
// SHA-256 and binds it to the client's id; CUDA_ERROR_NOT_FOUND when the cache lacks it.
void module_by_hash(Dispatch& d);
// kOpParamLayout: a kernel's or function's parameters, all at once.
void param_layout(Dispatch& d);
// kOpFuncAttributes: every attribute of a kernel or function, all at once.
void func_attributes(Dispatch& d);
// kOpAllocAhead: cuMemAlloc_v2 and further allocations of the same size (client/device_memory.h).
void alloc_ahead(Dispatch& d);
// kOpAllocMany: the allocations a run is expected to ask for, at once (client/device_memory.h).
void alloc_many(Dispatch& d);
// kOpHandleSpace: the number this server has among the client's servers (protocol/messages.h).
void handle_space(Dispatch& d);
// kOpClusterOccupancyTable: cluster occupancy for a run of cluster widths (library.cpp).
void cluster_occupancy_table(Dispatch& d);
// kOpToolsContextObject, kOpModuleFunctions: export-table slots run on the driver's own tables
// (server/handlers/dark_api.cpp).
void tools_context_object(Dispatch& d);
void module_functions(Dispatch& d);
// kOpClusterTopology: CUBLASLT_1734DC26 slot 4's bytes for a context (server/handlers/dark_api.cpp).
void cluster_topology(Dispatch& d);
// kOpExportTableInfo: whether the server's driver has an export table, and its first word.
void export_table_info(Dispatch& d);
// kOpSessions: the server's live sessions (implemented in server/session.cpp, which knows where
// they are listed).
void sessions(Dispatch& d);
// kOpSessionControl: rgpu-smi suspend, resume, migrate (server/session_control.cpp).
void session_control(Dispatch& d);
// kOpPeerTicket, kOpPeerSend, kOpPeerReceive, kOpPeerCancel: copies between two servers' devices, straight from
// server to server (server/handlers/peer_copy.cpp). peer_copy_setup runs once, before the first
// call: where the session's client reached it (links are listened for there) and, when the session
// runs over TLS, the server's TLS context (links then run TLS too); nullptr: plain TCP.
void peer_copy_setup(int client_fd, std::shared_ptr<proto::TlsContext> tls);
void peer_ticket(Dispatch& d);
void peer_send(Dispatch& d);
void peer_receive(Dispatch& d);
// kOpPeerCancel: the client's word that A failed copy N without reaching B. Session::read_loop
// hands it here itself (the worker that would run it waits in the copy's receive): false when the
// payload is malformed. peer_cancel(Dispatch&) is the same for a frame that reaches dispatch.
bool peer_cancel(const uint8_t* payload, size_t n);
void peer_cancel(Dispatch& d);
// (Which op each of these answers: server/dispatch.cpp.)

}  // namespace rgpu::server::handlers
