// protocol/wire/graph.h: every node type, node list and node array survives the trip, handles as
// ids; hostile counts, enums and truncations are refused.
#include "protocol/wire/graph.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rgpu::proto::wire {
namespace {

template <class H>
H id(uint64_t v) {
  return reinterpret_cast<H>(v);
}

Reader reader_of(Writer& w) { return Reader(w.buf().data(), w.buf().size()); }

// Encodes p (with empty LaunchArgs for a kernel) and decodes it.
void round_trip(const CUgraphNodeParams& p, NodeParams* out, uint64_t host_callback = 0) {
  Writer w;
  put_node_params(w, p, host_callback);
  if (p.type == CU_GRAPH_NODE_TYPE_KERNEL) put_packed_args(w, std::vector<ParamSlot>{}, 0);
  Reader r = reader_of(w);
  ASSERT_TRUE(read_node_params(r, out));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(out->p.type, p.type);
}

TEST(WireGraph, KernelParamsRoundTripWithTheirArguments) {
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = id<CUfunction>(5);
  k.kern = id<CUkernel>(6);
  k.ctx = id<CUcontext>(7);
  k.gridDimX = 1, k.gridDimY = 2, k.gridDimZ = 3, k.blockDimX = 4, k.blockDimY = 5, k.blockDimZ = 6;
  k.sharedMemBytes = 99;
  CUgraphNodeParams p = from_kernel(k);
  Writer w;
  put_node_params(w, p);
  size_t at = put_packed_args(w, std::vector<ParamSlot>{{0, 4}}, 4);
  uint32_t v = 1234;
  std::memcpy(w.buf().data() + at, &v, 4);
  Reader r = reader_of(w);
  NodeParams got;
  ASSERT_TRUE(read_node_params(r, &got));
  CUDA_KERNEL_NODE_PARAMS back{};
  to_kernel(got.p, &back);
  EXPECT_EQ(back.func, k.func);
  EXPECT_EQ(back.kern, k.kern);
  EXPECT_EQ(back.ctx, k.ctx);
  EXPECT_EQ(back.gridDimZ, 3u);
  EXPECT_EQ(back.blockDimX, 4u);
  EXPECT_EQ(back.sharedMemBytes, 99u);
  ASSERT_TRUE(got.args.bind());
  EXPECT_EQ(*static_cast<uint32_t*>(got.args.params()[0]), 1234u);
}

TEST(WireGraph, MemcpyParamsKeepArraysAsIdsAndNeverCarryHostPointers) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = id<CUarray>(42);
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x7000;
  c.dstHost = reinterpret_cast<void*>(0x1234);  // ignored by the driver for a device side; never sent
  c.WidthInBytes = 64;
  c.Height = 2;
  c.Depth = 1;
  NodeParams got;
  round_trip(from_copy(c, id<CUcontext>(3)), &got);
  const CUDA_MEMCPY3D& b = got.p.memcpy.copyParams;
  EXPECT_EQ(got.p.memcpy.copyCtx, id<CUcontext>(3));
  EXPECT_EQ(b.srcArray, id<CUarray>(42));
  EXPECT_EQ(b.dstDevice, 0x7000u);
  EXPECT_EQ(b.dstHost, nullptr);
  EXPECT_EQ(b.WidthInBytes, 64u);
  EXPECT_EQ(b.Height, 2u);
}

TEST(WireGraph, MemsetHostGraphAndEventParamsRoundTrip) {
  CUDA_MEMSET_NODE_PARAMS m{0x9000, 256, 0xab, 1, 256, 4};
  NodeParams got;
  round_trip(from_memset(m, id<CUcontext>(8)), &got);
  CUDA_MEMSET_NODE_PARAMS mb = to_memset(got.p);
  EXPECT_EQ(mb.dst, m.dst);
  EXPECT_EQ(mb.pitch, m.pitch);
  EXPECT_EQ(mb.value, m.value);
  EXPECT_EQ(mb.elementSize, m.elementSize);
  EXPECT_EQ(mb.width, m.width);
  EXPECT_EQ(mb.height, m.height);
  EXPECT_EQ(got.p.memset.ctx, id<CUcontext>(8));

  NodeParams host;
  round_trip(from_host(CUDA_HOST_NODE_PARAMS{}), &host, 77);
  EXPECT_EQ(host.host_callback, 77u);
  EXPECT_EQ(host.p.host.fn, nullptr);  // the function never travels

  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_GRAPH;
  g.graph.graph = id<CUgraph>(9);
  g.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  NodeParams child;
  round_trip(g, &child);
  EXPECT_EQ(child.p.graph.graph, id<CUgraph>(9));
  EXPECT_EQ(child.p.graph.ownership, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);

  for (CUgraphNodeType t : {CU_GRAPH_NODE_TYPE_WAIT_EVENT, CU_GRAPH_NODE_TYPE_EVENT_RECORD}) {
    CUgraphNodeParams e{};
    e.type = t;
    (t == CU_GRAPH_NODE_TYPE_WAIT_EVENT ? e.eventWait.event : e.eventRecord.event) = id<CUevent>(10);
    NodeParams ev;
    round_trip(e, &ev);
    EXPECT_EQ(t == CU_GRAPH_NODE_TYPE_WAIT_EVENT ? ev.p.eventWait.event : ev.p.eventRecord.event, id<CUevent>(10));
  }
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  NodeParams none;
  round_trip(empty, &none);
}

