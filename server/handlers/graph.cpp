// CUDA graph nodes (wire layouts in client/driver/graph.cpp). Node parameters arrive in one
// encoding (NodeParams) for every entry point; each handler decodes them into CUgraphNodeParams,
// resolving every handle id, and calls the driver's entry point of the same name, rebuilding the
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
#include "server/dispatch.h"
#include "server/handlers/launch_args.h"

namespace rgpu::server::handlers {
namespace {

constexpr uint64_t kMaxNodes = 1 << 20;
constexpr uint32_t kMaxAccessDescs = 1024;
constexpr uint32_t kMaxBodies = 1 << 16;

#define DRV(fn, ...) (d.drv.fn ? d.drv.fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

struct HostNode {
  ClientCallbacks* callbacks;
  uint64_t id;
};

void CUDA_CB host_node_fn(void* p) {
  auto* h = static_cast<HostNode*>(p);
  h->callbacks->run(h->id, CUDA_SUCCESS);
}

// Decoded NodeParams and what its pointers point at.
struct Node {
  CUgraphNodeParams p{};
  KernelArgs args;
  std::vector<CUmemAccessDesc> descs;
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

template <class E>
E read_enum(Dispatch& d, uint32_t max) {
  uint32_t v = d.args.u32();
  if (v > max) d.args.fail();
  return static_cast<E>(v);
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

// Reads NodeParams into *n. Returns false when the handler must stop: the payload is malformed
// (d.args.ok() false) or a reply is already written. Handle and value errors found on the way
// are left in *bad for the caller to answer once everything is read.
bool read_params(Dispatch& d, Node* n, CUresult* bad) {
  CUgraphNodeParams& p = n->p;
  p.type = read_enum<CUgraphNodeType>(d, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  if (!d.args.ok()) return false;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      auto& k = p.kernel;
      uint64_t fid = d.args.u64(), kid = d.args.u64(), cid = d.args.u64();
      unsigned* dims[] = {&k.gridDimX, &k.gridDimY, &k.gridDimZ, &k.blockDimX, &k.blockDimY, &k.blockDimZ,
                          &k.sharedMemBytes};
      for (unsigned* v : dims) *v = d.args.u32();
      if (!d.args.ok() || !read_launch_args(d, &n->args)) return false;
      get_handle(d, fid, &k.func, bad);
      get_handle(d, kid, &k.kern, bad);
      get_handle(d, cid, &k.ctx, bad);
      CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
      if (f && !launch_args_fit(d, k.func ? fid : kid, f, &n->args) && *bad == CUDA_SUCCESS)
        *bad = CUDA_ERROR_INVALID_VALUE;
      k.kernelParams = n->args.params();
      k.extra = n->args.extras();
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      get_handle(d, d.args.u64(), &p.memcpy.copyCtx, bad);
      CUDA_MEMCPY3D& c = p.memcpy.copyParams;
      c = d.args.get<CUDA_MEMCPY3D>();
      if (!d.args.ok()) return false;
      if (!copy_side_ok(d, c, offsetof(CUDA_MEMCPY3D, srcMemoryType), c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ,
                        c.srcPitch, c.srcHeight) ||
          !copy_side_ok(d, c, offsetof(CUDA_MEMCPY3D, dstMemoryType), c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ,
                        c.dstPitch, c.dstHeight)) {
        if (*bad == CUDA_SUCCESS) *bad = CUDA_ERROR_NOT_SUPPORTED;  // host sides never come from a client of ours
        c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      }
      c.srcHost = c.dstHost = nullptr;
      c.reserved0 = c.reserved1 = nullptr;
      uint64_t src_array = reinterpret_cast<uint64_t>(c.srcArray), dst_array = reinterpret_cast<uint64_t>(c.dstArray);
      c.srcArray = c.dstArray = nullptr;
      if (c.srcMemoryType == CU_MEMORYTYPE_ARRAY) get_handle(d, src_array, &c.srcArray, bad);
      if (c.dstMemoryType == CU_MEMORYTYPE_ARRAY) get_handle(d, dst_array, &c.dstArray, bad);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      auto& m = p.memset;
      get_handle(d, d.args.u64(), &m.ctx, bad);
      m.dst = d.args.u64();
      m.pitch = d.args.u64();
      m.value = d.args.u32();
      m.elementSize = d.args.u32();
      m.width = d.args.u64();
      m.height = d.args.u64();
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      uint64_t id = d.args.u64();
      if (!d.callbacks) {
        if (*bad == CUDA_SUCCESS) *bad = CUDA_ERROR_NOT_SUPPORTED;
        break;
      }
      n->host = new HostNode{d.callbacks, id};
      p.host.fn = host_node_fn;
      p.host.userData = n->host;
      break;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      get_handle(d, d.args.u64(), &p.graph.graph, bad);
      p.graph.ownership = read_enum<CUgraphChildGraphNodeOwnership>(d, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      get_handle(d, d.args.u64(), &p.eventWait.event, bad);
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      get_handle(d, d.args.u64(), &p.eventRecord.event, bad);
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      auto& a = p.alloc;
      a.poolProps = d.args.get<CUmemPoolProps>();
      a.poolProps.win32SecurityAttributes = nullptr;
      uint32_t nd = d.args.u32();
      if (nd > kMaxAccessDescs) return d.args.fail();
      n->descs.resize(nd);
      for (auto& desc : n->descs) desc = d.args.get<CUmemAccessDesc>();
      a.accessDescs = nd ? n->descs.data() : nullptr;
      a.accessDescCount = nd;
      a.bytesize = d.args.u64();
      d.args.u64();  // dptr: an output
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      p.free.dptr = d.args.u64();
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      auto& c = p.conditional;
      c.handle = d.args.u64();
      c.type = read_enum<CUgraphConditionalNodeType>(d, CU_GRAPH_COND_TYPE_SWITCH);
      c.size = d.args.u32();
      if (c.size > kMaxBodies) return d.args.fail();
      get_handle(d, d.args.u64(), &c.ctx, bad);
      break;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;
    default:
      return d.args.fail();  // a client of ours sends only the types above
  }
  return d.args.ok();
}

// Writes NodeParams for what a getter read back (kernel, memcpy, host and allocation nodes).
void put_params(Dispatch& d, const CUgraphNodeParams& p) {
  Writer& w = d.reply;
  w.put_u32(static_cast<uint32_t>(p.type));
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const auto& k = p.kernel;
      uint64_t fid = d.handles.id_for(k.func), kid = d.handles.id_for(k.kern);
      w.put_u64(fid);
      w.put_u64(kid);
      w.put_u64(d.handles.id_for(k.ctx));
      for (unsigned v : {k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.blockDimY, k.blockDimZ, k.sharedMemBytes})
        w.put_u32(v);
      CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
      put_launch_args(d, k.func ? fid : kid, f, k.kernelParams, k.extra, w);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D c = p.memcpy.copyParams;
      c.srcHost = c.dstHost = nullptr;  // never this process's addresses to the client
      c.reserved0 = c.reserved1 = nullptr;
      c.srcArray = reinterpret_cast<CUarray>(c.srcArray ? d.handles.id_for(c.srcArray) : 0);
      c.dstArray = reinterpret_cast<CUarray>(c.dstArray ? d.handles.id_for(c.dstArray) : 0);
      w.put_u64(d.handles.id_for(p.memcpy.copyCtx));
      w.put(c);
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      w.put_u64(p.host.fn == host_node_fn && p.host.userData ? static_cast<HostNode*>(p.host.userData)->id : 0);
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      CUmemPoolProps props = p.alloc.poolProps;
      props.win32SecurityAttributes = nullptr;
      w.put(props);
      size_t n = p.alloc.accessDescs ? std::min<size_t>(p.alloc.accessDescCount, kMaxAccessDescs) : 0;
      w.put_u32(static_cast<uint32_t>(n));
      for (size_t i = 0; i < n; ++i) w.put(p.alloc.accessDescs[i]);
      w.put_u64(p.alloc.bytesize);
      w.put_u64(p.alloc.dptr);
      break;
    }
    default:
      break;
  }
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

template <class K>
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

CUDA_MEMSET_NODE_PARAMS to_memset(const CUgraphNodeParams& p) {
  CUDA_MEMSET_NODE_PARAMS m{};
  m.dst = p.memset.dst;
  m.pitch = p.memset.pitch;
  m.value = p.memset.value;
  m.elementSize = p.memset.elementSize;
  m.width = p.memset.width;
  m.height = p.memset.height;
  return m;
}

CUDA_HOST_NODE_PARAMS to_host(const CUgraphNodeParams& p) { return CUDA_HOST_NODE_PARAMS{p.host.fn, p.host.userData}; }

CUDA_MEM_ALLOC_NODE_PARAMS to_alloc(const CUgraphNodeParams& p) {
  CUDA_MEM_ALLOC_NODE_PARAMS a{};
  a.poolProps = p.alloc.poolProps;
  a.accessDescs = p.alloc.accessDescs;
  a.accessDescCount = p.alloc.accessDescCount;
  a.bytesize = p.alloc.bytesize;
  return a;
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
  uint64_t id = d.args.u64();
  uint64_t gid = d.args.u64();
  uint64_t n = d.args.u64();
  if (!d.args.ok() || n > kMaxNodes || n > d.args.left() / 8) return (void)d.args.fail();
  std::vector<uint64_t> dep_ids(n);
  for (auto& v : dep_ids) v = d.args.u64();
  bool has_edges = d.args.u8() != 0;
  if (has_edges && d.op != op::cuGraphAddNode_v2) return (void)d.args.fail();
  std::vector<CUgraphEdgeData> edges(has_edges ? n : 0);
  for (auto& e : edges) e = d.args.get<CUgraphEdgeData>();
  CUresult bad = CUDA_SUCCESS;
  Node node;
  if (!read_params(d, &node, &bad)) return;
  int want = expected_type(d.op);
  if (want >= 0 && node.p.type != want) return (void)d.args.fail();
  CUgraph g = nullptr;
  get_handle(d, gid, &g, &bad);
  std::vector<CUgraphNode> deps(n);
  for (size_t i = 0; i < n; ++i) get_handle(d, dep_ids[i], &deps[i], &bad);
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  CUgraphNode out = nullptr;
  CUresult rc = call_add(d, &out, g, n ? deps.data() : nullptr, has_edges ? edges.data() : nullptr, n, node.p);
  if (rc == CUDA_SUCCESS && !d.handles.bind(id, out)) rc = CUDA_ERROR_INVALID_VALUE;
  d.reply.put<int32_t>(rc);
  if (rc != CUDA_SUCCESS) return;
  node.accepted();
  if (node.p.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) d.reply.put_u64(node.p.alloc.dptr);
  if (node.p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    const auto& c = node.p.conditional;
    uint32_t nb = c.phGraph_out ? c.size : 0;
    d.reply.put_u32(nb);
    for (uint32_t i = 0; i < nb; ++i) d.reply.put_u64(d.handles.id_for(c.phGraph_out[i]));
  }
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
  uint64_t exec_id = in_exec ? d.args.u64() : 0;
  uint64_t node_id = d.args.u64();
  CUresult bad = CUDA_SUCCESS;
  Node node;
  if (!read_params(d, &node, &bad)) return;
  int want = expected_type(d.op);
  if (want >= 0 && node.p.type != want) return (void)d.args.fail();
  CUgraphExec exec = nullptr;
  CUgraphNode target = nullptr;
  if (in_exec) get_handle(d, exec_id, &exec, &bad);
  get_handle(d, node_id, &target, &bad);
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  CUresult rc = call_set(d, exec, target, node.p);
  if (rc == CUDA_SUCCESS) node.accepted();
  d.reply.put<int32_t>(rc);
}

void get(Dispatch& d) {
  uint64_t node_id = d.args.u64();
  if (!d.args.ok()) return;
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
      p.type = CU_GRAPH_NODE_TYPE_HOST;
      rc = DRV(cuGraphHostNodeGetParams, node, &h);
      p.host.fn = h.fn;
      p.host.userData = h.userData;
      break;
    }
    case op::cuGraphMemAllocNodeGetParams: {
      CUDA_MEM_ALLOC_NODE_PARAMS a{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      rc = DRV(cuGraphMemAllocNodeGetParams, node, &a);
      p.alloc.poolProps = a.poolProps;
      p.alloc.accessDescs = a.accessDescs;
      p.alloc.accessDescCount = a.accessDescCount;
      p.alloc.bytesize = a.bytesize;
      p.alloc.dptr = a.dptr;
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
  uint64_t hid = d.args.u64();
  bool want = d.args.u8() != 0;
  bool want_edges = d.args.u8() != 0;
  uint64_t cap = d.args.u64();
  if (!d.args.ok()) return;
  if (cap > kMaxNodes) return (void)d.args.fail();
  void* h = nullptr;
  if (!d.handles.get_raw(hid, &h)) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  auto graph = static_cast<CUgraph>(h);
  auto node = static_cast<CUgraphNode>(h);
  bool edges_form = d.op == op::cuGraphGetEdges || d.op == op::cuGraphGetEdges_v2;
  // Never an empty array where the caller gave one: the driver reads NULL as "count only".
  size_t len = std::max<uint64_t>(cap, 1);
  std::vector<CUgraphNode> a(want ? len : 0), b(want && edges_form ? len : 0);
  std::vector<CUgraphEdgeData> e(want_edges ? len : 0);
  CUgraphNode* pa = want ? a.data() : nullptr;
  CUgraphNode* pb = want && edges_form ? b.data() : nullptr;
  CUgraphEdgeData* pe = want_edges ? e.data() : nullptr;
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
  d.reply.put_u64(count);
  if (want) {
    for (uint64_t i = 0; i < cap; ++i) d.reply.put_u64(d.handles.id_for(a[i]));
    if (edges_form)
      for (uint64_t i = 0; i < cap; ++i) d.reply.put_u64(d.handles.id_for(b[i]));
  }
  if (want_edges)
    for (uint64_t i = 0; i < cap; ++i) d.reply.put(e[i]);
}

void change_deps(Dispatch& d) {
  uint64_t gid = d.args.u64();
  uint64_t n = d.args.u64();
  if (!d.args.ok() || n > kMaxNodes || n > d.args.left() / 16) return (void)d.args.fail();
  std::vector<uint64_t> ids(2 * n);
  for (auto& v : ids) v = d.args.u64();
  bool has_edges = d.args.u8() != 0;
  std::vector<CUgraphEdgeData> edges(has_edges ? n : 0);
  for (auto& e : edges) e = d.args.get<CUgraphEdgeData>();
  if (!d.args.ok()) return;
  CUresult bad = CUDA_SUCCESS;
  CUgraph g = nullptr;
  get_handle(d, gid, &g, &bad);
  std::vector<CUgraphNode> nodes(2 * n);
  for (size_t i = 0; i < 2 * n; ++i) get_handle(d, ids[i], &nodes[i], &bad);
  if (bad != CUDA_SUCCESS) return d.reply.put<int32_t>(bad);
  const CUgraphNode* from = n ? nodes.data() : nullptr;
  const CUgraphNode* to = n ? nodes.data() + n : nullptr;
  const CUgraphEdgeData* e = has_edges ? edges.data() : nullptr;
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
  uint64_t exec_id = d.args.u64(), graph_id = d.args.u64();
  if (!d.args.ok()) return;
  CUgraphExec exec;
  CUgraph graph;
  CUgraphExecUpdateResultInfo info{};
  CUresult rc;
  if (!d.handles.get(exec_id, &exec) || !d.handles.get(graph_id, &graph)) rc = CUDA_ERROR_INVALID_HANDLE;
  else rc = DRV(cuGraphExecUpdate_v2, exec, graph, &info);
  d.reply.put<int32_t>(rc);
  d.reply.put_u32(static_cast<uint32_t>(info.result));
  d.reply.put_u64(d.handles.id_for(info.errorNode));
  d.reply.put_u64(d.handles.id_for(info.errorFromNode));
}

}  // namespace rgpu::server::handlers
