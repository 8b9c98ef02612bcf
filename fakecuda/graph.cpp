// CUDA graphs, the building side: graphs built node by node (kernel, memcpy as cuMemcpy3DAsync,
// memset, host, child graph, empty, event record/wait, memory alloc/free, conditional), node
// parameters (of a graph's node, or of its copy in an instance: one update path), topology
// queries and edits, cloning, graph memory, and stream capture, which builds a graph from the
// work queued on a stream. Instances and launches are fakecuda/graph_exec.cpp; the objects and
// the locking rule are fakecuda/graph.h.
//
// Semantics worth knowing:
// - Parameters are checked when set (node creation, *SetParams): unknown handles, zero
//   dimensions, memset element sizes, device ranges outside one allocation → errors then, as on
//   the real driver. Kernel arguments are packed by the image's layout at that moment.
// - Memory alloc nodes allocate at node creation, so the address is fixed (as the driver's is);
//   the memory lives as long as any graph or instance holding the node; free nodes do nothing.
//   cuDeviceGetGraphMemAttribute counts the bytes of live alloc nodes (used = reserved).
// - Conditional handles keep their default value; what a launch does with it is graph_exec.cpp's.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "fakecuda/graph.h"
#include "fakecuda/internal.h"

using namespace fake;

namespace {

// Bytes held by graph allocations now, and the most ever (cuDeviceGetGraphMemAttribute: the
// fake's used and reserved memory are the same).
std::atomic<uint64_t> g_graph_bytes{0}, g_graph_bytes_high{0};

}  // namespace

fake::GraphAlloc::~GraphAlloc() {
  if (ptr) free_device(ptr);
  g_graph_bytes -= size;
}

namespace fake {

std::mutex& g_graph_mu = *new std::mutex;  // never destroyed, as g_mu

}  // namespace fake

namespace {

auto& g_graphs = *new std::unordered_map<CUgraph_st*, std::unique_ptr<CUgraph_st>>();  // top-level
auto& g_all_graphs = *new std::unordered_set<CUgraph_st*>();   // visible, nested included
auto& g_nodes = *new std::unordered_set<CUgraphNode_st*>();    // visible
auto& g_graph_allocs = *new std::unordered_map<CUdeviceptr, std::weak_ptr<fake::GraphAlloc>>();

}  // namespace

CUresult fake::free_graph_alloc(CUdeviceptr p) {
  std::lock_guard lk(g_graph_mu);
  auto it = g_graph_allocs.find(p);
  if (it == g_graph_allocs.end()) return CUDA_ERROR_NOT_FOUND;
  auto mem = it->second.lock();
  if (!mem) {
    g_graph_allocs.erase(it);
    return CUDA_ERROR_NOT_FOUND;
  }
  if (!mem->outstanding) return CUDA_ERROR_INVALID_VALUE;
  mem->outstanding = false;
  return CUDA_SUCCESS;
}

namespace {

struct CondHandle {
  CUgraph_st* graph;
  unsigned default_value;
  unsigned flags;
};
auto& g_cond = *new std::vector<CondHandle>();  // handle = index + 1

}  // namespace

namespace fake {

bool live_graph(CUgraph g) { return g && g_all_graphs.count(g); }
bool live_node(CUgraphNode n) { return n && g_nodes.count(n); }

unsigned cond_value(CUgraphConditionalHandle h) {
  const CondHandle& c = g_cond[h - 1];
  return (c.flags & CU_GRAPH_COND_ASSIGN_DEFAULT) ? c.default_value : 0;
}

}  // namespace fake

