// CUDA graph instances: cuGraphInstantiate* makes an executable copy of a graph, cuGraphLaunch
// queues each node's work on the stream in a dependency order (one stream: every order that
// respects the edges is a valid execution), cuGraphExecUpdate takes a new graph's parameters.
// Graphs, their nodes and the parameters of an instance's nodes (cuGraphExec*NodeSetParams) are
// fakecuda/graph.cpp's; the objects and the locking rule are fakecuda/graph.h.
//
// Semantics worth knowing:
// - An instance is a deep copy: changing the graph later changes no instance;
//   cuGraphExec*SetParams change the instance only. cuGraphExecUpdate_v2 takes the new graph's
//   parameters when its topology matches the instance's (node count, types and edges by
//   creation order), else CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the reason.
// - A graph with a cycle is refused at instantiation and at launch (CUDA_ERROR_INVALID_VALUE).
// - Conditional nodes: the condition is the handle's default value at each launch
//   (CU_GRAPH_COND_ASSIGN_DEFAULT) or 0; no kernel can set it (the fake runs no device code).
//   A WHILE node whose condition is non-zero is refused at launch (CUDA_ERROR_NOT_SUPPORTED).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fakecuda/graph.h"
#include "fakecuda/internal.h"

using namespace fake;

namespace fake {

std::unordered_map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>& g_execs =
    *new std::unordered_map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>();

}  // namespace fake

