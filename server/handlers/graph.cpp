// CUDA graph nodes (wire layouts in protocol/wire/graph.h). Node parameters arrive in one
// encoding (NodeParams) for every entry point; each handler decodes them into CUgraphNodeParams,
// resolves every handle id, and calls the driver's entry point of the same name, rebuilding the
// legacy struct where the call takes one. Kernel arguments are checked against the driver's own
// layout as launches are (server/handlers/launch_args.h). A memcpy node never names this
// process's own memory, except host memory registered with the driver (in rgpu-server, only the
// copies of the client's mapped memory, server/mapped_memory.h): the client names those for its
// mapped buffers and stages every other host side through device memory (client/driver/graph.cpp).
//
// Host nodes: the driver's node calls a function of ours that asks the client to run the user's
// and holds the graph until it returns (protocol/messages.h kOpCallback), at every launch. Its
// argument (the client's callback id) is never freed: the node may live on in any number of
// instances and clones, which the driver does not tell us about.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gen/ops.gen.h"
#include "gen/server_handlers.gen.h"
#include "protocol/wire/graph.h"
#include "server/dispatch.h"
#include "server/handlers/launch_args.h"

namespace rgpu::server::handlers {
namespace {

namespace wire = proto::wire;
using wire::from_kernel;
using wire::kMaxAccessDescs;
using wire::to_alloc;
using wire::to_host;
using wire::to_kernel;
using wire::to_memset;

#define DRV(fn, ...) (d.drv.fn ? d.drv.fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

struct HostNode {
  ClientCallbacks* callbacks;
  uint64_t id;
};

void CUDA_CB host_node_fn(void* p) {
  auto* h = static_cast<HostNode*>(p);
  h->callbacks->run(h->id, CUDA_SUCCESS);
}

// Decoded NodeParams, its ids resolved, and what its pointers point at.
struct Node {
  explicit Node(wire::NodeParams& decoded) : in(decoded), p(decoded.p) {}
  wire::NodeParams& in;
  CUgraphNodeParams& p;
  HostNode* host = nullptr;  // ours until the driver has accepted the node
  ~Node() { delete host; }
  void accepted() { host = nullptr; }
};

// Reads a handle id; a bad one sets *bad (the first error wins) and leaves *out null.
template <class H>
void get_handle(Dispatch& d, uint64_t id, H* out, CUresult* bad) {
  if (!d.handles.get(id, out)) {
    *out = nullptr;
    if (*bad == CUDA_SUCCESS) *bad = CUDA_ERROR_INVALID_HANDLE;
  }
}

// Resolves an id the decoder left in a handle field, in place.
template <class H>
void resolve(Dispatch& d, H* h, CUresult* bad) {
  get_handle(d, reinterpret_cast<uint64_t>(*h), h, bad);
}

// One side of a copy, its type read as an integer (never trusting the enum): device, array, or
// a unified address the driver knows as device memory, or as host memory registered with it
// whose first and last byte the copy touches lie in one registered buffer (a mapped copy).
// Anything else would have the driver read or write this process's own memory at every launch.
bool copy_side_ok(Dispatch& d, const CUDA_MEMCPY3D& c, size_t type_offset, CUdeviceptr unified, size_t x, size_t y,
                  size_t z, size_t pitch, size_t height) {
  std::underlying_type_t<CUmemorytype> t;
  std::memcpy(&t, reinterpret_cast<const char*>(&c) + type_offset, sizeof t);
  if (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_ARRAY) return true;
  if (t != CU_MEMORYTYPE_UNIFIED || !d.drv.cuPointerGetAttribute) return false;
  unsigned type = 0;
  if (d.drv.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unified) != CUDA_SUCCESS) return false;
  if (type == CU_MEMORYTYPE_DEVICE) return true;
  if (type != CU_MEMORYTYPE_HOST || !c.WidthInBytes) return false;
  // Offset of the last byte touched, computed in 128 bits (every field is hostile).
  size_t p = pitch ? pitch : c.WidthInBytes, h = height ? height : c.Height;
  size_t rows = c.Height ? c.Height : 1, slices = c.Depth ? c.Depth : 1;
  __uint128_t last = __uint128_t(x) + __uint128_t(y) * p + __uint128_t(z) * p * h +
                     __uint128_t(slices - 1) * p * h + __uint128_t(rows - 1) * p + c.WidthInBytes - 1;
  if (last >= (__uint128_t(1) << 48) || unified + static_cast<uint64_t>(last) < unified) return false;
  unsigned long long first_id = 0, last_id = 0;
  CUdeviceptr first_dev = 0;
  return d.drv.cuPointerGetAttribute(&first_dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, unified) == CUDA_SUCCESS &&
         d.drv.cuPointerGetAttribute(&first_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, unified) == CUDA_SUCCESS &&
         d.drv.cuPointerGetAttribute(&last_id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                     unified + static_cast<uint64_t>(last)) == CUDA_SUCCESS &&
         first_id == last_id;
}

// Resolves the decoded NodeParams in *n: handle ids, a kernel node's arguments (checked against
// the driver's layout), a copy's sides, a host node's function. Returns false when the handler
// must stop because a reply is already written. Handle and value errors found on the way are left
// in *bad for the caller to answer once everything is read.
bool resolve_params(Dispatch& d, Node* n, CUresult* bad) {
  CUgraphNodeParams& p = n->p;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      auto& k = p.kernel;
      if (!n->in.args.bind()) {
        d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
        return false;
      }
      uint64_t fid = reinterpret_cast<uint64_t>(k.func), kid = reinterpret_cast<uint64_t>(k.kern);
      resolve(d, &k.func, bad);
      resolve(d, &k.kern, bad);
      resolve(d, &k.ctx, bad);
      CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
      if (f && !launch_args_fit(d, k.func ? fid : kid, f, &n->in.args) && *bad == CUDA_SUCCESS)
        *bad = CUDA_ERROR_INVALID_VALUE;
      k.kernelParams = n->in.args.params();
      k.extra = n->in.args.extras();
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      resolve(d, &p.memcpy.copyCtx, bad);
      CUDA_MEMCPY3D& c = p.memcpy.copyParams;
      if (!copy_side_ok(d, c, offsetof(CUDA_MEMCPY3D, srcMemoryType), c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ,
                        c.srcPitch, c.srcHeight) ||
          !copy_side_ok(d, c, offsetof(CUDA_MEMCPY3D, dstMemoryType), c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ,
                        c.dstPitch, c.dstHeight)) {
        if (*bad == CUDA_SUCCESS) *bad = CUDA_ERROR_NOT_SUPPORTED;  // host sides never come from a client of ours
        c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      }
      uint64_t src_array = reinterpret_cast<uint64_t>(c.srcArray), dst_array = reinterpret_cast<uint64_t>(c.dstArray);
      c.srcArray = c.dstArray = nullptr;
      if (c.srcMemoryType == CU_MEMORYTYPE_ARRAY) get_handle(d, src_array, &c.srcArray, bad);
      if (c.dstMemoryType == CU_MEMORYTYPE_ARRAY) get_handle(d, dst_array, &c.dstArray, bad);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
      resolve(d, &p.memset.ctx, bad);
      break;
    case CU_GRAPH_NODE_TYPE_HOST:
      if (!d.callbacks) {
        if (*bad == CUDA_SUCCESS) *bad = CUDA_ERROR_NOT_SUPPORTED;
        break;
      }
      n->host = new HostNode{d.callbacks, n->in.host_callback};
      p.host.fn = host_node_fn;
      p.host.userData = n->host;
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      resolve(d, &p.graph.graph, bad);
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      resolve(d, &p.eventWait.event, bad);
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      resolve(d, &p.eventRecord.event, bad);
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      p.alloc.dptr = 0;  // an output
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      resolve(d, &p.conditional.ctx, bad);
      break;
    default:
      break;
  }
  return true;
}