namespace {

void forget(CUgraph_st* g) {
  g_all_graphs.erase(g);
  for (auto& n : g->nodes) {
    g_nodes.erase(n.get());
    if (n->child) forget(n->child.get());
    for (auto& b : n->bodies) forget(b.get());
  }
}

// Footprint of one side of a 3D copy: [first, last) bytes from its base.
bool footprint(size_t x, size_t y, size_t z, size_t pitch, size_t height, size_t w, size_t h, size_t d,
               size_t* first, size_t* last) {
  size_t slice, t;
  if (__builtin_mul_overflow(pitch, height, &slice)) return false;
  if (__builtin_mul_overflow(z, slice, first) || __builtin_mul_overflow(y, pitch, &t) ||
      __builtin_add_overflow(*first, t, first) || __builtin_add_overflow(*first, x, first))
    return false;
  if (__builtin_mul_overflow(d - 1, slice, last) || __builtin_mul_overflow(h - 1, pitch, &t) ||
      __builtin_add_overflow(*last, t, last) || __builtin_add_overflow(*last, w, last) ||
      __builtin_add_overflow(*last, *first, last))
    return false;
  return true;
}

CUresult check_copy(const CUDA_MEMCPY3D& c) {
  if (!c.WidthInBytes || !c.Height || !c.Depth) return CUDA_ERROR_INVALID_VALUE;
  struct S {
    CUmemorytype type;
    const void* host;
    CUdeviceptr dev;
    size_t x, y, z, pitch, height;
  } sides[2] = {{c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight},
                {c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight}};
  for (const S& s : sides) {
    if (s.type == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;  // the fake has no arrays
    if (s.type == CU_MEMORYTYPE_HOST) {
      if (!s.host) return CUDA_ERROR_INVALID_VALUE;
      continue;
    }
    if (s.type != CU_MEMORYTYPE_DEVICE && s.type != CU_MEMORYTYPE_UNIFIED) return CUDA_ERROR_INVALID_VALUE;
    if (s.type == CU_MEMORYTYPE_UNIFIED && !in_device_window(s.dev)) continue;
    if ((c.Height > 1 || c.Depth > 1) && s.pitch < c.WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
    size_t first, last;
    Span span;
    if (!footprint(s.x, s.y, s.z, s.pitch, s.height, c.WidthInBytes, c.Height, c.Depth, &first, &last) ||
        !device_span(s.dev + first, last - first, &span))
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult check_memset(const CUDA_MEMSET_NODE_PARAMS_v2& m) {
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (!m.width || !m.height) return CUDA_ERROR_INVALID_VALUE;
  size_t row = m.width * m.elementSize;
  if (m.height > 1 && m.pitch < row) return CUDA_ERROR_INVALID_VALUE;
  size_t first = 0, last = 0;
  Span span;
  if (!footprint(0, 0, 0, m.pitch, m.height, row, m.height, 1, &first, &last) || !device_span(m.dst, last, &span))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Packs kernel arguments by the function's layout (as fakecuda's launch does).
CUresult pack_kernel(CUgraphNode_st* n, CUfunction f, void** kernelParams, void** extra) {
  std::vector<rgpu::image::Param> params;
  uint32_t bytes;
  {
    std::lock_guard lk(g_mu);
    if (!f || !g_funcs.count(f)) return CUDA_ERROR_INVALID_HANDLE;
    params = f->kernel->params;
    bytes = f->kernel->param_bytes;
  }
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> buf(bytes);
  if (kernelParams) {
    for (const auto& p : params) {
      if (!kernelParams[p.ordinal]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf.data() + p.offset, kernelParams[p.ordinal], p.size);
    }
  } else if (extra) {
    const void* ptr = nullptr;
    const size_t* size = nullptr;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (i > 64) return CUDA_ERROR_INVALID_VALUE;
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<const size_t*>(extra[i + 1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (!ptr || !size || *size != bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf.data(), ptr, bytes);
  } else if (bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  n->func = f;
  n->args = std::move(buf);
  n->arg_ptrs.assign(params.size(), nullptr);
  for (const auto& p : params)
    if (p.ordinal < n->arg_ptrs.size()) n->arg_ptrs[p.ordinal] = n->args.data() + p.offset;
  return CUDA_SUCCESS;
}

std::unique_ptr<CUgraphNode_st> clone_node(const CUgraphNode_st& n, bool visible,
                                           std::unordered_map<CUgraphNode_st*, CUgraphNode_st*>* map) {
  auto c = std::make_unique<CUgraphNode_st>();
  c->type = n.type;
  c->edges = n.edges;
  c->enabled = n.enabled;
  c->func = n.func;
  std::copy(std::begin(n.dims), std::end(n.dims), c->dims);
  c->args = n.args;
  for (void* p : n.arg_ptrs)
    c->arg_ptrs.push_back(p ? c->args.data() + (static_cast<uint8_t*>(p) - n.args.data()) : nullptr);
  c->copy = n.copy;
  c->memset = n.memset;
  c->fn = n.fn;
  c->user = n.user;
  c->work = n.work;
  if (n.child) c->child = clone_graph(*n.child, visible, map);
  c->cond = n.cond;
  for (auto& b : n.bodies) {
    c->bodies.push_back(clone_graph(*b, visible, map));
    c->body_handles.push_back(c->bodies.back().get());
  }
  c->event = n.event;
  c->alloc = n.alloc;
  c->descs = n.descs;
  c->alloc.accessDescs = c->descs.empty() ? nullptr : c->descs.data();
  c->mem = n.mem;
  c->free_ptr = n.free_ptr;
  return c;
}

}  // namespace

namespace fake {

std::unique_ptr<CUgraph_st> clone_graph(const CUgraph_st& g, bool visible,
                                        std::unordered_map<CUgraphNode_st*, CUgraphNode_st*>* map) {
  auto c = std::make_unique<CUgraph_st>();
  c->ctx = g.ctx;
  c->visible = visible;
  std::unordered_map<CUgraphNode_st*, CUgraphNode_st*> local;
  for (auto& n : g.nodes) {
    auto copy = clone_node(*n, visible, map);
    copy->graph = c.get();
    local[n.get()] = copy.get();
    if (map) (*map)[n.get()] = copy.get();
    if (visible) g_nodes.insert(copy.get());
    c->nodes.push_back(std::move(copy));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (CUgraphNode_st* dep : g.nodes[i]->deps) c->nodes[i]->deps.push_back(local.at(dep));
  if (visible) g_all_graphs.insert(c.get());
  return c;
}

}  // namespace fake

namespace {

CUgraph_st* new_body(CUgraph_st* parent) {
  auto* b = new CUgraph_st;
  b->ctx = parent->ctx;
  b->visible = parent->visible;
  if (b->visible) g_all_graphs.insert(b);
  return b;
}

// Sets n's parameters from p (n->type already p.type). g_graph_mu held.
CUresult set_params(CUgraphNode_st* n, CUgraphNodeParams* p) {
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const auto& k = p->kernel;
      const unsigned dims[7] = {k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.blockDimY, k.blockDimZ,
                                k.sharedMemBytes};
      for (int i = 0; i < 6; ++i)
        if (!dims[i]) return CUDA_ERROR_INVALID_VALUE;
      if (uint64_t(k.blockDimX) * k.blockDimY * k.blockDimZ > uint64_t(kMaxThreadsPerBlock))
        return CUDA_ERROR_INVALID_VALUE;
      CUfunction f = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);  // a CUkernel is a CUfunction here
      if (CUresult r = pack_kernel(n, f, k.kernelParams, k.extra)) return r;
      std::copy(dims, dims + 7, n->dims);
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (CUresult r = check_copy(p->memcpy.copyParams)) return r;
      n->copy = p->memcpy.copyParams;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      if (CUresult r = check_memset(p->memset)) return r;
      n->memset = p->memset;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_HOST:
      if (!p->host.fn) return CUDA_ERROR_INVALID_VALUE;
      n->fn = p->host.fn;
      n->user = p->host.userData;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (!live_graph(p->graph.graph)) return CUDA_ERROR_INVALID_VALUE;
      n->child = clone_graph(*p->graph.graph, n->graph->visible, nullptr);
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
      CUevent e = p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT ? p->eventWait.event : p->eventRecord.event;
      std::lock_guard lk(g_mu);
      if (!e || !g_events.count(e)) return CUDA_ERROR_INVALID_VALUE;
      n->event = e;
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      auto& a = p->alloc;
      if (!a.bytesize || a.poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
          a.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(a.poolProps.location.id) ||
          (a.accessDescCount && !a.accessDescs))
        return CUDA_ERROR_INVALID_VALUE;
      auto mem = std::make_shared<GraphAlloc>();
      // In whole 2 MiB granules, as the driver's graph pool maps them (H200: aligned to 2 MiB).
      if (CUresult r = alloc_device_aligned(&mem->ptr, a.bytesize, size_t(2) << 20)) return r;
      mem->size = a.bytesize;
      uint64_t now = g_graph_bytes += a.bytesize;
      for (uint64_t high = g_graph_bytes_high; now > high && !g_graph_bytes_high.compare_exchange_weak(high, now);) {
      }
      g_graph_allocs[mem->ptr] = mem;
      n->mem = mem;
      n->descs.assign(a.accessDescs, a.accessDescs + a.accessDescCount);
      n->alloc = a;
      n->alloc.accessDescs = n->descs.empty() ? nullptr : n->descs.data();
      n->alloc.dptr = a.dptr = mem->ptr;
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      if (!g_graph_allocs.count(p->free.dptr) || g_graph_allocs[p->free.dptr].expired()) return CUDA_ERROR_INVALID_VALUE;
      n->free_ptr = p->free.dptr;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      auto& c = p->conditional;
      if (!c.handle || c.handle > g_cond.size() || g_cond[c.handle - 1].graph != n->graph) return CUDA_ERROR_INVALID_VALUE;
      bool size_ok = c.type == CU_GRAPH_COND_TYPE_IF     ? (c.size == 1 || c.size == 2)
                     : c.type == CU_GRAPH_COND_TYPE_WHILE ? c.size == 1
                     : c.type == CU_GRAPH_COND_TYPE_SWITCH ? c.size >= 1 && c.size <= 1024
                                                          : false;
      if (!size_ok) return CUDA_ERROR_INVALID_VALUE;
      n->cond = c;
      for (unsigned i = 0; i < c.size; ++i) {
        n->bodies.emplace_back(new_body(n->graph));
        n->body_handles.push_back(n->bodies.back().get());
      }
      n->cond.phGraph_out = n->body_handles.data();
      c.phGraph_out = n->body_handles.data();
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult add_node(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                  CUgraphNodeParams* p) {
  if (CUresult r = check_init()) return r;
  if (!out || !p || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    if (!live_node(deps[i]) || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; ++j)
      if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;  // duplicate dependency
  }
  auto node = std::make_unique<CUgraphNode_st>();
  node->graph = g;
  node->type = p->type;
  if (CUresult r = set_params(node.get(), p)) return r;
  node->deps.assign(deps, deps + n);
  node->edges.assign(n, CUgraphEdgeData{});
  if (edges) std::copy(edges, edges + n, node->edges.begin());
  *out = node.get();
  g_nodes.insert(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

CUgraphNodeParams of_type(CUgraphNodeType t) {
  CUgraphNodeParams p{};
  p.type = t;
  return p;
}

template <class K>
CUgraphNodeParams from_kernel(const K& k) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_KERNEL);
  p.kernel.func = k.func;
  p.kernel.gridDimX = k.gridDimX, p.kernel.gridDimY = k.gridDimY, p.kernel.gridDimZ = k.gridDimZ;
  p.kernel.blockDimX = k.blockDimX, p.kernel.blockDimY = k.blockDimY, p.kernel.blockDimZ = k.blockDimZ;
  p.kernel.sharedMemBytes = k.sharedMemBytes;
  p.kernel.kernelParams = k.kernelParams;
  p.kernel.extra = k.extra;
  if constexpr (requires { k.kern; }) p.kernel.kern = k.kern;
  return p;
}

template <class K>
void to_kernel(const CUgraphNode_st* n, K* k) {
  *k = K{};
  k->func = n->func;
  k->gridDimX = n->dims[0], k->gridDimY = n->dims[1], k->gridDimZ = n->dims[2];
  k->blockDimX = n->dims[3], k->blockDimY = n->dims[4], k->blockDimZ = n->dims[5];
  k->sharedMemBytes = n->dims[6];
  k->kernelParams = const_cast<void**>(n->arg_ptrs.empty() ? nullptr : n->arg_ptrs.data());
}

CUgraphNodeParams from_memset(const CUDA_MEMSET_NODE_PARAMS& m, CUcontext ctx) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEMSET);
  p.memset.dst = m.dst, p.memset.pitch = m.pitch, p.memset.value = m.value;
  p.memset.elementSize = m.elementSize, p.memset.width = m.width, p.memset.height = m.height;
  p.memset.ctx = ctx;
  return p;
}

// Sets the parameters of a node of a graph (exec == nullptr) or of its copy in an instance.
CUresult update(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  if (CUresult r = check_init()) return r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_node(node)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNode_st* target = node;
  if (exec) {
    if (!g_execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
    auto it = exec->copy_of.find(node);
    if (it == exec->copy_of.end()) return CUDA_ERROR_INVALID_VALUE;
    target = it->second;
  }
  if (target->type != p->type) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
      CUgraphNode_st scratch;  // set into a scratch node first: a refused update changes nothing
      scratch.graph = target->graph;
      scratch.type = target->type;
      if (CUresult r = set_params(&scratch, p)) return r;
      target->func = scratch.func;
      std::copy(std::begin(scratch.dims), std::end(scratch.dims), target->dims);
      target->arg_ptrs = scratch.arg_ptrs;  // into the buffer the move hands over
      target->args = std::move(scratch.args);
      target->copy = scratch.copy;
      target->memset = scratch.memset;
      target->fn = scratch.fn;
      target->user = scratch.user;
      target->event = scratch.event;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// Node arrays out, in the driver's rule: count only when out is NULL; else fill min(count,
// actual), zero the rest, and report the number filled.
template <class F>
CUresult fill(size_t actual, size_t* count, bool want, F put) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!want) {
    *count = actual;
    return CUDA_SUCCESS;
  }
  size_t n = std::min(actual, *count);
  for (size_t i = 0; i < *count; ++i) put(i, i < n);
  *count = n;
  return CUDA_SUCCESS;
}

CUresult dependencies(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count, bool dependents) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_graph_mu);
  if (!live_node(node)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode_st*> list;
  std::vector<CUgraphEdgeData> data;
  if (!dependents) {
    list = node->deps;
    data = node->edges;
  } else {
    for (auto& n : node->graph->nodes)
      for (size_t i = 0; i < n->deps.size(); ++i)
        if (n->deps[i] == node) list.push_back(n.get()), data.push_back(n->edges[i]);
  }
  return fill(list.size(), count, out != nullptr, [&](size_t i, bool have) {
    out[i] = have ? list[i] : nullptr;
    if (edges) edges[i] = have ? data[i] : CUgraphEdgeData{};
  });
}

CUresult edges_of(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
  if (CUresult r = check_init()) return r;
  if (!from != !to) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<CUgraphNode, CUgraphNode>> list;
  std::vector<CUgraphEdgeData> data;
  for (auto& n : g->nodes)
    for (size_t i = 0; i < n->deps.size(); ++i) list.push_back({n->deps[i], n.get()}), data.push_back(n->edges[i]);
  return fill(list.size(), count, from != nullptr, [&](size_t i, bool have) {
    from[i] = have ? list[i].first : nullptr;
    to[i] = have ? list[i].second : nullptr;
    if (edges) edges[i] = have ? data[i] : CUgraphEdgeData{};
  });
}

CUresult change_deps(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges,
                     size_t n, bool add) {
  if (CUresult r = check_init()) return r;
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    if (!live_node(from[i]) || !live_node(to[i]) || from[i]->graph != g || to[i]->graph != g || from[i] == to[i])
      return CUDA_ERROR_INVALID_VALUE;
    auto& deps = to[i]->deps;
    bool present = std::find(deps.begin(), deps.end(), from[i]) != deps.end();
    if (present == add) return CUDA_ERROR_INVALID_VALUE;  // adding an edge twice, removing a missing one
  }
  for (size_t i = 0; i < n; ++i) {
    auto& deps = to[i]->deps;
    auto& data = to[i]->edges;
    if (add) {
      deps.push_back(from[i]);
      data.push_back(edges ? edges[i] : CUgraphEdgeData{});
    } else {
      size_t k = std::find(deps.begin(), deps.end(), from[i]) - deps.begin();
      deps.erase(deps.begin() + k);
      data.erase(data.begin() + k);
    }
  }
  return CUDA_SUCCESS;
}

template <class P>
CUresult get_node(CUgraphNode node, CUgraphNodeType type, P* out, void (*copy)(const CUgraphNode_st*, P*)) {
  if (CUresult r = check_init()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_node(node) || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  copy(node, out);
  return CUDA_SUCCESS;
}

}  // namespace

// ---------- graphs ----------

FAKE_API CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  uint64_t v;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = g_graph_bytes; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = g_graph_bytes_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(value, &v, sizeof v);
  return CUDA_SUCCESS;
}

// Only the high watermarks can be set, and only to 0 (which resets them to the current use).
FAKE_API CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  uint64_t v;
  std::memcpy(&v, value, sizeof v);
  if ((attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) || v != 0)
    return CUDA_ERROR_INVALID_VALUE;
  g_graph_bytes_high = g_graph_bytes.load();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev) {
  if (CUresult r = check_init()) return r;
  return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FAKE_API CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (CUresult r = check_init()) return r;
  if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  auto g = std::make_unique<CUgraph_st>();
  g->ctx = c;
  std::lock_guard lk(g_graph_mu);
  *phGraph = g.get();
  g_all_graphs.insert(g.get());
  g_graphs.emplace(g.get(), std::move(g));
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  if (CUresult r = check_init()) return r;
  std::unique_ptr<CUgraph_st> g;  // destroyed after the lock: its allocations free memory
  {
    std::lock_guard lk(g_graph_mu);
    auto it = g_graphs.find(hGraph);
    if (it == g_graphs.end()) return CUDA_ERROR_INVALID_VALUE;
    g = std::move(it->second);
    g_graphs.erase(it);
    forget(g.get());
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuGraphClone(CUgraph* phClone, CUgraph original) {
  if (CUresult r = check_init()) return r;
  if (!phClone) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(original)) return CUDA_ERROR_INVALID_VALUE;
  auto g = clone_graph(*original, true, nullptr);
  *phClone = g.get();
  g_graphs.emplace(g.get(), std::move(g));
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph,
                                                         CUcontext ctx, unsigned int defaultLaunchValue,
                                                         unsigned int flags) {
  if (CUresult r = check_init()) return r;
  if (!pHandle_out || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  (void)ctx;
  g_cond.push_back({hGraph, defaultLaunchValue, flags});
  *pHandle_out = g_cond.size();
  return CUDA_SUCCESS;
}

// ---------- adding nodes ----------

FAKE_API CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps,
                                            const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* params) {
  return add_node(ph, g, deps, edges, n, params);
}

FAKE_API CUresult CUDAAPI cuGraphAddNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                         CUgraphNodeParams* params) {
  return add_node(ph, g, deps, nullptr, n, params);
}

FAKE_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                               const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                               const CUDA_MEMCPY3D* copy, CUcontext ctx) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
  p.memcpy.copyParams = *copy;
  p.memcpy.copyCtx = ctx;
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                               const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_memset(*params, ctx);
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                             const CUDA_HOST_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_HOST);
  p.host.fn = params->fn;
  p.host.userData = params->userData;
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                   CUgraph child) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_GRAPH);
  p.graph.graph = child;
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_EMPTY);
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                    CUevent event) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  p.eventRecord.event = event;
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  CUevent event) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  p.eventWait.event = event;
  return add_node(ph, g, deps, nullptr, n, &p);
}

