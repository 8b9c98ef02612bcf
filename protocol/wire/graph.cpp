// CUDA graphs on the wire (layout in graph.h).
#include "protocol/wire/graph.h"

#include <algorithm>

namespace rgpu::proto::wire {
namespace {

uint64_t id_of(const void* h) { return reinterpret_cast<uint64_t>(h); }
template <class H>
H as_handle(uint64_t id) {
  return reinterpret_cast<H>(id);
}

// An enum read as an integer and checked against its last value before it becomes the enum: the
// bytes are hostile.
template <class E>
E read_enum(Reader& r, uint32_t max) {
  uint32_t v = r.u32();
  if (v > max) {
    r.fail();
    return static_cast<E>(0);
  }
  return static_cast<E>(v);
}

// n × u64 ids, with n checked against what is left first (a hostile count allocates nothing).
bool read_ids(Reader& r, uint64_t n, std::vector<uint64_t>* out) {
  if (!r.ok() || n > kMaxNodes || n > r.left() / 8) return r.fail();
  out->resize(n);
  for (auto& v : *out) v = r.u64();
  return r.ok();
}

bool read_edges(Reader& r, uint64_t n, std::vector<CUgraphEdgeData>* out) {
  if (!r.ok() || n > kMaxNodes || n > r.left() / sizeof(CUgraphEdgeData)) return r.fail();
  out->resize(n);
  for (auto& e : *out) e = r.get<CUgraphEdgeData>();
  return r.ok();
}

}  // namespace

void put_node_list(Writer& w, const CUgraphNode* nodes, const CUgraphEdgeData* edges, size_t n) {
  w.put_u64(n);
  for (size_t i = 0; i < n; ++i) w.put_u64(id_of(nodes[i]));
  w.put_u8(edges != nullptr && n > 0);
  if (edges)
    for (size_t i = 0; i < n; ++i) w.put(edges[i]);
}

bool read_node_list(Reader& r, NodeList* out) {
  uint64_t n = r.u64();
  if (!read_ids(r, n, &out->nodes)) return false;
  out->has_edges = r.u8() != 0;
  out->edges.clear();
  if (out->has_edges && !read_edges(r, n, &out->edges)) return false;
  return r.ok();
}

void put_node_params(Writer& w, const CUgraphNodeParams& p, uint64_t host_callback) {
  w.put_u32(static_cast<uint32_t>(p.type));
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const auto& k = p.kernel;
      w.put_u64(id_of(k.func));
      w.put_u64(id_of(k.kern));
      w.put_u64(id_of(k.ctx));
      for (unsigned v : {k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.blockDimY, k.blockDimZ, k.sharedMemBytes})
        w.put_u32(v);
      break;  // LaunchArgs: the caller's
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D c = p.memcpy.copyParams;
      c.srcHost = c.dstHost = nullptr;  // never a process's own addresses
      c.reserved0 = c.reserved1 = nullptr;
      w.put_u64(id_of(p.memcpy.copyCtx));
      w.put(c);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const auto& m = p.memset;
      w.put_u64(id_of(m.ctx));
      w.put_u64(m.dst);
      w.put_u64(m.pitch);
      w.put_u32(m.value);
      w.put_u32(m.elementSize);
      w.put_u64(m.width);
      w.put_u64(m.height);
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      w.put_u64(host_callback);
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      w.put_u64(id_of(p.graph.graph));
      w.put_u32(static_cast<uint32_t>(p.graph.ownership));
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      w.put_u64(id_of(p.eventWait.event));
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      w.put_u64(id_of(p.eventRecord.event));
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      const auto& a = p.alloc;
      CUmemPoolProps props = a.poolProps;
      props.win32SecurityAttributes = nullptr;  // Windows only
      w.put(props);
      size_t n = a.accessDescs ? std::min<size_t>(a.accessDescCount, kMaxAccessDescs) : 0;
      w.put_u32(static_cast<uint32_t>(n));
      for (size_t i = 0; i < n; ++i) w.put(a.accessDescs[i]);
      w.put_u64(a.bytesize);
      w.put_u64(a.dptr);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      w.put_u64(p.free.dptr);
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      w.put_u64(p.conditional.handle);
      w.put_u32(static_cast<uint32_t>(p.conditional.type));
      w.put_u32(p.conditional.size);
      w.put_u64(id_of(p.conditional.ctx));
      break;
    default:  // EMPTY: nothing; the others do not travel (callers refuse them)
      break;
  }
}

