// Fuzz target for protocol/wire/graph.h and protocol/wire/capture.h (whose dependency lists are
// graph.h's NodeLists): the server decodes the client's graph and capture requests, the client
// decodes the server's replies, so any bytes must decode or be refused without reading past the end or allocating past
// the limits. The first byte picks the message (its low 5 bits; bit 7 picks a form where a
// message has two). What decodes must re-encode to bytes that decode
// and re-encode to the same bytes again.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/capture.h"
#include "protocol/wire/graph.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

void put_args(Writer& w, const KernelArgs& a) {
  if (a.slots.empty() && a.packed_len) return put_extra_args(w, a.packed, a.packed_len);
  size_t at = put_packed_args(w, a.slots, a.packed_len);
  if (a.packed_len) std::memcpy(w.buf().data() + at, a.packed, a.packed_len);
}

std::vector<CUgraphNode> as_nodes(const std::vector<uint64_t>& ids) {
  std::vector<CUgraphNode> v;
  for (uint64_t id : ids) v.push_back(reinterpret_cast<CUgraphNode>(id));
  return v;
}

void put_list(Writer& w, const NodeList& l) {
  auto nodes = as_nodes(l.nodes);
  put_node_list(w, nodes.data(), l.has_edges ? l.edges.data() : nullptr, nodes.size());
}

void put_params(Writer& w, NodeParams& n) {
  put_node_params(w, n.p, n.host_callback);
  if (n.p.type == CU_GRAPH_NODE_TYPE_KERNEL) put_args(w, n.args);
}