FAKE_API CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                 CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  p.alloc.poolProps = params->poolProps;
  p.alloc.accessDescs = params->accessDescs;
  p.alloc.accessDescCount = params->accessDescCount;
  p.alloc.bytesize = params->bytesize;
  CUresult r = add_node(ph, g, deps, nullptr, n, &p);
  if (r == CUDA_SUCCESS) params->dptr = p.alloc.dptr;
  return r;
}

FAKE_API CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                                CUdeviceptr dptr) {
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEM_FREE);
  p.free.dptr = dptr;
  return add_node(ph, g, deps, nullptr, n, &p);
}

// ---------- node parameters ----------

FAKE_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (CUresult r = check_init()) return r;
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_node(node)) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out) {
  return get_node<CUDA_KERNEL_NODE_PARAMS>(node, CU_GRAPH_NODE_TYPE_KERNEL, out, [](auto* n, auto* k) { to_kernel(n, k); });
}

FAKE_API CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* out) {
  return get_node<CUDA_KERNEL_NODE_PARAMS_v1>(node, CU_GRAPH_NODE_TYPE_KERNEL, out,
                                              [](auto* n, auto* k) { to_kernel(n, k); });
}

FAKE_API CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* out) {
  return get_node<CUDA_MEMCPY3D>(node, CU_GRAPH_NODE_TYPE_MEMCPY, out, [](auto* n, auto* c) { *c = n->copy; });
}