namespace {

// Dependency order (Kahn, creation order among ready nodes). False on a cycle.
bool order(const CUgraph_st& g, std::vector<CUgraphNode_st*>* out) {
  std::unordered_map<const CUgraphNode_st*, size_t> waiting;
  std::unordered_map<const CUgraphNode_st*, std::vector<CUgraphNode_st*>> dependents;
  for (auto& n : g.nodes) {
    waiting[n.get()] = n->deps.size();
    for (auto* d : n->deps) dependents[d].push_back(n.get());
  }
  std::vector<CUgraphNode_st*> ready;
  for (auto& n : g.nodes)
    if (n->deps.empty()) ready.push_back(n.get());
  while (!ready.empty()) {
    auto it = std::min_element(ready.begin(), ready.end(), [&](auto* a, auto* b) {
      auto pos = [&](auto* x) {
        for (size_t i = 0; i < g.nodes.size(); ++i)
          if (g.nodes[i].get() == x) return i;
        return g.nodes.size();
      };
      return pos(a) < pos(b);
    });
    CUgraphNode_st* n = *it;
    ready.erase(it);
    out->push_back(n);
    for (auto* dep : dependents[n])
      if (--waiting[dep] == 0) ready.push_back(dep);
  }
  if (out->size() != g.nodes.size()) return false;
  for (auto& n : g.nodes) {
    std::vector<CUgraphNode_st*> inner;
    if (n->child && !order(*n->child, &inner)) return false;
  }
  return true;
}

// Queues g's work on s. g_graph_mu held.
CUresult enqueue(const CUgraph_st& g, CUstream s) {
  std::vector<CUgraphNode_st*> nodes;
  if (!order(g, &nodes)) return CUDA_ERROR_INVALID_VALUE;
  for (CUgraphNode_st* n : nodes) {
    if (!n->enabled) continue;
    CUresult r = CUDA_SUCCESS;
    if (n->work) {
      std::lock_guard lk(g_mu);
      std::shared_ptr<CUstream_st> st;
      if ((r = get_stream_locked(s, &st))) return r;
      submit_locked(st, n->work);
      continue;
    }
    switch (n->type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        size_t size = n->args.size();
        void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, n->args.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        r = cuLaunchKernel(n->func, n->dims[0], n->dims[1], n->dims[2], n->dims[3], n->dims[4], n->dims[5], n->dims[6],
                           s, nullptr, size ? extra : nullptr);
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY:
        r = cuMemcpy3DAsync_v2(&n->copy, s);
        break;
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        const auto& m = n->memset;
        for (size_t y = 0; y < m.height && r == CUDA_SUCCESS; ++y) {
          CUdeviceptr row = m.dst + y * m.pitch;
          if (m.elementSize == 1) r = cuMemsetD8Async(row, static_cast<unsigned char>(m.value), m.width, s);
          else if (m.elementSize == 2) r = cuMemsetD16Async(row, static_cast<unsigned short>(m.value), m.width, s);
          else r = cuMemsetD32Async(row, m.value, m.width, s);
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_HOST:
        r = cuLaunchHostFunc(s, n->fn, n->user);
        break;
      case CU_GRAPH_NODE_TYPE_GRAPH:
        r = enqueue(*n->child, s);
        break;
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        r = cuEventRecord(n->event, s);
        break;
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        r = cuStreamWaitEvent(s, n->event, 0);
        break;
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
        unsigned v = cond_value(n->cond.handle);
        if (n->cond.type == CU_GRAPH_COND_TYPE_IF) {
          if (v) r = enqueue(*n->bodies[0], s);
          else if (n->bodies.size() == 2) r = enqueue(*n->bodies[1], s);
        } else if (n->cond.type == CU_GRAPH_COND_TYPE_SWITCH) {
          if (v < n->bodies.size()) r = enqueue(*n->bodies[v], s);
        } else if (v) {
          std::fprintf(stderr, "fakecuda: a WHILE conditional node with a non-zero condition would never end here\n");
          r = CUDA_ERROR_NOT_SUPPORTED;
        }
        break;
      }
      default:  // empty, memory alloc and free: nothing to run
        break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult instantiate(CUgraphExec* out, CUgraph g) {
  if (CUresult r = check_init()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_graph_mu);
  if (!live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode_st*> nodes;
  if (!order(*g, &nodes)) return CUDA_ERROR_INVALID_VALUE;
  auto e = std::make_unique<CUgraphExec_st>();
  e->graph = clone_graph(*g, false, &e->copy_of);
  *out = e.get();
  g_execs.emplace(e.get(), std::move(e));
  return CUDA_SUCCESS;
}

CUresult exec_update(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  if (CUresult r = check_init()) return r;
  if (!info) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{};
  std::lock_guard lk(g_graph_mu);
  if (!g_execs.count(exec) || !live_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  auto& mine = exec->graph->nodes;
  auto fail = [&](CUgraphExecUpdateResult why, CUgraphNode node, CUgraphNode from) {
    info->result = why;
    info->errorNode = node;
    info->errorFromNode = from;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  };
  if (mine.size() != g->nodes.size()) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr, nullptr);
  std::unordered_map<const CUgraphNode_st*, size_t> index;
  for (size_t i = 0; i < mine.size(); ++i) index[mine[i].get()] = i;
  std::unordered_map<const CUgraphNode_st*, size_t> their_index;
  for (size_t i = 0; i < g->nodes.size(); ++i) their_index[g->nodes[i].get()] = i;
  for (size_t i = 0; i < mine.size(); ++i) {
    CUgraphNode_st* theirs = g->nodes[i].get();
    if (mine[i]->type != theirs->type) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, theirs, nullptr);
    if (mine[i]->deps.size() != theirs->deps.size())
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, theirs, nullptr);
    for (size_t k = 0; k < theirs->deps.size(); ++k)
      if (index[mine[i]->deps[k]] != their_index[theirs->deps[k]])
        return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, theirs, theirs->deps[k]);
    if (theirs->type == CU_GRAPH_NODE_TYPE_KERNEL && mine[i]->func != theirs->func) {
      bool same_ctx;
      {
        std::lock_guard g2(g_mu);
        same_ctx = g_funcs.count(theirs->func) && g_funcs.count(mine[i]->func) &&
                   theirs->func->mod->ctx == mine[i]->func->mod->ctx;
      }
      if (!same_ctx) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED, theirs, nullptr);
    }
    if (theirs->type == CU_GRAPH_NODE_TYPE_GRAPH || theirs->type == CU_GRAPH_NODE_TYPE_CONDITIONAL ||
        theirs->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || theirs->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      // The fake does not compare nested graphs or allocations: only identical ones update.
      if (theirs->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && theirs->mem != mine[i]->mem)
        return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, theirs, nullptr);
    }
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    CUgraphNode_st* theirs = g->nodes[i].get();
    CUgraphNode_st* m = mine[i].get();
    m->func = theirs->func;
    std::copy(std::begin(theirs->dims), std::end(theirs->dims), m->dims);
    m->args = theirs->args;
    m->arg_ptrs.clear();
    for (void* q : theirs->arg_ptrs)
      m->arg_ptrs.push_back(q ? m->args.data() + (static_cast<uint8_t*>(q) - theirs->args.data()) : nullptr);
    m->copy = theirs->copy;
    m->memset = theirs->memset;
    m->fn = theirs->fn;
    m->user = theirs->user;
    m->work = theirs->work;
    m->event = theirs->event;
    m->enabled = theirs->enabled;
    exec->copy_of[theirs] = m;
  }
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

// ---------- instances ----------

FAKE_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  (void)flags;  // auto-free, upload, device launch, priority: nothing the fake can show
  return instantiate(out, g);
}

