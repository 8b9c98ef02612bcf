// CUDA graph nodes: cuGraphAdd*Node and cuGraphAddNode(_v2), node parameters (get, set, set in
// an instance), topology queries and edits, cuGraphExecUpdate_v2, and the client's side of
// instantiation and launch. Node handles are minted here and bound by the server; node arrays
// travel as ids. Every entry point's parameters travel in one encoding (NodeParams below): the
// legacy calls are converted to CUgraphNodeParams here, and the server calls the driver's entry
// point of the same name with the legacy struct rebuilt (server/handlers/graph.cpp).
//
// What runs where:
//  - Kernel nodes: arguments are packed with the launch path's layout
//    (client/driver/launch_args.h). cuGraphKernelNodeGetParams returns pointers into storage kept
//    here per node, as the driver returns pointers into its own.
//  - Memcpy nodes: device and array endpoints go as they are. A host endpoint names this
//    process's memory, which the server's driver cannot reach at launch time; two cases:
//     - mapped host memory (DEVICEMAP, client/mapped_memory.h) has a server copy kept in step at
//       call boundaries (pushed before each cuGraphLaunch, pulled before a synchronizing reply):
//       the node names that copy's device pointer.
//     - any other host memory (pinned without DEVICEMAP, pageable, the stack): the node copies
//       to or from a device staging buffer of the host side's shape, allocated here once per
//       node, and the client moves the host bytes in stream order around each cuGraphLaunch of
//       an instance: host → staging before the launch, staging → host after it. Known limits,
//       where the order differs from the driver's: a host node (or host-side work) of the same
//       launch that reads what such a D2H node wrote sees it only after the graph; one that
//       writes what such an H2D node reads is not seen; a staged node in a conditional body moves
//       its bytes once per launch, not once per run of the body (a body's transfers are
//       listed in the graph holding its conditional node too). Staging buffers live until the
//       process ends (a clone or an instance may still name them after the node is destroyed).
//       Host copies captured from a stream use the same bookkeeping
//       (client/driver/stream_capture.h, note_graph_transfer). cuGraphDestroy forgets a graph's
//       lists: its id may come back.
//    Host to host nodes are refused with CUDA_ERROR_NOT_SUPPORTED and a line naming the call.
//  - Host nodes: the function runs in this process, in graph order, through the host-callback
//    machinery (client/driver/host_nodes.h). Host nodes are counted per graph (child graphs
//    included) and per instance, so that each cuGraphLaunch announces the callbacks it brings: a
//    program may spin on a flag its host node sets. Instances of captured or cloned graphs count
//    none; their callbacks still run, read by the next call that waits.
//  - Conditional nodes: the body graphs the driver creates come back as server-named ids, kept
//    here per node as the CUDA-owned array phGraph_out points at.
// Adding a node waits for its reply, unlike cuEventCreate: a graph is built once and launched
// many times, and a program checks each add's result (a kernel node's arguments, a bad
// dependency) where it made the call. cuGraphLaunch is one-way, like a kernel launch.
//
// The wire layout of every call here is protocol/wire/graph.h.
#include <cuda.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/call.h"
#include "client/driver/host_memory.h"
#include "client/driver/host_nodes.h"
#include "client/driver/launch_args.h"
#include "client/driver/stream_capture.h"
#include "client/mapped_memory.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/graph.h"