bool read_node_params(Reader& r, NodeParams* out) {
  CUgraphNodeParams& p = out->p;
  p = CUgraphNodeParams{};
  out->host_callback = 0;
  out->descs.clear();
  p.type = read_enum<CUgraphNodeType>(r, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  if (!r.ok()) return false;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      auto& k = p.kernel;
      k.func = as_handle<CUfunction>(r.u64());
      k.kern = as_handle<CUkernel>(r.u64());
      k.ctx = as_handle<CUcontext>(r.u64());
      unsigned* dims[] = {&k.gridDimX, &k.gridDimY, &k.gridDimZ, &k.blockDimX, &k.blockDimY, &k.blockDimZ,
                          &k.sharedMemBytes};
      for (unsigned* v : dims) *v = r.u32();
      if (!r.ok() || !read_launch_args(r, &out->args)) return false;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      p.memcpy.copyCtx = as_handle<CUcontext>(r.u64());
      CUDA_MEMCPY3D& c = p.memcpy.copyParams;
      c = r.get<CUDA_MEMCPY3D>();
      c.srcHost = c.dstHost = nullptr;
      c.reserved0 = c.reserved1 = nullptr;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      auto& m = p.memset;
      m.ctx = as_handle<CUcontext>(r.u64());
      m.dst = r.u64();
      m.pitch = r.u64();
      m.value = r.u32();
      m.elementSize = r.u32();
      m.width = r.u64();
      m.height = r.u64();
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      out->host_callback = r.u64();
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      p.graph.graph = as_handle<CUgraph>(r.u64());
      p.graph.ownership = read_enum<CUgraphChildGraphNodeOwnership>(r, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      p.eventWait.event = as_handle<CUevent>(r.u64());
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      p.eventRecord.event = as_handle<CUevent>(r.u64());
      break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      auto& a = p.alloc;
      a.poolProps = r.get<CUmemPoolProps>();
      a.poolProps.win32SecurityAttributes = nullptr;
      uint32_t n = r.u32();
      if (!r.ok() || n > kMaxAccessDescs || n > r.left() / sizeof(CUmemAccessDesc)) return r.fail();
      out->descs.resize(n);
      for (auto& d : out->descs) d = r.get<CUmemAccessDesc>();
      a.accessDescs = n ? out->descs.data() : nullptr;
      a.accessDescCount = n;
      a.bytesize = r.u64();
      a.dptr = r.u64();
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      p.free.dptr = r.u64();
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      auto& c = p.conditional;
      c.handle = r.u64();
      c.type = read_enum<CUgraphConditionalNodeType>(r, CU_GRAPH_COND_TYPE_SWITCH);
      c.size = r.u32();
      if (c.size > kMaxBodies) return r.fail();
      c.ctx = as_handle<CUcontext>(r.u64());
      break;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;
    default:
      return r.fail();  // external semaphores, batched memory operations: never sent
  }
  return r.ok();
}

void put_add_node_head(Writer& w, uint64_t node, uint64_t graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                       size_t n) {
  w.put_u64(node);
  w.put_u64(graph);
  put_node_list(w, deps, edges, n);
}

bool read_add_node(Reader& r, AddNode* out) {
  out->node = r.u64();
  out->graph = r.u64();
  return read_node_list(r, &out->deps) && read_node_params(r, &out->params);
}

void put_add_node_reply(Writer& w, CUgraphNodeType type, CUdeviceptr dptr, const std::vector<uint64_t>& bodies) {
  if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) w.put_u64(dptr);
  if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    w.put_u32(static_cast<uint32_t>(bodies.size()));
    for (uint64_t b : bodies) w.put_u64(b);
  }
}

bool read_add_node_reply(Reader& r, CUgraphNodeType type, AddNodeReply* out) {
  if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) out->dptr = r.u64();
  if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    uint32_t n = r.u32();
    if (!r.ok() || n > kMaxBodies) return r.fail();
    if (!read_ids(r, n, &out->bodies)) return false;
  }
  return r.ok();
}

void put_set_params_head(Writer& w, bool in_exec, uint64_t exec, uint64_t node) {
  if (in_exec) w.put_u64(exec);
  w.put_u64(node);
}

bool read_set_params(Reader& r, bool in_exec, SetParams* out) {
  out->exec = in_exec ? r.u64() : 0;
  out->node = r.u64();
  return r.ok() && read_node_params(r, &out->params);
}

void put_get_params(Writer& w, uint64_t node) { w.put_u64(node); }

bool read_get_params(Reader& r, uint64_t* node) {
  *node = r.u64();
  return r.ok();
}

void put_node_array_ask(Writer& w, const NodeArrayAsk& a) {
  w.put_u64(a.handle);
  w.put_u8(a.want_nodes);
  w.put_u8(a.want_edges);
  w.put_u64(a.capacity);
}

bool read_node_array_ask(Reader& r, NodeArrayAsk* out) {
  out->handle = r.u64();
  out->want_nodes = r.u8() != 0;
  out->want_edges = r.u8() != 0;
  out->capacity = r.u64();
  if (!r.ok() || out->capacity > kMaxNodes) return r.fail();
  return true;
}

