// CUDA graphs on the wire: node parameters (NodeParams) for every cuGraphAdd*Node, node
// parameter getter and setter, dependency lists, node arrays, dependency edits and
// cuGraphExecUpdate_v2. Used by the client's encoder (client/driver/graph.cpp) and the server's
// decoder (server/handlers/graph.cpp); stream capture's dependency lists are NodeLists too
// (protocol/wire/capture.h).
//
// Handles travel as the client's ids (streams, events, graphs, nodes, functions, kernels,
// contexts, arrays): the decoded structs below hold ids where the CUDA structs hold handles, and
// the server resolves each through its handle map. Host pointers never travel.
//
// Layout:
//  NodeList:   u64 n (at most kMaxNodes), n × u64 node, u8 has_edges, (has_edges) n × CUgraphEdgeData
//  NodeParams: u32 type, then by type
//    KERNEL       u64 func, u64 kern, u64 ctx, u32 grid x y z, block x y z, shared bytes, LaunchArgs
//                 (protocol/wire/launch.h)
//    MEMCPY       u64 ctx, CUDA_MEMCPY3D (host pointers 0, arrays as ids; the client rewrites a host
//                 side to a device pointer first: its mapped copy or a staging buffer)
//    MEMSET       u64 ctx, u64 dst, u64 pitch, u32 value, u32 elementSize, u64 width, u64 height
//    HOST         u64 callback id (the function runs in the client process)
//    GRAPH        u64 graph, u32 ownership
//    WAIT_EVENT, EVENT_RECORD   u64 event
//    MEM_ALLOC    CUmemPoolProps (Windows pointer 0), u32 n (at most kMaxAccessDescs),
//                 n × CUmemAccessDesc, u64 bytesize, u64 dptr (an output when adding: sent as 0)
//    MEM_FREE     u64 dptr
//    CONDITIONAL  u64 handle, u32 type, u32 size (at most kMaxBodies), u64 ctx
//    EMPTY        nothing
//    Other types (external semaphores, batched memory operations) do not travel.
//  cuGraphAdd*Node, cuGraphAddNode(_v2): u64 new node id (minted by the client), u64 graph,
//    NodeList (edges only for cuGraphAddNode_v2), NodeParams.
//    Reply: CUresult, then MEM_ALLOC: u64 dptr; CONDITIONAL: u32 n, n × u64 body graph ids.
//  cuGraph*NodeSetParams, cuGraphNodeSetParams: u64 node, NodeParams. Reply: CUresult.
//  cuGraphExec*NodeSetParams, cuGraphExecNodeSetParams: u64 exec, u64 node, NodeParams.
//  cuGraph{Kernel,Memcpy,Host,MemAlloc}NodeGetParams: u64 node. Reply: CUresult, NodeParams.
//  Node arrays (cuGraphGetNodes, GetRootNodes, NodeGetDependencies, NodeGetDependentNodes,
//    GetEdges; _v2 with edge data): u64 graph or node, u8 want_nodes, u8 want_edges,
//    u64 capacity (at most kMaxNodes). Reply: CUresult, u64 count, then (want_nodes) capacity ×
//    u64 ids (GetEdges: capacity from ids, then capacity to ids), (want_edges) capacity ×
//    CUgraphEdgeData. Capacity, not count: the driver's count rules stay the driver's.
//  cuGraphAddDependencies, cuGraphRemoveDependencies (_v2): u64 graph, u64 n (at most
//    kMaxNodes), n × u64 from, n × u64 to, u8 has_edges, (has_edges) n × CUgraphEdgeData.
//    Reply: CUresult.
//  cuGraphExecUpdate_v2: u64 exec, u64 graph. Reply: CUresult, u32 result, u64 error node,
//    u64 error-from node (whatever the CUresult).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/launch.h"