namespace {

using rgpu::Reader;
using rgpu::Writer;
using rgpu::client::Call;
using rgpu::client::handle_from;
using rgpu::client::handle_id;
using rgpu::client::is_device;
namespace op = rgpu::op;

namespace wire = rgpu::proto::wire;
using wire::from_copy;
using wire::from_host;
using wire::from_kernel;
using wire::from_memset;
using wire::kMaxAccessDescs;
using wire::kMaxBodies;
using wire::kMaxNodes;
using wire::to_kernel;

// What the driver would own on the caller's behalf, per node: arguments read back, conditional
// bodies, access descriptors read back.
struct NodeStore {
  std::unique_ptr<wire::NodeParams> read;  // the parameters last read back
  std::vector<CUgraph> bodies;
};

// A memcpy node's host side staged through device memory: `transfer` moves the bytes between
// this process's memory and the staging buffer, with the host side's shape, around each launch.
struct HostTransfer {
  uint64_t node = 0;
  bool to_device = false;  // host → staging before the launch; else staging → host after it
  CUDA_MEMCPY3D transfer{};
};

struct State {
  std::mutex mu;
  std::unordered_map<uint64_t, std::vector<HostTransfer>> graph_transfers;  // graph id → transfers in it
  std::unordered_map<uint64_t, std::vector<HostTransfer>> exec_transfers;   // instance id → transfers
  std::unordered_map<uint64_t, uint64_t> memcpy_node_graph;                 // memcpy node id → its graph
  std::unordered_map<uint64_t, uint64_t> body_parent;  // conditional body graph id → the graph holding the node
  std::unordered_map<uint64_t, std::unique_ptr<NodeStore>> stores;  // node id → storage
  std::unordered_map<uint64_t, uint64_t> graph_hosts;                // graph id → host nodes in it
  std::unordered_map<uint64_t, uint64_t> exec_hosts;                 // instance id → host nodes
  std::unordered_map<uint64_t, uint64_t> host_node_graph;            // host node id → its graph
};
// Leaked on purpose: programs call the driver from exit handlers, after static destructors.
State& state() {
  static auto* s = new State;
  return *s;
}

NodeStore* store_for(uint64_t node, bool fresh) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& p = s.stores[node];
  if (!p || fresh) p = std::make_unique<NodeStore>();
  return p.get();
}