FAKE_API CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* out) {
  return get_node<CUDA_MEMSET_NODE_PARAMS>(node, CU_GRAPH_NODE_TYPE_MEMSET, out, [](auto* n, auto* m) {
    *m = CUDA_MEMSET_NODE_PARAMS{n->memset.dst,         n->memset.pitch, n->memset.value,
                                 n->memset.elementSize, n->memset.width, n->memset.height};
  });
}

FAKE_API CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* out) {
  return get_node<CUDA_HOST_NODE_PARAMS>(node, CU_GRAPH_NODE_TYPE_HOST, out,
                                         [](auto* n, auto* h) { *h = CUDA_HOST_NODE_PARAMS{n->fn, n->user}; });
}

FAKE_API CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  return get_node<CUDA_MEM_ALLOC_NODE_PARAMS>(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, out, [](auto* n, auto* a) {
    a->poolProps = n->alloc.poolProps;
    a->accessDescs = n->alloc.accessDescs;
    a->accessDescCount = n->alloc.accessDescCount;
    a->bytesize = n->alloc.bytesize;
    a->dptr = n->alloc.dptr;
  });
}

FAKE_API CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  return get_node<CUdeviceptr>(node, CU_GRAPH_NODE_TYPE_MEM_FREE, out, [](auto* n, auto* p) { *p = n->free_ptr; });
}