namespace rgpu::proto::wire {

inline constexpr uint64_t kMaxNodes = 1 << 20;     // in one array
inline constexpr uint32_t kMaxAccessDescs = 1024;  // of one allocation node
inline constexpr uint32_t kMaxBodies = 1 << 16;    // of one conditional node

// NodeList. nodes are ids (a client's CUgraphNode is its id).
void put_node_list(Writer& w, const CUgraphNode* nodes, const CUgraphEdgeData* edges, size_t n);
struct NodeList {
  std::vector<uint64_t> nodes;
  bool has_edges = false;
  std::vector<CUgraphEdgeData> edges;  // n of them when has_edges
};
bool read_node_list(Reader& r, NodeList* out);

// NodeParams, everything but a kernel node's LaunchArgs, which the caller appends right after
// (put_packed_args or put_extra_args): each side packs them by its own layout. p's handles are
// ids; host_callback is a HOST node's callback id. Writes at most kMaxAccessDescs descriptors
// (callers refuse more first).
void put_node_params(Writer& w, const CUgraphNodeParams& p, uint64_t host_callback = 0);
// Decoded NodeParams: p's handles are ids, its pointers point into this struct (MEM_ALLOC's
// access descriptors) or are null (KERNEL's arguments: bind args, then point p at them; HOST's
// function: the callback id is in host_callback). Not copyable (args).
struct NodeParams {
  CUgraphNodeParams p{};
  uint64_t host_callback = 0;
  KernelArgs args;
  std::vector<CUmemAccessDesc> descs;
};
// False when malformed: an unknown type or enum value, a count over its limit, too few bytes.
bool read_node_params(Reader& r, NodeParams* out);

// cuGraphAdd*Node: the head, then put_node_params (and a kernel's LaunchArgs).
void put_add_node_head(Writer& w, uint64_t node, uint64_t graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                       size_t n);
struct AddNode {
  uint64_t node = 0, graph = 0;
  NodeList deps;
  NodeParams params;
};
bool read_add_node(Reader& r, AddNode* out);
// Its reply after the CUresult: what the driver wrote back into the parameters.
void put_add_node_reply(Writer& w, CUgraphNodeType type, CUdeviceptr dptr, const std::vector<uint64_t>& bodies);
struct AddNodeReply {
  CUdeviceptr dptr = 0;          // MEM_ALLOC
  std::vector<uint64_t> bodies;  // CONDITIONAL: the body graphs' ids
};
bool read_add_node_reply(Reader& r, CUgraphNodeType type, AddNodeReply* out);

// cuGraph(Exec)*NodeSetParams: the head (exec only when in_exec), then put_node_params.
void put_set_params_head(Writer& w, bool in_exec, uint64_t exec, uint64_t node);
struct SetParams {
  uint64_t exec = 0, node = 0;
  NodeParams params;
};
bool read_set_params(Reader& r, bool in_exec, SetParams* out);

// cuGraph*NodeGetParams: the node; the reply is NodeParams (put_node_params, read_node_params).
void put_get_params(Writer& w, uint64_t node);
bool read_get_params(Reader& r, uint64_t* node);

// Node arrays.
struct NodeArrayAsk {
  uint64_t handle = 0;  // graph or node
  bool want_nodes = false, want_edges = false;
  uint64_t capacity = 0;
};
void put_node_array_ask(Writer& w, const NodeArrayAsk& a);
bool read_node_array_ask(Reader& r, NodeArrayAsk* out);
struct NodeArray {
  uint64_t count = 0;
  std::vector<uint64_t> from, to;  // capacity each when asked (to: GetEdges only)
  std::vector<CUgraphEdgeData> edges;
};
// edges_form: cuGraphGetEdges(_v2), whose nodes come as from and to arrays.
void put_node_array(Writer& w, const NodeArrayAsk& a, bool edges_form, const NodeArray& v);
bool read_node_array(Reader& r, const NodeArrayAsk& a, bool edges_form, NodeArray* out);

// cuGraphAddDependencies, cuGraphRemoveDependencies (_v2).
void put_dependency_change(Writer& w, uint64_t graph, const CUgraphNode* from, const CUgraphNode* to,
                           const CUgraphEdgeData* edges, size_t n);
struct DependencyChange {
  uint64_t graph = 0;
  std::vector<uint64_t> from, to;
  bool has_edges = false;
  std::vector<CUgraphEdgeData> edges;
};
bool read_dependency_change(Reader& r, DependencyChange* out);

// cuGraphExecUpdate_v2: the request, and its reply after the CUresult.
void put_exec_update(Writer& w, uint64_t exec, uint64_t graph);
bool read_exec_update(Reader& r, uint64_t* exec, uint64_t* graph);
struct ExecUpdateResult {
  uint32_t result = 0;  // CUgraphExecUpdateResult
  uint64_t error_node = 0, error_from_node = 0;
};
void put_exec_update_result(Writer& w, const ExecUpdateResult& v);
bool read_exec_update_result(Reader& r, ExecUpdateResult* out);

// The legacy node structs and CUgraphNodeParams, both ways: every entry point's parameters travel
// as NodeParams, so each side converts the legacy struct its caller or its driver uses.
template <class K>  // CUDA_KERNEL_NODE_PARAMS_v1 or CUDA_KERNEL_NODE_PARAMS (v2, with kern and ctx)
CUgraphNodeParams from_kernel(const K& k) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = k.func;
  p.kernel.gridDimX = k.gridDimX, p.kernel.gridDimY = k.gridDimY, p.kernel.gridDimZ = k.gridDimZ;
  p.kernel.blockDimX = k.blockDimX, p.kernel.blockDimY = k.blockDimY, p.kernel.blockDimZ = k.blockDimZ;
  p.kernel.sharedMemBytes = k.sharedMemBytes;
  p.kernel.kernelParams = k.kernelParams;
  p.kernel.extra = k.extra;
  if constexpr (requires { k.kern; }) {
    p.kernel.kern = k.kern;
    p.kernel.ctx = k.ctx;
  }
  return p;
}
template <class K>
void to_kernel(const CUgraphNodeParams& p, K* k) {
  k->func = p.kernel.func;
  k->gridDimX = p.kernel.gridDimX, k->gridDimY = p.kernel.gridDimY, k->gridDimZ = p.kernel.gridDimZ;
  k->blockDimX = p.kernel.blockDimX, k->blockDimY = p.kernel.blockDimY, k->blockDimZ = p.kernel.blockDimZ;
  k->sharedMemBytes = p.kernel.sharedMemBytes;
  k->kernelParams = p.kernel.kernelParams;
  k->extra = p.kernel.extra;
  if constexpr (requires { k->kern; }) {
    k->kern = p.kernel.kern;
    k->ctx = p.kernel.ctx;
  }
}
CUgraphNodeParams from_copy(const CUDA_MEMCPY3D& c, CUcontext ctx);
CUgraphNodeParams from_memset(const CUDA_MEMSET_NODE_PARAMS& m, CUcontext ctx);
CUDA_MEMSET_NODE_PARAMS to_memset(const CUgraphNodeParams& p);
CUgraphNodeParams from_host(const CUDA_HOST_NODE_PARAMS& h);
CUDA_HOST_NODE_PARAMS to_host(const CUgraphNodeParams& p);
CUgraphNodeParams from_alloc(const CUDA_MEM_ALLOC_NODE_PARAMS& a);
CUDA_MEM_ALLOC_NODE_PARAMS to_alloc(const CUgraphNodeParams& p);

}  // namespace rgpu::proto::wire