CUresult refuse_host_to_host(const char* name) {
  rgpu::log::error(
      "%s: a graph memcpy node from host memory to host memory is not supported by rgpu: the GPU server cannot "
      "reach this process's memory (copy with memcpy in a host node instead); returning CUDA_ERROR_NOT_SUPPORTED",
      name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// One side of a CUDA_MEMCPY3D, by reference, to rewrite it in place.
struct SideRef {
  size_t& x;
  size_t& y;
  size_t& z;
  CUmemorytype& type;
  void*& host;
  CUdeviceptr& dev;
  size_t& pitch;
  size_t& height;
};
SideRef src_of(CUDA_MEMCPY3D& c) {
  return {c.srcXInBytes, c.srcY,      c.srcZ,     c.srcMemoryType, *const_cast<void**>(&c.srcHost),
          c.srcDevice,  c.srcPitch, c.srcHeight};
}
SideRef dst_of(CUDA_MEMCPY3D& c) {
  return {c.dstXInBytes, c.dstY, c.dstZ, c.dstMemoryType, c.dstHost, c.dstDevice, c.dstPitch, c.dstHeight};
}

// The host address a side names, or null when the side is device memory (or an array).
const void* host_address(const SideRef& s) {
  if (s.type == CU_MEMORYTYPE_HOST) return s.host;
  if (s.type == CU_MEMORYTYPE_UNIFIED && !is_device(s.dev)) return reinterpret_cast<const void*>(s.dev);
  return nullptr;
}

// Bytes from the side's base address to the end of what the copy touches; 0 on overflow.
size_t side_span(const SideRef& s, const CUDA_MEMCPY3D& c) {
  size_t pitch = s.pitch ? s.pitch : c.WidthInBytes, height = s.height ? s.height : c.Height;
  size_t h = c.Height ? c.Height : 1, d = c.Depth ? c.Depth : 1;
  __uint128_t end = __uint128_t(s.x) + __uint128_t(s.y) * pitch + __uint128_t(s.z) * pitch * height +
                    __uint128_t(d - 1) * pitch * height + __uint128_t(h - 1) * pitch + c.WidthInBytes;
  return end > (__uint128_t(1) << 48) ? 0 : static_cast<size_t>(end);
}

// Rewrites a host side to name device memory: the mapped copy's device pointer, or a fresh
// staging buffer of the same shape (*t then says how to move the bytes around each launch).
CUresult rewrite_host_side(const char* name, CUDA_MEMCPY3D& c, bool is_src, HostTransfer* t) {
  SideRef s = is_src ? src_of(c) : dst_of(c);
  const void* host = host_address(s);
  size_t span = side_span(s, c);
  if (!span) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr mirror = 0;
  if (rgpu::client::mapped::active() && rgpu::client::mapped::contains(host, span) &&
      rgpu::client::mapped::device_pointer(host, &mirror)) {
    s.type = CU_MEMORYTYPE_UNIFIED;
    s.host = nullptr;
    s.dev = mirror;
    return CUDA_SUCCESS;
  }
  CUdeviceptr staging = 0;
  if (CUresult rc = cuMemAlloc_v2(&staging, span)) {
    rgpu::log::error("%s: no device memory for the staging buffer (%zu bytes) of a memcpy node's host side", name,
                     span);
    return rc;
  }
  // The transfer: the node's copy with its device side replaced by the staging buffer, laid out
  // as the host side.
  CUDA_MEMCPY3D x = c;
  SideRef host_side = is_src ? src_of(x) : dst_of(x);
  SideRef stage_side = is_src ? dst_of(x) : src_of(x);
  host_side.type = CU_MEMORYTYPE_HOST;
  host_side.host = const_cast<void*>(host);
  host_side.dev = 0;
  stage_side.type = CU_MEMORYTYPE_DEVICE;
  stage_side.host = nullptr;
  stage_side.dev = staging;
  stage_side.x = host_side.x, stage_side.y = host_side.y, stage_side.z = host_side.z;
  stage_side.pitch = host_side.pitch, stage_side.height = host_side.height;
  *t = HostTransfer{0, is_src, x};
  s.type = CU_MEMORYTYPE_DEVICE;
  s.host = nullptr;
  s.dev = staging;
  return CUDA_SUCCESS;
}

// Rewrites a host side of a CUDA_MEMCPY3D in *c (rewrite_host_side), its transfer in *t
// (t->transfer.WidthInBytes == 0 when there is none). Host pointers are never sent.
CUresult rewrite_copy(const char* name, CUDA_MEMCPY3D* out, HostTransfer* t) {
  CUDA_MEMCPY3D& c = *out;
  for (CUmemorytype type : {c.srcMemoryType, c.dstMemoryType}) {
    if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_ARRAY &&
        type != CU_MEMORYTYPE_UNIFIED)
      return CUDA_ERROR_INVALID_VALUE;
  }
  bool src_host = host_address(src_of(c)) != nullptr, dst_host = host_address(dst_of(c)) != nullptr;
  if (src_host && dst_host) return refuse_host_to_host(name);
  if (c.WidthInBytes && (src_host || dst_host)) {
    if (CUresult rc = rewrite_host_side(name, c, src_host, t)) return rc;
  }
  return CUDA_SUCCESS;
}

void map_location(CUmemLocation* l, bool to_server) {
  if (l->type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  l->id = to_server ? rgpu::client::server_device(l->id) : rgpu::client::client_device(l->id);
}

// Appends NodeParams (and a kernel's LaunchArgs) after the checks the driver makes on the
// caller's side. A host node's function is registered under *host_id (forget it if the call
// fails); a memcpy node's staged host side is described in *t. Client handles are ids already.
CUresult put_params(Writer& w, const char* name, const CUgraphNodeParams& in, uint64_t* host_id, HostTransfer* t) {
  CUgraphNodeParams p = in;
  std::vector<CUmemAccessDesc> descs;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const auto& k = p.kernel;
      CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
      if (!f) return CUDA_ERROR_INVALID_VALUE;
      wire::put_node_params(w, p);
      return rgpu::client::put_launch_args(w, f, k.kernelParams, k.extra);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p.memcpy.flags || p.memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
      if (CUresult rc = rewrite_copy(name, &p.memcpy.copyParams, t)) return rc;
      break;
    case CU_GRAPH_NODE_TYPE_HOST: {
      if (!p.host.fn) return CUDA_ERROR_INVALID_VALUE;
      uint64_t id = rgpu::client::register_host_node(p.host.fn, p.host.userData);
      if (!id) return CUDA_ERROR_NOT_INITIALIZED;
      *host_id = id;
      wire::put_node_params(w, p, id);
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      auto& a = p.alloc;
      if (a.poolProps.win32SecurityAttributes) return CUDA_ERROR_INVALID_VALUE;  // Windows only
      if (a.accessDescCount && !a.accessDescs) return CUDA_ERROR_INVALID_VALUE;
      if (a.accessDescCount > kMaxAccessDescs) return CUDA_ERROR_INVALID_VALUE;
      map_location(&a.poolProps.location, true);
      descs.assign(a.accessDescs, a.accessDescs + a.accessDescCount);
      for (auto& d : descs) map_location(&d.location, true);
      a.accessDescs = descs.empty() ? nullptr : descs.data();
      a.dptr = 0;  // an output
      break;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      if (p.conditional.size > kMaxBodies) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;
    default:
      rgpu::log::error("%s: graph node type %d is not supported by rgpu yet; returning CUDA_ERROR_NOT_SUPPORTED",
                       name, static_cast<int>(p.type));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  wire::put_node_params(w, p);
  return CUDA_SUCCESS;
}

// Reads NodeParams as the server encodes a node's parameters; storage the result points at is
// kept per node.
CUresult read_params(Reader& r, uint64_t node, CUgraphNodeParams* p) {
  auto got = std::make_unique<wire::NodeParams>();
  if (!wire::read_node_params(r, got.get())) return CUDA_ERROR_UNKNOWN;
  *p = got->p;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      got->args.own();
      if (!got->args.bind()) return CUDA_ERROR_UNKNOWN;
      p->kernel.kernelParams = got->args.params();
      p->kernel.extra = got->args.extras();
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      break;
    case CU_GRAPH_NODE_TYPE_HOST: {
      uint64_t id = got->host_callback;
      p->host = {};
      if (id && !rgpu::client::host_node(id, &p->host.fn, &p->host.userData)) {
        rgpu::log::warn("host node %llu names a callback this process never registered",
                        static_cast<unsigned long long>(id));
      }
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      map_location(&p->alloc.poolProps.location, false);
      for (auto& d : got->descs) map_location(&d.location, false);
      break;
    default:
      return CUDA_ERROR_UNKNOWN;  // the server encodes only the types above
  }
  store_for(node, false)->read = std::move(got);
  return CUDA_SUCCESS;
}

void count_host_node(uint64_t graph, uint64_t node) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.graph_hosts[graph];
  s.host_node_graph[node] = graph;
}

// A child graph node embeds a copy of the child: its host nodes and staged transfers come along.
void count_child(uint64_t graph, uint64_t child) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.graph_hosts.find(child);
  if (it != s.graph_hosts.end()) s.graph_hosts[graph] += it->second;
  auto t = s.graph_transfers.find(child);
  if (t != s.graph_transfers.end()) {
    std::vector<HostTransfer> copy = t->second;
    auto& list = s.graph_transfers[graph];
    list.insert(list.end(), copy.begin(), copy.end());
  }
}

uint64_t hosts_of_graph(uint64_t graph) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.graph_hosts.find(graph);
  return it == s.graph_hosts.end() ? 0 : it->second;
}