// Writes NodeParams for what a getter read back (kernel, memcpy, host and allocation nodes).
void put_params(Dispatch& d, const CUgraphNodeParams& in) {
  CUgraphNodeParams p = in;  // its handles as the client's ids
  uint64_t host_callback = 0;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      p.kernel.func = reinterpret_cast<CUfunction>(d.handles.id_for(in.kernel.func));
      p.kernel.kern = reinterpret_cast<CUkernel>(d.handles.id_for(in.kernel.kern));
      p.kernel.ctx = reinterpret_cast<CUcontext>(d.handles.id_for(in.kernel.ctx));
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D& c = p.memcpy.copyParams;
      c.srcArray = reinterpret_cast<CUarray>(c.srcArray ? d.handles.id_for(c.srcArray) : 0);
      c.dstArray = reinterpret_cast<CUarray>(c.dstArray ? d.handles.id_for(c.dstArray) : 0);
      p.memcpy.copyCtx = reinterpret_cast<CUcontext>(d.handles.id_for(in.memcpy.copyCtx));
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      host_callback = p.host.fn == host_node_fn && p.host.userData ? static_cast<HostNode*>(p.host.userData)->id : 0;
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      break;
    default:
      return;  // a getter reads back only the types above
  }
  wire::put_node_params(d.reply, p, host_callback);
  if (p.type == CU_GRAPH_NODE_TYPE_KERNEL) {
    const auto& k = in.kernel;
    CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
    put_launch_args(d, k.func ? d.handles.id_for(k.func) : d.handles.id_for(k.kern), f, k.kernelParams, k.extra,
                    d.reply);
  }
}