FAKE_API CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* out) {
  return get_node<CUgraph>(node, CU_GRAPH_NODE_TYPE_GRAPH, out, [](auto* n, auto* g) { *g = n->child.get(); });
}

FAKE_API CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* out) {
  return get_node<CUevent>(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out, [](auto* n, auto* e) { *e = n->event; });
}

FAKE_API CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* out) {
  return get_node<CUevent>(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out, [](auto* n, auto* e) { *e = n->event; });
}

FAKE_API CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  return update(nullptr, node, params);
}

FAKE_API CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  return update(exec, node, params);
}

FAKE_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return update(nullptr, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return update(nullptr, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                            const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params || !exec) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return update(exec, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                         const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params || !exec) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_kernel(*params);
  return update(exec, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* copy) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
  p.memcpy.copyParams = *copy;
  return update(nullptr, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* copy,
                                                         CUcontext ctx) {
  if (!copy || !exec) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
  p.memcpy.copyParams = *copy;
  p.memcpy.copyCtx = ctx;
  return update(exec, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_memset(*params, nullptr);
  return update(nullptr, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                         const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  if (!params || !exec) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = from_memset(*params, ctx);
  return update(exec, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_HOST);
  p.host.fn = params->fn;
  p.host.userData = params->userData;
  return update(nullptr, node, &p);
}

FAKE_API CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_HOST_NODE_PARAMS* params) {
  if (!params || !exec) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p = of_type(CU_GRAPH_NODE_TYPE_HOST);
  p.host.fn = params->fn;
  p.host.userData = params->userData;
  return update(exec, node, &p);
}

// ---------- topology ----------

FAKE_API CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  return fill(g->nodes.size(), count, nodes != nullptr,
              [&](size_t i, bool have) { nodes[i] = have ? g->nodes[i].get() : nullptr; });
}

FAKE_API CUresult CUDAAPI cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> roots;
  for (auto& n : g->nodes)
    if (n->deps.empty()) roots.push_back(n.get());
  return fill(roots.size(), count, nodes != nullptr, [&](size_t i, bool have) { nodes[i] = have ? roots[i] : nullptr; });
}