void note_instance(CUgraphExec exec, CUgraph graph) {
  uint64_t n = hosts_of_graph(handle_id(graph));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.exec_hosts[handle_id(exec)] = n;
  auto t = s.graph_transfers.find(handle_id(graph));
  if (t != s.graph_transfers.end()) s.exec_transfers[handle_id(exec)] = t->second;
  else s.exec_transfers.erase(handle_id(exec));
}

// ---- staged host sides of memcpy nodes (the file header says how they work) ----

void free_staging(const HostTransfer& t) {
  if (!t.transfer.WidthInBytes) return;
  cuMemFree_v2(t.to_device ? t.transfer.dstDevice : t.transfer.srcDevice);
}

// Appends a staged transfer to a graph and to the graphs whose conditional nodes hold it as a
// body (an instance of those runs the body). s.mu held.
void add_transfer_locked(State& s, uint64_t graph, const HostTransfer& t) {
  for (int depth = 0; depth < 64; ++depth) {  // bounded: ids come from the server
    s.graph_transfers[graph].push_back(t);
    auto up = s.body_parent.find(graph);
    if (up == s.body_parent.end()) return;
    graph = up->second;
  }
}

// A memcpy node was added (with a staged host side or not: parameters set later may bring one).
void note_transfer(uint64_t graph, const HostTransfer& t) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.memcpy_node_graph[t.node] = graph;
  if (t.transfer.WidthInBytes) add_transfer_locked(s, graph, t);
}

// A memcpy node's parameters changed: in its graph (exec 0) or in one instance. A node whose new
// parameters have no staged host side (t.transfer.WidthInBytes == 0) loses its transfer.
void replace_transfer(uint64_t exec, const HostTransfer& t) {
  bool staged = t.transfer.WidthInBytes != 0;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto update = [&](std::vector<HostTransfer>& list, bool add_if_missing) {
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (it->node != t.node) continue;
      if (staged) *it = t;
      else list.erase(it);
      return;
    }
    if (staged && add_if_missing) list.push_back(t);
  };
  if (exec) {
    update(s.exec_transfers[exec], true);
    return;
  }
  // Instances made before keep what they had, as the driver's do.
  auto g = s.memcpy_node_graph.find(t.node);
  if (g != s.memcpy_node_graph.end()) update(s.graph_transfers[g->second], true);
}