// Decodes msg kind `k` from r and re-encodes it into *out; false when it does not decode.
bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k & 0x1f) {
    case 0: {
      AddNode m;
      if (!read_add_node(r, &m)) return false;
      Writer& w = *out;
      w.put_u64(m.node);
      w.put_u64(m.graph);
      put_list(w, m.deps);
      put_params(w, m.params);
      if (m.params.p.type == CU_GRAPH_NODE_TYPE_KERNEL) m.params.args.bind();  // may refuse; must not over-read
      return true;
    }
    case 1: {
      bool in_exec = k & 0x80;
      SetParams m;
      if (!read_set_params(r, in_exec, &m)) return false;
      put_set_params_head(*out, in_exec, m.exec, m.node);
      put_params(*out, m.params);
      return true;
    }
    case 2: {
      NodeParams m;
      if (!read_node_params(r, &m)) return false;
      put_params(*out, m);
      return true;
    }
    case 3: {
      auto type = static_cast<CUgraphNodeType>(k & 0x80 ? CU_GRAPH_NODE_TYPE_CONDITIONAL : CU_GRAPH_NODE_TYPE_MEM_ALLOC);
      AddNodeReply m;
      if (!read_add_node_reply(r, type, &m)) return false;
      put_add_node_reply(*out, type, m.dptr, m.bodies);
      return true;
    }
    case 4: {
      NodeArrayAsk a;
      if (!read_node_array_ask(r, &a)) return false;
      bool edges_form = k & 0x80;
      NodeArray m;
      if (!read_node_array(r, a, edges_form, &m)) return false;
      put_node_array_ask(*out, a);
      put_node_array(*out, a, edges_form, m);
      return true;
    }
    case 5: {
      DependencyChange m;
      if (!read_dependency_change(r, &m)) return false;
      auto from = as_nodes(m.from), to = as_nodes(m.to);
      put_dependency_change(*out, m.graph, from.data(), to.data(), m.has_edges ? m.edges.data() : nullptr, from.size());
      return true;
    }
    case 6: {
      uint64_t exec, graph;
      ExecUpdateResult m;
      if (!read_exec_update(r, &exec, &graph) || !read_exec_update_result(r, &m)) return false;
      put_exec_update(*out, exec, graph);
      put_exec_update_result(*out, m);
      return true;
    }
    case 7: {
      bool want_edges = k & 0x80;
      CaptureInfo m;
      if (!read_capture_info(r, want_edges, &m)) return false;
      put_capture_info(*out, want_edges, m);
      return true;
    }
    case 8: {
      BeginCaptureToGraph m;
      if (!read_begin_capture_to_graph(r, &m)) return false;
      auto nodes = as_nodes(m.deps.nodes);
      put_begin_capture_to_graph(*out, m.stream, m.graph, nodes.data(), m.deps.has_edges ? m.deps.edges.data() : nullptr,
                                 nodes.size(), m.mode);
      return true;
    }
    case 9: {
      UpdateCaptureDependencies m;
      if (!read_update_capture_dependencies(r, &m)) return false;
      auto nodes = as_nodes(m.deps.nodes);
      put_update_capture_dependencies(*out, m.stream, nodes.data(), m.deps.has_edges ? m.deps.edges.data() : nullptr,
                                      nodes.size(), m.flags);
      return true;
    }
    case 10: {
      NodeList m;
      if (!read_node_list(r, &m)) return false;
      put_list(*out, m);
      return true;
    }
    case 11: {
      CaptureInfoAsk m;
      if (!read_capture_info_ask(r, &m)) return false;
      put_capture_info_ask(*out, m);
      return true;
    }
    case 12: {
      uint64_t node;
      if (!read_get_params(r, &node)) return false;
      put_get_params(*out, node);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

// Seeds: one valid message of each kind.
void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  CUgraphNode deps[2] = {reinterpret_cast<CUgraphNode>(1), reinterpret_cast<CUgraphNode>(2)};
  CUgraphEdgeData edges[2]{};
  for (uint32_t t : {CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMSET,
                     CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_EMPTY,
                     CU_GRAPH_NODE_TYPE_WAIT_EVENT, CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEM_FREE,
                     CU_GRAPH_NODE_TYPE_CONDITIONAL}) {
    CUgraphNodeParams p{};
    p.type = static_cast<CUgraphNodeType>(t);
    CUmemAccessDesc d{};
    if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) p.alloc.accessDescs = &d, p.alloc.accessDescCount = 1;
    Writer w;
    put_add_node_head(w, 3, 4, deps, edges, 2);
    put_node_params(w, p, 5);
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) put_packed_args(w, std::vector<ParamSlot>{{0, 4}, {8, 8}}, 16);
    seed(0, w);
  }
  Writer set;
  put_set_params_head(set, true, 1, 2);
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  put_node_params(set, empty);
  seed(0x81, set);
  Writer bodies;
  put_add_node_reply(bodies, CU_GRAPH_NODE_TYPE_CONDITIONAL, 0, {1, 2});
  seed(0x83, bodies);
  Writer arr;
  NodeArrayAsk ask{1, true, true, 2};
  put_node_array_ask(arr, ask);
  NodeArray v;
  v.count = 2;
  v.from = {1, 2};
  v.to = {3, 4};
  v.edges.resize(2);
  put_node_array(arr, ask, true, v);
  seed(0x84, arr);
  Writer change;
  put_dependency_change(change, 1, deps, deps, edges, 2);
  seed(5, change);
  Writer upd;
  put_exec_update(upd, 1, 2);
  put_exec_update_result(upd, {1, 2, 3});
  seed(6, upd);
  Writer info;
  CaptureInfo ci;
  ci.nodes = {1, 2};
  ci.edges.resize(2);
  put_capture_info(info, true, ci);
  seed(0x87, info);
  Writer begin;
  put_begin_capture_to_graph(begin, 1, 2, deps, edges, 2, 0);
  seed(8, begin);
  Writer update;
  put_update_capture_dependencies(update, 1, deps, nullptr, 2, 0);
  seed(9, update);
  Writer list;
  put_node_list(list, deps, edges, 2);
  seed(10, list);
  Writer info_ask, get;
  put_capture_info_ask(info_ask, {1, true});
  seed(11, info_ask);
  put_get_params(get, 2);
  seed(12, get);
}