FAKE_API CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                                             size_t* count) {
  return edges_of(g, from, to, edges, count);
}

FAKE_API CUresult CUDAAPI cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  return edges_of(g, from, to, nullptr, count);
}

FAKE_API CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                                        size_t* count) {
  return dependencies(node, deps, edges, count, false);
}

FAKE_API CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* count) {
  return dependencies(node, deps, nullptr, count, false);
}

FAKE_API CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                                          size_t* count) {
  return dependencies(node, deps, edges, count, true);
}

FAKE_API CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* deps, size_t* count) {
  return dependencies(node, deps, nullptr, count, true);
}

FAKE_API CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                    const CUgraphEdgeData* edges, size_t n) {
  return change_deps(g, from, to, edges, n, true);
}

FAKE_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  return change_deps(g, from, to, nullptr, n, true);
}

FAKE_API CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                       const CUgraphEdgeData* edges, size_t n) {
  return change_deps(g, from, to, edges, n, false);
}

FAKE_API CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                    size_t n) {
  return change_deps(g, from, to, nullptr, n, false);
}

FAKE_API CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode node) {
  if (CUresult r = check_init()) return r;
  std::unique_ptr<CUgraphNode_st> dead;  // destroyed after the lock
  {
    std::lock_guard lk(g_graph_mu);
    if (!live_node(node)) return CUDA_ERROR_INVALID_VALUE;
    CUgraph_st* g = node->graph;
    for (auto& n : g->nodes) {
      for (size_t i = 0; i < n->deps.size();) {
        if (n->deps[i] == node) {
          n->deps.erase(n->deps.begin() + i);
          n->edges.erase(n->edges.begin() + i);
        } else {
          ++i;
        }
      }
    }
    auto it = std::find_if(g->nodes.begin(), g->nodes.end(), [&](auto& p) { return p.get() == node; });
    dead = std::move(*it);
    g->nodes.erase(it);
    g_nodes.erase(node);
    if (dead->child) forget(dead->child.get());
    for (auto& b : dead->bodies) forget(b.get());
  }
  return CUDA_SUCCESS;
}

// ---------- stream capture ----------
// Work queued on a capturing stream becomes graph nodes instead of running: host functions
// become host nodes, everything else (copies, memsets, launches, as queued by fakecuda's entry
// points) an opaque node that queues the same work on the launch stream and reports type EMPTY
// (the fake does not know, at the queue, what a piece of work was). Each node depends on the
// stream's current dependencies, then becomes them. An event recorded on a capturing stream
// carries those dependencies; a stream that waits on it joins the capture (fork) or merges them
// (join). cuStreamEndCapture on the origin stream ends the capture for every joined stream and
// fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED when a joined stream's last work is not an
// ancestor of the origin's. Capture modes are kept but not enforced; the legacy stream cannot
// capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
// Locking: the queueing entry points hold g_mu (not g_graph_mu), so nodes captured there wait in
// their capture's `pending` list, seen by no one else, until a capture call that holds both
// locks (GetCaptureInfo, UpdateCaptureDependencies, EndCapture) moves them into the graph.