// Moves the staged host sides of an instance: before its launch (to_device) or after it.
CUresult move_transfers(uint64_t exec, CUstream stream, bool to_device) {
  std::vector<HostTransfer> list;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.exec_transfers.find(exec);
    if (it == s.exec_transfers.end()) return CUDA_SUCCESS;
    list = it->second;
  }
  for (const HostTransfer& t : list) {
    if (t.to_device != to_device) continue;
    const CUDA_MEMCPY3D& x = t.transfer;
    CUresult rc;
    if (x.Height <= 1 && x.Depth <= 1) {
      // One run of bytes: the plain async copies (and their pinned, mapped and pageable paths).
      if (to_device)
        rc = cuMemcpyHtoDAsync_v2(x.dstDevice + x.dstXInBytes, static_cast<const char*>(x.srcHost) + x.srcXInBytes,
                                  x.WidthInBytes, stream);
      else
        rc = cuMemcpyDtoHAsync_v2(static_cast<char*>(x.dstHost) + x.dstXInBytes, x.srcDevice + x.srcXInBytes,
                                  x.WidthInBytes, stream);
    } else {
      rc = cuMemcpy3DAsync_v2(&x, stream);
    }
    if (rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

uint64_t host_callbacks_of(CUgraphExec exec) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.exec_hosts.find(handle_id(exec));
  return it == s.exec_hosts.end() ? 0 : it->second;
}

CUresult add(uint16_t opcode, const char* name, CUgraphNode* ph, CUgraph graph, const CUgraphNode* deps,
             const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  rgpu::client::trace_call(name);
  if (!ph || !p) return CUDA_ERROR_INVALID_VALUE;
  Call c(opcode, rgpu::client::kWaits);
  uint64_t id = rgpu::client::mint_handle();
  if ((n && !deps) || n > kMaxNodes) return CUDA_ERROR_INVALID_VALUE;
  wire::put_add_node_head(c.args(), id, handle_id(graph), deps, edges, n);
  uint64_t host_id = 0;
  HostTransfer t;
  if (CUresult rc = put_params(c.args(), name, *p, &host_id, &t)) return rc;
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) {
    if (host_id) rgpu::client::forget_host_node(host_id);
    free_staging(t);
    return rc;
  }
  wire::AddNodeReply got;
  if (!wire::read_add_node_reply(c.reply(), p->type, &got)) return CUDA_ERROR_UNKNOWN;
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) p->alloc.dptr = got.dptr;
  if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    NodeStore* s = store_for(id, false);
    s->bodies.clear();
    for (uint64_t b : got.bodies) s->bodies.push_back(handle_from<CUgraph>(b));
    p->conditional.phGraph_out = s->bodies.data();
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    for (CUgraph b : s->bodies) st.body_parent[handle_id(b)] = handle_id(graph);
  }
  *ph = handle_from<CUgraphNode>(id);
  if (p->type == CU_GRAPH_NODE_TYPE_HOST) count_host_node(handle_id(graph), id);
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) count_child(handle_id(graph), handle_id(p->graph.graph));
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    t.node = id;
    note_transfer(handle_id(graph), t);
  }
  return CUDA_SUCCESS;
}

// cuGraph*NodeSetParams (exec == nullptr and !in_exec) and cuGraphExec*NodeSetParams.
CUresult set(uint16_t opcode, const char* name, bool in_exec, CUgraphExec exec, CUgraphNode node,
             const CUgraphNodeParams& p) {
  rgpu::client::trace_call(name);
  Call c(opcode, rgpu::client::kWaits);
  wire::put_set_params_head(c.args(), in_exec, handle_id(exec), handle_id(node));
  uint64_t host_id = 0;
  HostTransfer t;
  if (CUresult rc = put_params(c.args(), name, p, &host_id, &t)) return rc;
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) {
    if (host_id) rgpu::client::forget_host_node(host_id);
    free_staging(t);
    return rc;
  }
  if (p.type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    t.node = handle_id(node);
    replace_transfer(in_exec ? handle_id(exec) : 0, t);
  }
  return rc;
}

CUresult get(uint16_t opcode, const char* name, CUgraphNode node, CUgraphNodeType want, CUgraphNodeParams* p) {
  rgpu::client::trace_call(name);
  Call c(opcode, rgpu::client::kWaits);
  wire::put_get_params(c.args(), handle_id(node));
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  rc = read_params(c.reply(), handle_id(node), p);
  if (rc == CUDA_SUCCESS && p->type != want) return CUDA_ERROR_UNKNOWN;
  return rc;
}