TEST(WireGraph, AllocFreeAndConditionalParamsRoundTrip) {
  CUmemAccessDesc descs[2]{};
  descs[0].location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  descs[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  descs[1].location = {CU_MEM_LOCATION_TYPE_DEVICE, 2};
  CUDA_MEM_ALLOC_NODE_PARAMS a{};
  a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  a.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  a.poolProps.win32SecurityAttributes = reinterpret_cast<void*>(0x1);  // Windows only: never sent
  a.accessDescs = descs;
  a.accessDescCount = 2;
  a.bytesize = 1 << 20;
  NodeParams got;
  round_trip(from_alloc(a), &got);
  CUDA_MEM_ALLOC_NODE_PARAMS b = to_alloc(got.p);
  EXPECT_EQ(b.poolProps.win32SecurityAttributes, nullptr);
  EXPECT_EQ(b.poolProps.allocType, CU_MEM_ALLOCATION_TYPE_PINNED);
  ASSERT_EQ(b.accessDescCount, 2u);
  EXPECT_EQ(b.accessDescs, got.descs.data());
  EXPECT_EQ(b.accessDescs[1].location.id, 2);
  EXPECT_EQ(b.accessDescs[0].flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(b.bytesize, 1u << 20);

  CUgraphNodeParams f{};
  f.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  f.free.dptr = 0xabc000;
  NodeParams freed;
  round_trip(f, &freed);
  EXPECT_EQ(freed.p.free.dptr, 0xabc000u);

  CUgraphNodeParams c{};
  c.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  c.conditional.handle = 0x55;
  c.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  c.conditional.size = 1;
  c.conditional.ctx = id<CUcontext>(4);
  NodeParams cond;
  round_trip(c, &cond);
  EXPECT_EQ(cond.p.conditional.handle, 0x55u);
  EXPECT_EQ(cond.p.conditional.type, CU_GRAPH_COND_TYPE_WHILE);
  EXPECT_EQ(cond.p.conditional.size, 1u);
  EXPECT_EQ(cond.p.conditional.ctx, id<CUcontext>(4));
}

TEST(WireGraph, UnknownTypesEnumsAndCountsOverTheLimitsAreMalformed) {
  auto refused = [](Writer& w) {
    Reader r = reader_of(w);
    NodeParams got;
    return !read_node_params(r, &got) && !r.ok();
  };
  Writer ext;
  ext.put_u32(CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL);  // never sent
  EXPECT_TRUE(refused(ext));
  Writer past;
  past.put_u32(CU_GRAPH_NODE_TYPE_CONDITIONAL + 1);
  EXPECT_TRUE(refused(past));
  Writer own;
  own.put_u32(CU_GRAPH_NODE_TYPE_GRAPH);
  own.put_u64(1);
  own.put_u32(CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE + 1);
  EXPECT_TRUE(refused(own));
  Writer descs;
  descs.put_u32(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  descs.put(CUmemPoolProps{});
  descs.put_u32(kMaxAccessDescs + 1);
  EXPECT_TRUE(refused(descs));
  Writer bodies;
  bodies.put_u32(CU_GRAPH_NODE_TYPE_CONDITIONAL);
  bodies.put_u64(1);
  bodies.put_u32(CU_GRAPH_COND_TYPE_IF);
  bodies.put_u32(kMaxBodies + 1);
  bodies.put_u64(1);
  EXPECT_TRUE(refused(bodies));
  Writer list;
  list.put_u64(kMaxNodes + 1);
  Reader r = reader_of(list);
  NodeList nl;
  EXPECT_FALSE(read_node_list(r, &nl));
}

TEST(WireGraph, AnAddRequestAndItsReplyRoundTrip) {
  CUgraphNode deps[2] = {id<CUgraphNode>(11), id<CUgraphNode>(12)};
  CUgraphEdgeData edges[2]{};
  edges[1].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  Writer w;
  put_add_node_head(w, 100, 200, deps, edges, 2);
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  p.free.dptr = 0x1000;
  put_node_params(w, p);
  Reader r = reader_of(w);
  AddNode got;
  ASSERT_TRUE(read_add_node(r, &got));
  EXPECT_EQ(got.node, 100u);
  EXPECT_EQ(got.graph, 200u);
  EXPECT_EQ(got.deps.nodes, (std::vector<uint64_t>{11, 12}));
  ASSERT_TRUE(got.deps.has_edges);
  EXPECT_EQ(got.deps.edges[1].type, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
  EXPECT_EQ(got.params.p.free.dptr, 0x1000u);

  Writer reply;
  put_add_node_reply(reply, CU_GRAPH_NODE_TYPE_CONDITIONAL, 0, {7, 8, 9});
  Reader rr = reader_of(reply);
  AddNodeReply back;
  ASSERT_TRUE(read_add_node_reply(rr, CU_GRAPH_NODE_TYPE_CONDITIONAL, &back));
  EXPECT_EQ(back.bodies, (std::vector<uint64_t>{7, 8, 9}));
  Writer alloc;
  put_add_node_reply(alloc, CU_GRAPH_NODE_TYPE_MEM_ALLOC, 0xfeed000, {});
  Reader ra = reader_of(alloc);
  ASSERT_TRUE(read_add_node_reply(ra, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &back));
  EXPECT_EQ(back.dptr, 0xfeed000u);
}

TEST(WireGraph, SetParamsCarryTheInstanceOnlyInItsForm) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_EMPTY;
  for (bool in_exec : {false, true}) {
    Writer w;
    put_set_params_head(w, in_exec, 5, 6);
    put_node_params(w, p);
    EXPECT_EQ(w.buf().size(), (in_exec ? 16u : 8u) + 4u);
    Reader r = reader_of(w);
    SetParams got;
    ASSERT_TRUE(read_set_params(r, in_exec, &got));
    EXPECT_EQ(got.exec, in_exec ? 5u : 0u);
    EXPECT_EQ(got.node, 6u);
  }
}

TEST(WireGraph, NodeArraysDependencyChangesAndExecUpdateRoundTrip) {
  NodeArrayAsk ask{3, true, true, 2};
  Writer w;
  put_node_array_ask(w, ask);
  Reader r = reader_of(w);
  NodeArrayAsk got_ask;
  ASSERT_TRUE(read_node_array_ask(r, &got_ask));
  EXPECT_EQ(got_ask.capacity, 2u);
  EXPECT_TRUE(got_ask.want_edges);

  NodeArray v;
  v.count = 5;  // more than the capacity: the driver's count stays the driver's
  v.from = {1, 2};
  v.to = {3, 4};
  v.edges.resize(2);
  v.edges[0].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  Writer reply;
  put_node_array(reply, ask, true, v);
  Reader rr = reader_of(reply);
  NodeArray back;
  ASSERT_TRUE(read_node_array(rr, ask, true, &back));
  EXPECT_EQ(back.count, 5u);
  EXPECT_EQ(back.from, v.from);
  EXPECT_EQ(back.to, v.to);
  EXPECT_EQ(back.edges[0].type, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);

  CUgraphNode from[1] = {id<CUgraphNode>(1)}, to[1] = {id<CUgraphNode>(2)};
  Writer change;
  put_dependency_change(change, 9, from, to, nullptr, 1);
  Reader rc = reader_of(change);
  DependencyChange dc;
  ASSERT_TRUE(read_dependency_change(rc, &dc));
  EXPECT_EQ(dc.graph, 9u);
  EXPECT_EQ(dc.from, std::vector<uint64_t>{1});
  EXPECT_EQ(dc.to, std::vector<uint64_t>{2});
  EXPECT_FALSE(dc.has_edges);

  Writer update;
  put_exec_update(update, 1, 2);
  put_exec_update_result(update, {CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, 3, 4});
  Reader ru = reader_of(update);
  uint64_t exec = 0, graph = 0;
  ExecUpdateResult res;
  ASSERT_TRUE(read_exec_update(ru, &exec, &graph));
  ASSERT_TRUE(read_exec_update_result(ru, &res));
  EXPECT_EQ(exec, 1u);
  EXPECT_EQ(graph, 2u);
  EXPECT_EQ(res.result, static_cast<uint32_t>(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED));
  EXPECT_EQ(res.error_from_node, 4u);
}

TEST(WireGraph, EveryTruncationOfAnAddRequestIsRefused) {
  CUgraphNode deps[1] = {id<CUgraphNode>(1)};
  Writer w;
  put_add_node_head(w, 1, 2, deps, nullptr, 1);
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = id<CUfunction>(3);
  put_node_params(w, from_kernel(k));
  put_packed_args(w, std::vector<ParamSlot>{{0, 8}}, 8);
  for (size_t n = 0; n < w.buf().size(); ++n) {
    Reader r(w.buf().data(), n);
    AddNode got;
    EXPECT_FALSE(read_add_node(r, &got)) << "prefix of " << n << " bytes";
  }
}

}  // namespace
}  // namespace rgpu::proto::wire
