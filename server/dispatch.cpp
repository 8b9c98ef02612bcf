// server/dispatch.h's find_handler: the one place that says which handler answers an op. The
// session (server/session.cpp) makes one lookup per call, and the dispatch fuzzer
// (tests/fuzz/dispatch_fuzz.cpp) feeds every op this accepts.
//
// In order: NVML ops (from kFirstNvmlOp, server/nvml/), NCCL ops (from kFirstNcclOp,
// server/nccl/), the hand-written rows below (control ops,
// mapped memory, the CUDA calls whose generated handler needs a step of the session's first),
// then the generated handlers of CUDA calls (gen/server_dispatch.gen.cpp, which also lists the
// `custom` ones in server/handlers/).
#include "server/dispatch.h"

#include <vector>

#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/nccl.h"
#include "server/handlers/control.h"
#include "server/mapped_memory.h"
#include "server/nccl/nccl_server.h"
#include "server/nvml/nvml_server.h"

namespace rgpu::server {
namespace {

// Mapped host and managed memory (server/mapped_memory.h), kept by the session.
template <void (*run)(Dispatch&, MappedMemory&)>
void mapped(Dispatch& d) {
  if (!d.mapped) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);  // no session (a pushed snapshot)
  run(d, *d.mapped);
}
void mapped_alloc(Dispatch& d, MappedMemory& m) { m.alloc(d.drv, d.args, d.reply); }
void managed_alloc(Dispatch& d, MappedMemory& m) { m.managed_alloc(d.drv, d.args, d.reply); }
void mapped_free(Dispatch& d, MappedMemory& m) { m.free(d.drv, d.args, d.reply); }
void mapped_write(Dispatch& d, MappedMemory& m) { m.write(d.args, d.reply); }
void mapped_copy(Dispatch& d, MappedMemory& m) { m.copy(d.drv, d.handles, d.args, d.reply); }

// cuMemFree_v2: when the address is a managed buffer's, its mirror ends on both ends before the
// driver frees it (MappedMemory::forget_managed); then the generated handler frees it. When the
// client cannot be told (its connection is gone) nothing is answered, and the session ends.
void mem_free(Dispatch& d) {
  if (d.mapped && !d.mapped->empty()) {
    Reader peek = d.args;  // the generated handler reads the arguments again
    const uint64_t address = peek.u64();
    auto send = [&d](const std::vector<uint8_t>& payload) {
      return !d.callbacks ||
             d.callbacks->send_frame(proto::kOpMappedUpdate, payload.data(), payload.size(), nullptr, 0);
    };
    if (peek.ok() && !d.mapped->forget_managed(address, send)) return;
  }
  find_generated_handler(op::cuMemFree_v2)(d);
}

struct Row {
  uint16_t op;
  const char* name;  // for log lines (CUDA calls have theirs in gen/ops.gen.h)
  Handler handler;
};

// Every op below kFirstCudaOp the server answers, and the CUDA calls whose handler is not the
// generated one.
constexpr Row kRows[] = {
    {proto::kOpSnapshot, "snapshot", handlers::snapshot},
    {proto::kOpSessions, "sessions", handlers::sessions},
    {proto::kOpSessionControl, "session control", handlers::session_control},
    {proto::kOpModuleByHash, "module by hash", handlers::module_by_hash},
    {proto::kOpToolsContextObject, "tools context object", handlers::tools_context_object},
    {proto::kOpModuleFunctions, "module functions", handlers::module_functions},
    {proto::kOpClusterTopology, "cluster topology", handlers::cluster_topology},
    {proto::kOpExportTableInfo, "export table info", handlers::export_table_info},
    {proto::kOpParamLayout, "parameter layout", handlers::param_layout},
    {proto::kOpFuncAttributes, "function attributes", handlers::func_attributes},
    {proto::kOpClusterOccupancyTable, "cluster occupancy table", handlers::cluster_occupancy_table},
    {proto::kOpAllocAhead, "alloc ahead", handlers::alloc_ahead},
    {proto::kOpAllocMany, "alloc many", handlers::alloc_many},
    {proto::kOpHandleSpace, "handle space", handlers::handle_space},
    {proto::kOpPeerTicket, "peer ticket", handlers::peer_ticket},
    {proto::kOpPeerSend, "peer send", handlers::peer_send},
    {proto::kOpPeerReceive, "peer receive", handlers::peer_receive},
    {proto::kOpPeerCancel, "peer cancel", handlers::peer_cancel},
    {proto::kOpMappedAlloc, "mapped alloc", mapped<mapped_alloc>},
    {proto::kOpManagedAlloc, "managed alloc", mapped<managed_alloc>},
    {proto::kOpMappedFree, "mapped free", mapped<mapped_free>},
    {proto::kOpMappedWrite, "mapped write", mapped<mapped_write>},
    {proto::kOpMappedCopy, "mapped copy", mapped<mapped_copy>},
    {op::cuMemFree_v2, "cuMemFree_v2", mem_free},
};

const Row* row(uint16_t op) {
  for (const Row& r : kRows)
    if (r.op == op) return &r;
  return nullptr;
}

}  // namespace

Handler find_handler(uint16_t op) {
  if (op >= proto::kFirstNvmlOp) return nvml::find_handler(op);
  if (op >= proto::kFirstNcclOp) return nccl::find_handler(op);
  if (const Row* r = row(op)) return r->handler;
  return find_generated_handler(op);
}

const char* op_name(uint16_t op) {
  if (op >= proto::kFirstNvmlOp) return nvml::op_name(op);
  if (op >= proto::kFirstNcclOp) return proto::wire::nccl_op_name(op);
  if (const Row* r = row(op)) return r->name;
  return op::name(op);
}

}  // namespace rgpu::server