// Node arrays out: nodes (and, for edges, to_nodes) and edge data, in the driver's count rules.
CUresult node_array(uint16_t opcode, const char* name, const void* handle, CUgraphNode* nodes, CUgraphNode* to_nodes,
                    bool edges_form, CUgraphEdgeData* edge_data, size_t* count) {
  rgpu::client::trace_call(name);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (edges_form && (!nodes != !to_nodes)) return CUDA_ERROR_INVALID_VALUE;
  bool want = nodes != nullptr;
  uint64_t cap = (want || edge_data) ? *count : 0;
  if (cap > kMaxNodes) return CUDA_ERROR_INVALID_VALUE;
  Call c(opcode, rgpu::client::kWaits);
  const wire::NodeArrayAsk ask{handle_id(handle), want, edge_data != nullptr, cap};
  wire::put_node_array_ask(c.args(), ask);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  wire::NodeArray got;
  if (!wire::read_node_array(c.reply(), ask, edges_form, &got)) return CUDA_ERROR_UNKNOWN;
  if (want) {
    for (uint64_t i = 0; i < cap; ++i) nodes[i] = handle_from<CUgraphNode>(got.from[i]);
    if (edges_form)
      for (uint64_t i = 0; i < cap; ++i) to_nodes[i] = handle_from<CUgraphNode>(got.to[i]);
  }
  if (edge_data) std::copy(got.edges.begin(), got.edges.end(), edge_data);
  *count = got.count;
  return CUDA_SUCCESS;
}

CUresult change_deps(uint16_t opcode, const char* name, CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                     const CUgraphEdgeData* edges, size_t n) {
  rgpu::client::trace_call(name);
  if ((n && (!from || !to)) || n > kMaxNodes) return CUDA_ERROR_INVALID_VALUE;
  Call c(opcode, rgpu::client::kWaits);
  wire::put_dependency_change(c.args(), handle_id(graph), from, to, edges, n);
  return c.invoke();
}

CUgraphNodeParams of_type(CUgraphNodeType t) {
  CUgraphNodeParams p{};
  p.type = t;
  return p;
}

}  // namespace

namespace rgpu::client {

// A copy captured from a stream (client/driver/stream_capture.cpp): the same bookkeeping as a
// memcpy node's staged host side.
void note_graph_transfer(uint64_t graph, uint64_t node, bool to_device, const CUDA_MEMCPY3D& transfer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (node) s.memcpy_node_graph[node] = graph;
  add_transfer_locked(s, graph, HostTransfer{node, to_device, transfer});
}

}  // namespace rgpu::client