namespace {

struct Capture {
  uint64_t id = 0;
  CUgraph_st* graph = nullptr;
  bool owns_graph = false;  // cuStreamBeginCapture made it; cuStreamBeginCaptureToGraph: the caller's
  CUstream_st* origin = nullptr;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::vector<std::unique_ptr<CUgraphNode_st>> pending;
  // A call not permitted in a capture (a synchronize of the capturing stream) invalidates it:
  // status INVALIDATED, and cuStreamEndCapture fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
  bool invalidated = false;
};

struct Capturing {
  std::shared_ptr<Capture> cap;
  std::vector<CUgraphNode_st*> deps;
};

// Guarded by g_mu.
auto& g_capturing = *new std::unordered_map<const CUstream_st*, Capturing>();
auto& g_event_captures = *new std::unordered_map<const CUevent_st*, Capturing>();
uint64_t g_next_capture_id = 1;
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// g_graph_mu and g_mu held.
void adopt_locked(Capture& c) {
  for (auto& n : c.pending) {
    g_nodes.insert(n.get());
    c.graph->nodes.push_back(std::move(n));
  }
  c.pending.clear();
}

// g_mu held.
CUgraphNode_st* capture_node_locked(Capturing& st, CUgraphNodeType type) {
  auto n = std::make_unique<CUgraphNode_st>();
  n->graph = st.cap->graph;
  n->type = type;
  n->deps = st.deps;
  n->edges.assign(st.deps.size(), CUgraphEdgeData{});
  st.deps = {n.get()};
  st.cap->pending.push_back(std::move(n));
  return st.deps[0];
}

void merge(std::vector<CUgraphNode_st*>& into, const std::vector<CUgraphNode_st*>& more) {
  for (CUgraphNode_st* n : more)
    if (std::find(into.begin(), into.end(), n) == into.end()) into.push_back(n);
}

CUresult begin_capture(CUstream h, CUgraph into, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                       CUstreamCaptureMode mode) {
  if (CUresult r = check_init()) return r;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  (void)edges;  // the fake keeps default edges only
  std::unique_ptr<CUgraph_st> fresh;
  std::lock_guard gl(g_graph_mu);
  if (into) {
    if (!live_graph(into)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; ++i)
      if (!live_node(deps[i]) || deps[i]->graph != into) return CUDA_ERROR_INVALID_VALUE;
  } else if (n) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  if (s->is_null) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (g_capturing.count(s.get())) return CUDA_ERROR_ILLEGAL_STATE;
  auto cap = std::make_shared<Capture>();
  cap->id = g_next_capture_id++;
  cap->origin = s.get();
  cap->mode = mode;
  if (into) {
    cap->graph = into;
  } else {
    fresh = std::make_unique<CUgraph_st>();
    fresh->ctx = s->ctx;
    cap->graph = fresh.get();
    cap->owns_graph = true;
    g_all_graphs.insert(fresh.get());
    g_graphs.emplace(fresh.get(), std::move(fresh));
  }
  g_capturing[s.get()] = Capturing{cap, std::vector<CUgraphNode_st*>(deps, deps + n)};
  return CUDA_SUCCESS;
}

// A NULL `out` ends the capture too, as driver 580 does (seen on the H200, after cuStreamBeginCapture
// and cuStreamBeginCaptureToGraph alike): a graph the capture made is then destroyed.
CUresult end_capture(CUstream h, CUgraph* out) {
  if (CUresult r = check_init()) return r;
  std::unique_ptr<CUgraph_st> dead;  // destroyed after the locks
  std::lock_guard gl(g_graph_mu);
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  auto it = g_capturing.find(s.get());
  if (it == g_capturing.end()) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<Capture> cap = it->second.cap;
  if (cap->origin != s.get()) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  adopt_locked(*cap);
  // Every joined stream's last work must be an ancestor of (or be) the origin's.
  std::unordered_set<const CUgraphNode_st*> seen;
  std::vector<const CUgraphNode_st*> todo(it->second.deps.begin(), it->second.deps.end());
  while (!todo.empty()) {
    const CUgraphNode_st* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    todo.insert(todo.end(), n->deps.begin(), n->deps.end());
  }
  bool unjoined = false;
  for (auto i = g_capturing.begin(); i != g_capturing.end();) {
    if (i->second.cap != cap) {
      ++i;
      continue;
    }
    for (const CUgraphNode_st* d : i->second.deps) unjoined |= !seen.count(d);
    i = g_capturing.erase(i);
  }
  for (auto i = g_event_captures.begin(); i != g_event_captures.end();)
    i = i->second.cap == cap ? g_event_captures.erase(i) : std::next(i);
  if (out) *out = nullptr;
  if (unjoined || cap->invalidated || !out) {
    if (cap->owns_graph) {
      auto g = g_graphs.find(cap->graph);
      forget(cap->graph);
      dead = std::move(g->second);
      g_graphs.erase(g);
    }
    if (unjoined) return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    return cap->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  }
  *out = cap->graph;
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  if (CUresult r = check_init()) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  thread_local std::vector<CUgraphNode> t_deps;  // the driver's arrays: valid until the next call
  thread_local std::vector<CUgraphEdgeData> t_edges;
  std::lock_guard gl(g_graph_mu);
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  auto it = g_capturing.find(s.get());
  if (it == g_capturing.end()) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (graph) *graph = nullptr;
    if (deps) *deps = nullptr;
    if (edges) *edges = nullptr;
    if (count) *count = 0;
    return CUDA_SUCCESS;
  }
  adopt_locked(*it->second.cap);
  t_deps.assign(it->second.deps.begin(), it->second.deps.end());
  t_edges.assign(t_deps.size(), CUgraphEdgeData{});
  *status = it->second.cap->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id) *id = it->second.cap->id;
  if (graph) *graph = it->second.cap->graph;
  if (deps) *deps = t_deps.empty() ? nullptr : t_deps.data();
  if (edges) *edges = t_edges.empty() ? nullptr : t_edges.data();
  if (count) *count = t_deps.size();
  return CUDA_SUCCESS;
}