FAKE_API CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  if (err) *err = nullptr;
  if (log && n) log[0] = 0;
  return instantiate(out, g);
}

FAKE_API CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  return cuGraphInstantiate_v2(out, g, err, log, n);
}

FAKE_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  if (CUresult r = check_init()) return r;
  std::unique_ptr<CUgraphExec_st> e;  // destroyed after the lock
  {
    std::lock_guard lk(g_graph_mu);
    auto it = g_execs.find(exec);
    if (it == g_execs.end()) return CUDA_ERROR_INVALID_VALUE;
    e = std::move(it->second);
    g_execs.erase(it);
  }
  return CUDA_SUCCESS;
}

namespace {

// The allocations a launch of g makes and keeps (alloc nodes that no free node of g frees), and
// those its free nodes free; child graphs included. g_graph_mu held.
void graph_allocs(const CUgraph_st& g, std::vector<GraphAlloc*>* kept, std::vector<CUdeviceptr>* freed) {
  for (const auto& n : g.nodes) {
    if (!n->enabled) continue;
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->mem) kept->push_back(n->mem.get());
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) freed->push_back(n->free_ptr);
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child) graph_allocs(*n->child, kept, freed);
  }
}

}  // namespace

// A launch allocates its alloc nodes' memory again: refused (INVALID_VALUE) while an earlier
// launch's allocation is outstanding, i.e. not freed by a free node, cuMemFree or cuMemFreeAsync
// (driver 580 on the H200; the fake had kept no count and refused a launch after a free outside).
FAKE_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_graph_mu);
  if (!g_execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<GraphAlloc*> kept;
  std::vector<CUdeviceptr> freed;
  graph_allocs(*exec->graph, &kept, &freed);
  std::erase_if(kept, [&](GraphAlloc* a) { return std::find(freed.begin(), freed.end(), a->ptr) != freed.end(); });
  for (GraphAlloc* a : kept)
    if (a->outstanding) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = enqueue(*exec->graph, s);
  if (r == CUDA_SUCCESS)
    for (GraphAlloc* a : kept) a->outstanding = true;
  return r;
}

FAKE_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return cuGraphLaunch(exec, s); }

FAKE_API CUresult CUDAAPI cuGraphUpload(CUgraphExec exec, CUstream) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_graph_mu);
  return g_execs.count(exec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  return exec_update(exec, g, info);
}

FAKE_API CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec exec, CUgraph g, CUgraphNode* err,
                                            CUgraphExecUpdateResult* result) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = exec_update(exec, g, &info);
  if (err) *err = info.errorNode;
  if (result) *result = info.result;
  return r;
}