extern "C" {

// ---- adding nodes ----

RGPU_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return add(op::cuGraphAddKernelNode, "cuGraphAddKernelNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                     const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return add(op::cuGraphAddKernelNode_v2, "cuGraphAddKernelNode_v2", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  const CUDA_MEMCPY3D* copy, CUcontext ctx) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_copy(*copy, ctx);
  return add(op::cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_memset(*params, ctx);
  return add(op::cuGraphAddMemsetNode, "cuGraphAddMemsetNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                const CUDA_HOST_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_host(*params);
  return add(op::cuGraphAddHostNode, "cuGraphAddHostNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                      CUgraph child) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_GRAPH);
  p.graph.graph = child;
  return add(op::cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_EMPTY);
  return add(op::cuGraphAddEmptyNode, "cuGraphAddEmptyNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                       CUevent event) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  p.eventRecord.event = event;
  return add(op::cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                     CUevent event) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  p.eventWait.event = event;
  return add(op::cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                    CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  p.alloc.poolProps = params->poolProps;
  p.alloc.accessDescs = params->accessDescs;
  p.alloc.accessDescCount = params->accessDescCount;
  p.alloc.bytesize = params->bytesize;
  CUresult rc = add(op::cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", ph, g, deps, nullptr, n, &p);
  if (rc == CUDA_SUCCESS) params->dptr = p.alloc.dptr;
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                   CUdeviceptr dptr) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEM_FREE);
  p.free.dptr = dptr;
  return add(op::cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", ph, g, deps, nullptr, n, &p);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                            CUgraphNodeParams* params) {
  return add(op::cuGraphAddNode, "cuGraphAddNode", ph, g, deps, nullptr, n, params);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps,
                                               const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* params) {
  return add(op::cuGraphAddNode_v2, "cuGraphAddNode_v2", ph, g, deps, edges, n, params);
}

// ---- node parameters ----

RGPU_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p;
  CUresult rc =
      get(op::cuGraphKernelNodeGetParams, "cuGraphKernelNodeGetParams", node, CU_GRAPH_NODE_TYPE_KERNEL, &p);
  if (rc == CUDA_SUCCESS) to_kernel(p, out);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p;
  CUresult rc =
      get(op::cuGraphKernelNodeGetParams_v2, "cuGraphKernelNodeGetParams_v2", node, CU_GRAPH_NODE_TYPE_KERNEL, &p);
  if (rc == CUDA_SUCCESS) to_kernel(p, out);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphKernelNodeSetParams, "cuGraphKernelNodeSetParams", false, nullptr, node, from_kernel(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphKernelNodeSetParams_v2, "cuGraphKernelNodeSetParams_v2", false, nullptr, node,
             from_kernel(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p;
  CUresult rc = get(op::cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams", node, CU_GRAPH_NODE_TYPE_MEMCPY, &p);
  if (rc == CUDA_SUCCESS) *out = p.memcpy.copyParams;
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* copy) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphMemcpyNodeSetParams, "cuGraphMemcpyNodeSetParams", false, nullptr, node,
             from_copy(*copy, nullptr));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p;
  CUresult rc = get(op::cuGraphHostNodeGetParams, "cuGraphHostNodeGetParams", node, CU_GRAPH_NODE_TYPE_HOST, &p);
  if (rc == CUDA_SUCCESS) {
    out->fn = p.host.fn;
    out->userData = p.host.userData;
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphHostNodeSetParams, "cuGraphHostNodeSetParams", false, nullptr, node, from_host(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p;
  CUresult rc =
      get(op::cuGraphMemAllocNodeGetParams, "cuGraphMemAllocNodeGetParams", node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &p);
  if (rc == CUDA_SUCCESS) {
    out->poolProps = p.alloc.poolProps;
    out->accessDescs = p.alloc.accessDescs;
    out->accessDescCount = p.alloc.accessDescCount;
    out->bytesize = p.alloc.bytesize;
    out->dptr = p.alloc.dptr;
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphNodeSetParams, "cuGraphNodeSetParams", false, nullptr, node, *params);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                            const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams", true, exec, node,
             from_kernel(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                               const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams_v2", true, exec, node,
             from_kernel(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                            const CUDA_MEMCPY3D* copy, CUcontext ctx) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams", true, exec, node,
             from_copy(*copy, ctx));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                          const CUDA_HOST_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphExecHostNodeSetParams, "cuGraphExecHostNodeSetParams", true, exec, node, from_host(*params));
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set(op::cuGraphExecNodeSetParams, "cuGraphExecNodeSetParams", true, exec, node, *params);
}

// ---- topology ----

RGPU_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  return node_array(op::cuGraphGetNodes, "cuGraphGetNodes", g, nodes, nullptr, false, nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  return node_array(op::cuGraphGetRootNodes, "cuGraphGetRootNodes", g, nodes, nullptr, false, nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n) {
  return node_array(op::cuGraphGetEdges, "cuGraphGetEdges", g, from, to, true, nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to,
                                                CUgraphEdgeData* edges, size_t* n) {
  return node_array(op::cuGraphGetEdges_v2, "cuGraphGetEdges_v2", g, from, to, true, edges, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  return node_array(op::cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies", node, deps, nullptr, false, nullptr,
                    n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps,
                                                           CUgraphEdgeData* edges, size_t* n) {
  return node_array(op::cuGraphNodeGetDependencies_v2, "cuGraphNodeGetDependencies_v2", node, deps, nullptr, false,
                    edges, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  return node_array(op::cuGraphNodeGetDependentNodes, "cuGraphNodeGetDependentNodes", node, deps, nullptr, false,
                    nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps,
                                                             CUgraphEdgeData* edges, size_t* n) {
  return node_array(op::cuGraphNodeGetDependentNodes_v2, "cuGraphNodeGetDependentNodes_v2", node, deps, nullptr,
                    false, edges, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                    size_t n) {
  return change_deps(op::cuGraphAddDependencies, "cuGraphAddDependencies", g, from, to, nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                       const CUgraphEdgeData* edges, size_t n) {
  return change_deps(op::cuGraphAddDependencies_v2, "cuGraphAddDependencies_v2", g, from, to, edges, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                       size_t n) {
  return change_deps(op::cuGraphRemoveDependencies, "cuGraphRemoveDependencies", g, from, to, nullptr, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                          const CUgraphEdgeData* edges, size_t n) {
  return change_deps(op::cuGraphRemoveDependencies_v2, "cuGraphRemoveDependencies_v2", g, from, to, edges, n);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode node) {
  CUresult rc = rgpu_fwd_cuGraphDestroyNode(node);
  if (rc == CUDA_SUCCESS) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.stores.erase(handle_id(node));
    auto it = s.host_node_graph.find(handle_id(node));
    if (it != s.host_node_graph.end()) {
      auto g = s.graph_hosts.find(it->second);
      if (g != s.graph_hosts.end() && g->second) --g->second;
      s.host_node_graph.erase(it);
    }
  }
  return rc;
}

// The server forgets the id, and the driver may hand the same address out again: what was
// counted for this graph must not carry over to a later one.
RGPU_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  CUresult rc = rgpu_fwd_cuGraphDestroy(g);
  if (rc == CUDA_SUCCESS) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.graph_transfers.erase(handle_id(g));
    s.graph_hosts.erase(handle_id(g));
    s.body_parent.erase(handle_id(g));
  }
  return rc;
}

// ---- instances ----

RGPU_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* ph, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  CUresult rc = rgpu_fwd_cuGraphInstantiate(ph, g, err, log, n);
  if (rc == CUDA_SUCCESS && ph) note_instance(*ph, g);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* ph, CUgraph g, CUgraphNode* err, char* log,
                                                   size_t n) {
  CUresult rc = rgpu_fwd_cuGraphInstantiate_v2(ph, g, err, log, n);
  if (rc == CUDA_SUCCESS && ph) note_instance(*ph, g);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* ph, CUgraph g, unsigned long long flags) {
  CUresult rc = rgpu_fwd_cuGraphInstantiateWithFlags(ph, g, flags);
  if (rc == CUDA_SUCCESS && ph) note_instance(*ph, g);
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  rgpu::client::trace_call("cuGraphExecUpdate_v2");
  Call c(op::cuGraphExecUpdate_v2, rgpu::client::kWaits);
  wire::put_exec_update(c.args(), handle_id(exec), handle_id(g));
  CUresult rc = c.invoke();
  wire::ExecUpdateResult got;
  if (wire::read_exec_update_result(c.reply(), &got) && info) {
    info->result = static_cast<CUgraphExecUpdateResult>(got.result);
    info->errorNode = handle_from<CUgraphNode>(got.error_node);
    info->errorFromNode = handle_from<CUgraphNode>(got.error_from_node);
  }
  if (rc == CUDA_SUCCESS) note_instance(exec, g);
  return rc;
}

// One-way, like a kernel launch; the instance's host callbacks are announced first.
// The instance's staged host sides move around the launch, on its stream (the file header).
RGPU_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  if (CUresult rc = move_transfers(handle_id(exec), stream, true)) return rc;
  rgpu::client::expect_host_callbacks(host_callbacks_of(exec), exec);
  if (CUresult rc = rgpu_fwd_cuGraphLaunch(exec, stream)) return rc;
  return move_transfers(handle_id(exec), stream, false);
}

RGPU_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  CUstream ordered = stream ? stream : CU_STREAM_PER_THREAD;
  if (CUresult rc = move_transfers(handle_id(exec), ordered, true)) return rc;
  rgpu::client::expect_host_callbacks(host_callbacks_of(exec), exec);
  if (CUresult rc = rgpu_fwd_cuGraphLaunch_ptsz(exec, stream)) return rc;
  return move_transfers(handle_id(exec), ordered, false);
}

// A copy carries its original's staged transfers (the same staging buffers). Its host nodes are
// not counted, as for captured graphs (the file header).
RGPU_EXPORT CUresult CUDAAPI cuGraphClone(CUgraph* clone, CUgraph original) {
  CUresult rc = rgpu_fwd_cuGraphClone(clone, original);
  if (rc == CUDA_SUCCESS && clone) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto t = s.graph_transfers.find(handle_id(original));
    if (t != s.graph_transfers.end()) s.graph_transfers[handle_id(*clone)] = t->second;
  }
  return rc;
}

}  // extern "C"
