// The graph objects behind CUgraph, CUgraphNode and CUgraphExec, and what the two graph files
// share: fakecuda/graph.cpp builds graphs (nodes, parameters, topology, stream capture, graph
// memory) and keeps the registries of live handles; fakecuda/graph_exec.cpp instantiates graphs
// into instances, updates and launches them. Private to fakecuda/.
//
// Locking: g_graph_mu guards every graph object; it is taken before g_mu, never after.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "fakecuda/internal.h"

namespace fake {

// The memory of a memory alloc node: allocated when the node is created, so the address is fixed
// (as the driver's is); freed when the last graph or instance holding the node is destroyed.
// Each launch allocates it again: launching while a launch's allocation is outstanding (not yet
// freed by a free node, cuMemFree or cuMemFreeAsync) is CUDA_ERROR_INVALID_VALUE (driver 580).
struct GraphAlloc {
  CUdeviceptr ptr = 0;
  size_t size = 0;
  bool outstanding = false;  // g_graph_mu
  ~GraphAlloc();
};

}  // namespace fake

struct CUgraphNode_st {
  CUgraph_st* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::vector<CUgraphNode_st*> deps;
  std::vector<CUgraphEdgeData> edges;  // parallel to deps
  bool enabled = true;
  // kernel
  CUfunction func = nullptr;
  unsigned dims[7] = {};
  std::vector<uint8_t> args;
  std::vector<void*> arg_ptrs;  // by ordinal into args, for GetParams
  // memcpy, memset
  CUDA_MEMCPY3D copy{};
  CUDA_MEMSET_NODE_PARAMS_v2 memset{};
  // host
  CUhostFn fn = nullptr;
  void* user = nullptr;
  // child graph, conditional bodies
  std::unique_ptr<CUgraph_st> child;
  CUDA_CONDITIONAL_NODE_PARAMS cond{};
  std::vector<std::unique_ptr<CUgraph_st>> bodies;
  std::vector<CUgraph> body_handles;
  // events
  CUevent event = nullptr;
  // memory
  CUDA_MEM_ALLOC_NODE_PARAMS_v2 alloc{};
  std::vector<CUmemAccessDesc> descs;
  std::shared_ptr<fake::GraphAlloc> mem;
  CUdeviceptr free_ptr = 0;
  // work captured from a stream (stream capture below): an opaque node that queues this on the
  // launch stream; it reports type EMPTY
  std::function<void()> work;
};

struct CUgraph_st {
  CUctx_st* ctx = nullptr;
  bool visible = true;  // false: an instance's copy (its nodes are no handles)
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::unique_ptr<CUgraph_st> graph;
  std::unordered_map<CUgraphNode_st*, CUgraphNode_st*> copy_of;  // graph node → instance node
};

namespace fake {

extern std::mutex& g_graph_mu;
// Instances (graph_exec.cpp); cuGraphExec*NodeSetParams change them through graph.cpp's update
// path, shared with the graph nodes' *SetParams.
extern std::unordered_map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>& g_execs;

// With g_graph_mu held:
// A graph or node the program may name (top-level or nested; not an instance's private copy).
bool live_graph(CUgraph g);
bool live_node(CUgraphNode n);
// A deep copy of g. visible: its graphs and nodes become handles the program may name (a clone);
// else a private copy (an instance's). map, when given, receives original node → copy.
std::unique_ptr<CUgraph_st> clone_graph(const CUgraph_st& g, bool visible,
                                        std::unordered_map<CUgraphNode_st*, CUgraphNode_st*>* map);
// The condition a conditional node sees at a launch: the handle's default value when it was
// created with CU_GRAPH_COND_ASSIGN_DEFAULT, else 0 (no kernel can set it in the fake).
unsigned cond_value(CUgraphConditionalHandle h);

}  // namespace fake