void put_node_array(Writer& w, const NodeArrayAsk& a, bool edges_form, const NodeArray& v) {
  w.put_u64(v.count);
  auto ids = [&](const std::vector<uint64_t>& x) {
    for (uint64_t i = 0; i < a.capacity; ++i) w.put_u64(i < x.size() ? x[i] : 0);
  };
  if (a.want_nodes) {
    ids(v.from);
    if (edges_form) ids(v.to);
  }
  if (a.want_edges)
    for (uint64_t i = 0; i < a.capacity; ++i) w.put(i < v.edges.size() ? v.edges[i] : CUgraphEdgeData{});
}

bool read_node_array(Reader& r, const NodeArrayAsk& a, bool edges_form, NodeArray* out) {
  out->count = r.u64();
  if (!r.ok() || a.capacity > kMaxNodes) return r.fail();
  out->from.clear();
  out->to.clear();
  out->edges.clear();
  if (a.want_nodes) {
    if (!read_ids(r, a.capacity, &out->from)) return false;
    if (edges_form && !read_ids(r, a.capacity, &out->to)) return false;
  }
  if (a.want_edges && !read_edges(r, a.capacity, &out->edges)) return false;
  return r.ok();
}

void put_dependency_change(Writer& w, uint64_t graph, const CUgraphNode* from, const CUgraphNode* to,
                           const CUgraphEdgeData* edges, size_t n) {
  w.put_u64(graph);
  w.put_u64(n);
  for (size_t i = 0; i < n; ++i) w.put_u64(id_of(from[i]));
  for (size_t i = 0; i < n; ++i) w.put_u64(id_of(to[i]));
  w.put_u8(edges != nullptr && n > 0);
  if (edges)
    for (size_t i = 0; i < n; ++i) w.put(edges[i]);
}

bool read_dependency_change(Reader& r, DependencyChange* out) {
  out->graph = r.u64();
  uint64_t n = r.u64();
  if (!r.ok() || n > kMaxNodes || n > r.left() / 16) return r.fail();
  if (!read_ids(r, n, &out->from) || !read_ids(r, n, &out->to)) return false;
  out->has_edges = r.u8() != 0;
  out->edges.clear();
  if (out->has_edges && !read_edges(r, n, &out->edges)) return false;
  return r.ok();
}

void put_exec_update(Writer& w, uint64_t exec, uint64_t graph) {
  w.put_u64(exec);
  w.put_u64(graph);
}

bool read_exec_update(Reader& r, uint64_t* exec, uint64_t* graph) {
  *exec = r.u64();
  *graph = r.u64();
  return r.ok();
}

void put_exec_update_result(Writer& w, const ExecUpdateResult& v) {
  w.put_u32(v.result);
  w.put_u64(v.error_node);
  w.put_u64(v.error_from_node);
}

bool read_exec_update_result(Reader& r, ExecUpdateResult* out) {
  out->result = r.u32();
  out->error_node = r.u64();
  out->error_from_node = r.u64();
  return r.ok();
}

CUgraphNodeParams from_copy(const CUDA_MEMCPY3D& c, CUcontext ctx) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p.memcpy.copyCtx = ctx;
  p.memcpy.copyParams = c;
  return p;
}

CUgraphNodeParams from_memset(const CUDA_MEMSET_NODE_PARAMS& m, CUcontext ctx) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = m.dst;
  p.memset.pitch = m.pitch;
  p.memset.value = m.value;
  p.memset.elementSize = m.elementSize;
  p.memset.width = m.width;
  p.memset.height = m.height;
  p.memset.ctx = ctx;
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

CUgraphNodeParams from_host(const CUDA_HOST_NODE_PARAMS& h) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = h.fn;
  p.host.userData = h.userData;
  return p;
}

CUDA_HOST_NODE_PARAMS to_host(const CUgraphNodeParams& p) { return CUDA_HOST_NODE_PARAMS{p.host.fn, p.host.userData}; }

CUgraphNodeParams from_alloc(const CUDA_MEM_ALLOC_NODE_PARAMS& a) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  p.alloc.poolProps = a.poolProps;
  p.alloc.accessDescs = a.accessDescs;
  p.alloc.accessDescCount = a.accessDescCount;
  p.alloc.bytesize = a.bytesize;
  p.alloc.dptr = a.dptr;
  return p;
}

CUDA_MEM_ALLOC_NODE_PARAMS to_alloc(const CUgraphNodeParams& p) {
  CUDA_MEM_ALLOC_NODE_PARAMS a{};
  a.poolProps = p.alloc.poolProps;
  a.accessDescs = p.alloc.accessDescs;
  a.accessDescCount = p.alloc.accessDescCount;
  a.bytesize = p.alloc.bytesize;
  a.dptr = p.alloc.dptr;
  return a;
}

}  // namespace rgpu::proto::wire