// The node type each legacy entry point takes; -1: any (cuGraphAddNode, cuGraph(Exec)NodeSetParams).
int expected_type(uint16_t opcode) {
  switch (opcode) {
    case op::cuGraphAddKernelNode:
    case op::cuGraphAddKernelNode_v2:
    case op::cuGraphKernelNodeSetParams:
    case op::cuGraphKernelNodeSetParams_v2:
    case op::cuGraphExecKernelNodeSetParams:
    case op::cuGraphExecKernelNodeSetParams_v2:
      return CU_GRAPH_NODE_TYPE_KERNEL;
    case op::cuGraphAddMemcpyNode:
    case op::cuGraphMemcpyNodeSetParams:
    case op::cuGraphExecMemcpyNodeSetParams:
      return CU_GRAPH_NODE_TYPE_MEMCPY;
    case op::cuGraphAddMemsetNode:
      return CU_GRAPH_NODE_TYPE_MEMSET;
    case op::cuGraphAddHostNode:
    case op::cuGraphHostNodeSetParams:
    case op::cuGraphExecHostNodeSetParams:
      return CU_GRAPH_NODE_TYPE_HOST;
    case op::cuGraphAddChildGraphNode:
      return CU_GRAPH_NODE_TYPE_GRAPH;
    case op::cuGraphAddEmptyNode:
      return CU_GRAPH_NODE_TYPE_EMPTY;
    case op::cuGraphAddEventRecordNode:
      return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    case op::cuGraphAddEventWaitNode:
      return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    case op::cuGraphAddMemAllocNode:
      return CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    case op::cuGraphAddMemFreeNode:
      return CU_GRAPH_NODE_TYPE_MEM_FREE;
    default:
      return -1;
  }
}