CUresult update_capture_deps(CUstream h, CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n, unsigned flags) {
  if (CUresult r = check_init()) return r;
  if ((n && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  (void)edges;
  std::lock_guard gl(g_graph_mu);
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  auto it = g_capturing.find(s.get());
  if (it == g_capturing.end()) return CUDA_ERROR_ILLEGAL_STATE;
  adopt_locked(*it->second.cap);
  for (size_t i = 0; i < n; ++i)
    if (!live_node(deps[i]) || deps[i]->graph != it->second.cap->graph) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode_st*> list(deps, deps + n);
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) it->second.deps.clear();
  merge(it->second.deps, list);
  return CUDA_SUCCESS;
}

}  // namespace

namespace fake {

// Hooks for the queueing paths (fakecuda/stream.cpp), g_mu held. Each returns true when the
// stream is capturing and the work was captured instead of queued.
bool capturing_locked(const CUstream_st* s) { return g_capturing.count(s) != 0; }

bool capture_invalidate_locked(const CUstream_st* s) {
  auto it = g_capturing.find(s);
  if (it == g_capturing.end()) return false;
  it->second.cap->invalidated = true;
  return true;
}

bool capture_work_locked(const CUstream_st* s, std::function<void()>* fn) {
  auto it = g_capturing.find(s);
  if (it == g_capturing.end()) return false;
  capture_node_locked(it->second, CU_GRAPH_NODE_TYPE_EMPTY)->work = std::move(*fn);
  return true;
}

bool capture_host_locked(const CUstream_st* s, CUhostFn fn, void* user) {
  auto it = g_capturing.find(s);
  if (it == g_capturing.end()) return false;
  CUgraphNode_st* n = capture_node_locked(it->second, CU_GRAPH_NODE_TYPE_HOST);
  n->fn = fn;
  n->user = user;
  return true;
}

bool capture_event_record_locked(const CUstream_st* s, const CUevent_st* e) {
  auto it = g_capturing.find(s);
  if (it == g_capturing.end()) {
    g_event_captures.erase(e);  // recorded outside any capture now
    return false;
  }
  g_event_captures[e] = it->second;
  return true;
}

// A wait on an event recorded in a capture: joins s to that capture, or merges dependencies.
bool capture_event_wait_locked(const CUstream_st* s, const CUevent_st* e, CUresult* r) {
  auto ev = g_event_captures.find(e);
  if (ev == g_event_captures.end()) return g_capturing.count(s) != 0;  // outside work: no edge
  auto it = g_capturing.find(s);
  *r = CUDA_SUCCESS;
  if (it == g_capturing.end()) {
    if (s->is_null) *r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else g_capturing[s] = ev->second;
  } else if (it->second.cap != ev->second.cap) {
    *r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  } else {
    merge(it->second.deps, ev->second.deps);
  }
  return true;
}

}  // namespace fake

FAKE_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  return begin_capture(h, nullptr, nullptr, nullptr, 0, mode);
}
FAKE_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) {
  return begin_capture(h, nullptr, nullptr, nullptr, 0, mode);
}
FAKE_API CUresult CUDAAPI cuStreamBeginCapture(CUstream h) {
  return begin_capture(h, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKE_API CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream h) {
  return begin_capture(h, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKE_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode* deps,
                                                      const CUgraphEdgeData* edges, size_t n,
                                                      CUstreamCaptureMode mode) {
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(h, g, deps, edges, n, mode);
}
FAKE_API CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode* deps,
                                                           const CUgraphEdgeData* edges, size_t n,
                                                           CUstreamCaptureMode mode) {
  return cuStreamBeginCaptureToGraph(h, g, deps, edges, n, mode);
}
FAKE_API CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* out) { return end_capture(h, out); }
FAKE_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph* out) { return end_capture(h, out); }

FAKE_API CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  return capture_info(h, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}
FAKE_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* status) {
  return capture_info(h, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return capture_info(h, status, id, nullptr, nullptr, nullptr, nullptr);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return capture_info(h, status, id, nullptr, nullptr, nullptr, nullptr);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                    CUgraph* graph, const CUgraphNode** deps,
                                                    const CUgraphEdgeData** edges, size_t* n) {
  return capture_info(h, status, id, graph, deps, edges, n);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                         CUgraph* graph, const CUgraphNode** deps,
                                                         const CUgraphEdgeData** edges, size_t* n) {
  return capture_info(h, status, id, graph, deps, edges, n);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                    CUgraph* graph, const CUgraphNode** deps, size_t* n) {
  return capture_info(h, status, id, graph, deps, nullptr, n);
}
FAKE_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                         CUgraph* graph, const CUgraphNode** deps, size_t* n) {
  return capture_info(h, status, id, graph, deps, nullptr, n);
}

FAKE_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode* deps, size_t n, unsigned flags) {
  return update_capture_deps(h, deps, nullptr, n, flags);
}
FAKE_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream h, CUgraphNode* deps, size_t n,
                                                                 unsigned flags) {
  return update_capture_deps(h, deps, nullptr, n, flags);
}
FAKE_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream h, CUgraphNode* deps,
                                                               const CUgraphEdgeData* edges, size_t n,
                                                               unsigned flags) {
  return update_capture_deps(h, deps, edges, n, flags);
}
FAKE_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream h, CUgraphNode* deps,
                                                                    const CUgraphEdgeData* edges, size_t n,
                                                                    unsigned flags) {
  return update_capture_deps(h, deps, edges, n, flags);
}

// Modes are per thread and only kept (the fake does not refuse unsafe calls during capture).
FAKE_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = check_init()) return r;
  if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}