CUresult call_add(Dispatch& d, CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                  size_t n, CUgraphNodeParams& p) {
  switch (d.op) {
    case op::cuGraphAddKernelNode: {
      CUDA_KERNEL_NODE_PARAMS_v1 k{};
      to_kernel(p, &k);
      return DRV(cuGraphAddKernelNode, out, g, deps, n, &k);
    }
    case op::cuGraphAddKernelNode_v2: {
      CUDA_KERNEL_NODE_PARAMS k{};
      to_kernel(p, &k);
      return DRV(cuGraphAddKernelNode_v2, out, g, deps, n, &k);
    }
    case op::cuGraphAddMemcpyNode:
      return DRV(cuGraphAddMemcpyNode, out, g, deps, n, &p.memcpy.copyParams, p.memcpy.copyCtx);
    case op::cuGraphAddMemsetNode: {
      CUDA_MEMSET_NODE_PARAMS m = to_memset(p);
      return DRV(cuGraphAddMemsetNode, out, g, deps, n, &m, p.memset.ctx);
    }
    case op::cuGraphAddHostNode: {
      CUDA_HOST_NODE_PARAMS h = to_host(p);
      return DRV(cuGraphAddHostNode, out, g, deps, n, &h);
    }
    case op::cuGraphAddChildGraphNode:
      return DRV(cuGraphAddChildGraphNode, out, g, deps, n, p.graph.graph);
    case op::cuGraphAddEmptyNode:
      return DRV(cuGraphAddEmptyNode, out, g, deps, n);
    case op::cuGraphAddEventRecordNode:
      return DRV(cuGraphAddEventRecordNode, out, g, deps, n, p.eventRecord.event);
    case op::cuGraphAddEventWaitNode:
      return DRV(cuGraphAddEventWaitNode, out, g, deps, n, p.eventWait.event);
    case op::cuGraphAddMemAllocNode: {
      CUDA_MEM_ALLOC_NODE_PARAMS a = to_alloc(p);
      CUresult rc = DRV(cuGraphAddMemAllocNode, out, g, deps, n, &a);
      p.alloc.dptr = a.dptr;
      return rc;
    }
    case op::cuGraphAddMemFreeNode:
      return DRV(cuGraphAddMemFreeNode, out, g, deps, n, p.free.dptr);
    case op::cuGraphAddNode:
      return DRV(cuGraphAddNode, out, g, deps, n, &p);
    case op::cuGraphAddNode_v2:
      return DRV(cuGraphAddNode_v2, out, g, deps, edges, n, &p);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

void add(Dispatch& d) {
  wire::AddNode req;
  if (!wire::read_add_node(d.args, &req)) return;
  const wire::NodeList& dl = req.deps;
  if (dl.has_edges && d.op != op::cuGraphAddNode_v2) return (void)d.args.fail();
  int want = expected_type(d.op);
  if (want >= 0 && req.params.p.type != want) return (void)d.args.fail();
  CUresult bad = CUDA_SUCCESS;
  Node node(req.params);
  if (!resolve_params(d, &node, &bad)) return;
  CUgraph g = nullptr;
  get_handle(d, req.graph, &g, &bad);
  size_t n = dl.nodes.size();
  std::vector<CUgraphNode> deps(n);
  for (size_t i = 0; i < n; ++i) get_handle(d, dl.nodes[i], &deps[i], &bad);
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  CUgraphNode out = nullptr;
  CUresult rc = call_add(d, &out, g, n ? deps.data() : nullptr, dl.has_edges ? dl.edges.data() : nullptr, n, node.p);
  if (rc == CUDA_SUCCESS && !d.handles.bind(req.node, out)) rc = CUDA_ERROR_INVALID_VALUE;
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  node.accepted();
  std::vector<uint64_t> bodies;
  if (node.p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL && node.p.conditional.phGraph_out)
    for (uint32_t i = 0; i < node.p.conditional.size; ++i)
      bodies.push_back(d.handles.id_for(node.p.conditional.phGraph_out[i]));
  wire::put_add_node_reply(d.reply, node.p.type, node.p.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? node.p.alloc.dptr : 0,
                           bodies);
}

CUresult call_set(Dispatch& d, CUgraphExec exec, CUgraphNode node, CUgraphNodeParams& p) {
  switch (d.op) {
    case op::cuGraphKernelNodeSetParams: {
      CUDA_KERNEL_NODE_PARAMS_v1 k{};
      to_kernel(p, &k);
      return DRV(cuGraphKernelNodeSetParams, node, &k);
    }
    case op::cuGraphKernelNodeSetParams_v2: {
      CUDA_KERNEL_NODE_PARAMS k{};
      to_kernel(p, &k);
      return DRV(cuGraphKernelNodeSetParams_v2, node, &k);
    }
    case op::cuGraphMemcpyNodeSetParams:
      return DRV(cuGraphMemcpyNodeSetParams, node, &p.memcpy.copyParams);
    case op::cuGraphHostNodeSetParams: {
      CUDA_HOST_NODE_PARAMS h = to_host(p);
      return DRV(cuGraphHostNodeSetParams, node, &h);
    }
    case op::cuGraphNodeSetParams:
      return DRV(cuGraphNodeSetParams, node, &p);
    case op::cuGraphExecKernelNodeSetParams: {
      CUDA_KERNEL_NODE_PARAMS_v1 k{};
      to_kernel(p, &k);
      return DRV(cuGraphExecKernelNodeSetParams, exec, node, &k);
    }
    case op::cuGraphExecKernelNodeSetParams_v2: {
      CUDA_KERNEL_NODE_PARAMS k{};
      to_kernel(p, &k);
      return DRV(cuGraphExecKernelNodeSetParams_v2, exec, node, &k);
    }
    case op::cuGraphExecMemcpyNodeSetParams:
      return DRV(cuGraphExecMemcpyNodeSetParams, exec, node, &p.memcpy.copyParams, p.memcpy.copyCtx);
    case op::cuGraphExecHostNodeSetParams: {
      CUDA_HOST_NODE_PARAMS h = to_host(p);
      return DRV(cuGraphExecHostNodeSetParams, exec, node, &h);
    }
    case op::cuGraphExecNodeSetParams:
      return DRV(cuGraphExecNodeSetParams, exec, node, &p);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

void set(Dispatch& d, bool in_exec) {
  wire::SetParams req;
  if (!wire::read_set_params(d.args, in_exec, &req)) return;
  int want = expected_type(d.op);
  if (want >= 0 && req.params.p.type != want) return (void)d.args.fail();
  CUresult bad = CUDA_SUCCESS;
  Node node(req.params);
  if (!resolve_params(d, &node, &bad)) return;
  CUgraphExec exec = nullptr;
  CUgraphNode target = nullptr;
  if (in_exec) get_handle(d, req.exec, &exec, &bad);
  get_handle(d, req.node, &target, &bad);
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  CUresult rc = call_set(d, exec, target, node.p);
  if (rc == CUDA_SUCCESS) node.accepted();
  d.reply.put<int32_t>(rc);
}

void get(Dispatch& d) {
  uint64_t node_id = 0;
  if (!wire::read_get_params(d.args, &node_id)) return;
  CUgraphNode node;
  if (!d.handles.get(node_id, &node)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  CUgraphNodeParams p{};
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  switch (d.op) {
    case op::cuGraphKernelNodeGetParams: {
      CUDA_KERNEL_NODE_PARAMS_v1 k{};
      rc = DRV(cuGraphKernelNodeGetParams, node, &k);
      p = from_kernel(k);
      break;
    }
    case op::cuGraphKernelNodeGetParams_v2: {
      CUDA_KERNEL_NODE_PARAMS k{};
      rc = DRV(cuGraphKernelNodeGetParams_v2, node, &k);
      p = from_kernel(k);
      break;
    }
    case op::cuGraphMemcpyNodeGetParams:
      p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
      rc = DRV(cuGraphMemcpyNodeGetParams, node, &p.memcpy.copyParams);
      break;
    case op::cuGraphHostNodeGetParams: {
      CUDA_HOST_NODE_PARAMS h{};
      rc = DRV(cuGraphHostNodeGetParams, node, &h);
      p = wire::from_host(h);
      break;
    }
    case op::cuGraphMemAllocNodeGetParams: {
      CUDA_MEM_ALLOC_NODE_PARAMS a{};
      rc = DRV(cuGraphMemAllocNodeGetParams, node, &a);
      p = wire::from_alloc(a);
      break;
    }
    default:
      break;
  }
  d.reply.put<int32_t>(rc);
  if (rc == CUDA_SUCCESS) put_params(d, p);
}

// Node arrays out (GetNodes, GetRootNodes, NodeGetDependencies, NodeGetDependentNodes, GetEdges).
void node_array(Dispatch& d) {
  wire::NodeArrayAsk ask;
  if (!wire::read_node_array_ask(d.args, &ask)) return;
  const uint64_t cap = ask.capacity;
  const bool want = ask.want_nodes, want_edges = ask.want_edges;
  void* h = nullptr;
  if (!d.handles.get_raw(ask.handle, &h)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  auto graph = static_cast<CUgraph>(h);
  auto node = static_cast<CUgraphNode>(h);
  bool edges_form = d.op == op::cuGraphGetEdges || d.op == op::cuGraphGetEdges_v2;
  // Never an empty array where the caller gave one: the driver reads NULL as "count only".
  size_t len = std::max<uint64_t>(cap, 1);
  std::vector<CUgraphNode> a(want ? len : 0), b(want && edges_form ? len : 0);
  wire::NodeArray out;
  out.edges.resize(want_edges ? len : 0);
  CUgraphNode* pa = want ? a.data() : nullptr;
  CUgraphNode* pb = want && edges_form ? b.data() : nullptr;
  CUgraphEdgeData* pe = want_edges ? out.edges.data() : nullptr;
  size_t count = cap;
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  switch (d.op) {
    case op::cuGraphGetNodes: rc = DRV(cuGraphGetNodes, graph, pa, &count); break;
    case op::cuGraphGetRootNodes: rc = DRV(cuGraphGetRootNodes, graph, pa, &count); break;
    case op::cuGraphGetEdges: rc = DRV(cuGraphGetEdges, graph, pa, pb, &count); break;
    case op::cuGraphGetEdges_v2: rc = DRV(cuGraphGetEdges_v2, graph, pa, pb, pe, &count); break;
    case op::cuGraphNodeGetDependencies: rc = DRV(cuGraphNodeGetDependencies, node, pa, &count); break;
    case op::cuGraphNodeGetDependencies_v2: rc = DRV(cuGraphNodeGetDependencies_v2, node, pa, pe, &count); break;
    case op::cuGraphNodeGetDependentNodes: rc = DRV(cuGraphNodeGetDependentNodes, node, pa, &count); break;
    case op::cuGraphNodeGetDependentNodes_v2:
      rc = DRV(cuGraphNodeGetDependentNodes_v2, node, pa, pe, &count);
      break;
    default: break;
  }
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  out.count = count;
  for (CUgraphNode x : a) out.from.push_back(d.handles.id_for(x));
  for (CUgraphNode x : b) out.to.push_back(d.handles.id_for(x));
  wire::put_node_array(d.reply, ask, edges_form, out);
}

void change_deps(Dispatch& d) {
  wire::DependencyChange req;
  if (!wire::read_dependency_change(d.args, &req)) return;
  size_t n = req.from.size();
  CUresult bad = CUDA_SUCCESS;
  CUgraph g = nullptr;
  get_handle(d, req.graph, &g, &bad);
  std::vector<CUgraphNode> nodes(2 * n);
  for (size_t i = 0; i < n; ++i) {
    get_handle(d, req.from[i], &nodes[i], &bad);
    get_handle(d, req.to[i], &nodes[n + i], &bad);
  }
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  const CUgraphNode* from = n ? nodes.data() : nullptr;
  const CUgraphNode* to = n ? nodes.data() + n : nullptr;
  const CUgraphEdgeData* e = req.has_edges ? req.edges.data() : nullptr;
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  switch (d.op) {
    case op::cuGraphAddDependencies: rc = DRV(cuGraphAddDependencies, g, from, to, n); break;
    case op::cuGraphAddDependencies_v2: rc = DRV(cuGraphAddDependencies_v2, g, from, to, e, n); break;
    case op::cuGraphRemoveDependencies: rc = DRV(cuGraphRemoveDependencies, g, from, to, n); break;
    case op::cuGraphRemoveDependencies_v2: rc = DRV(cuGraphRemoveDependencies_v2, g, from, to, e, n); break;
    default: break;
  }
  d.reply.put<int32_t>(rc);
}

}  // namespace

void cuGraphAddChildGraphNode(Dispatch& d) { add(d); }
void cuGraphAddEmptyNode(Dispatch& d) { add(d); }
void cuGraphAddEventRecordNode(Dispatch& d) { add(d); }
void cuGraphAddEventWaitNode(Dispatch& d) { add(d); }
void cuGraphAddHostNode(Dispatch& d) { add(d); }
void cuGraphAddKernelNode(Dispatch& d) { add(d); }
void cuGraphAddKernelNode_v2(Dispatch& d) { add(d); }
void cuGraphAddMemAllocNode(Dispatch& d) { add(d); }
void cuGraphAddMemFreeNode(Dispatch& d) { add(d); }
void cuGraphAddMemcpyNode(Dispatch& d) { add(d); }
void cuGraphAddMemsetNode(Dispatch& d) { add(d); }
void cuGraphAddNode(Dispatch& d) { add(d); }
void cuGraphAddNode_v2(Dispatch& d) { add(d); }

void cuGraphKernelNodeSetParams(Dispatch& d) { set(d, false); }
void cuGraphKernelNodeSetParams_v2(Dispatch& d) { set(d, false); }
void cuGraphMemcpyNodeSetParams(Dispatch& d) { set(d, false); }
void cuGraphHostNodeSetParams(Dispatch& d) { set(d, false); }
void cuGraphNodeSetParams(Dispatch& d) { set(d, false); }
void cuGraphExecKernelNodeSetParams(Dispatch& d) { set(d, true); }
void cuGraphExecKernelNodeSetParams_v2(Dispatch& d) { set(d, true); }
void cuGraphExecMemcpyNodeSetParams(Dispatch& d) { set(d, true); }
void cuGraphExecHostNodeSetParams(Dispatch& d) { set(d, true); }
void cuGraphExecNodeSetParams(Dispatch& d) { set(d, true); }

void cuGraphKernelNodeGetParams(Dispatch& d) { get(d); }
void cuGraphKernelNodeGetParams_v2(Dispatch& d) { get(d); }
void cuGraphMemcpyNodeGetParams(Dispatch& d) { get(d); }
void cuGraphHostNodeGetParams(Dispatch& d) { get(d); }
void cuGraphMemAllocNodeGetParams(Dispatch& d) { get(d); }

void cuGraphGetNodes(Dispatch& d) { node_array(d); }
void cuGraphGetRootNodes(Dispatch& d) { node_array(d); }
void cuGraphGetEdges(Dispatch& d) { node_array(d); }
void cuGraphGetEdges_v2(Dispatch& d) { node_array(d); }
void cuGraphNodeGetDependencies(Dispatch& d) { node_array(d); }
void cuGraphNodeGetDependencies_v2(Dispatch& d) { node_array(d); }
void cuGraphNodeGetDependentNodes(Dispatch& d) { node_array(d); }
void cuGraphNodeGetDependentNodes_v2(Dispatch& d) { node_array(d); }

void cuGraphAddDependencies(Dispatch& d) { change_deps(d); }
void cuGraphAddDependencies_v2(Dispatch& d) { change_deps(d); }
void cuGraphRemoveDependencies(Dispatch& d) { change_deps(d); }
void cuGraphRemoveDependencies_v2(Dispatch& d) { change_deps(d); }

void cuGraphExecUpdate_v2(Dispatch& d) {
  uint64_t exec_id, graph_id;
  if (!wire::read_exec_update(d.args, &exec_id, &graph_id)) return;
  CUgraphExec exec;
  CUgraph graph;
  CUgraphExecUpdateResultInfo info{};
  CUresult rc;
  if (!d.handles.get(exec_id, &exec) || !d.handles.get(graph_id, &graph)) rc = CUDA_ERROR_INVALID_HANDLE;
  else rc = DRV(cuGraphExecUpdate_v2, exec, graph, &info);
  d.reply.put<int32_t>(rc);
  wire::put_exec_update_result(d.reply, {static_cast<uint32_t>(info.result), d.handles.id_for(info.errorNode),
                                         d.handles.id_for(info.errorFromNode)});
}

}  // namespace rgpu::server::handlers
