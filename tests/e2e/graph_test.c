/* CUDA graphs built node by node, and JIT linking: one body, run through rgpu (shim -> server ->
 * fake or real driver) and directly against the real driver on the GPU machine. Plain C against
 * cuda.h, with real CUDA semantics only.
 * Usage: graph_test IMAGE [PTX]   (IMAGE: a cubin/fatbin of tests/kernels; PTX defaults to
 * test_kernels.ptx beside IMAGE)
 *
 * Covers: kernel nodes (kernelParams and extra), memset, memcpy device to device, host nodes in
 * graph order (and a host node a program spins on), empty nodes, child graphs, event record and
 * wait nodes, memory alloc and free nodes, cuGraphAddNode with a conditional IF node and its
 * body, topology queries and edits, node parameters read back and changed in the graph and in
 * an instance, cuGraphExecUpdate; cuLinkCreate/AddData/AddFile/Complete with log buffers; and
 * the wrong uses each must refuse. Through rgpu, a memcpy node with a host side works (staged
 * or mapped; test_host_sides), a host-to-host one is refused
 * (CUDA_ERROR_NOT_SUPPORTED); the real driver takes it. Stream capture: host copies captured
 * on a stream and on a stream joined through events (test_capture_host_copies), capture into
 * the caller's graph with dependencies updated by hand (test_capture_to_graph). */
#include <cuda.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define N 4096

static CUfunction g_fill;   /* rgpu_fill_u32(unsigned* p, unsigned value, unsigned long long n) */
static CUcontext g_ctx;
static int g_rgpu;

static CUgraphNode add_fill(CUgraph g, const CUgraphNode* deps, size_t n, CUdeviceptr p, unsigned* value,
                            unsigned long long* count) {
  void* args[] = {&p, value, count};
  CUDA_KERNEL_NODE_PARAMS kp;
  memset(&kp, 0, sizeof kp);
  kp.func = g_fill;
  kp.gridDimX = 8, kp.gridDimY = 1, kp.gridDimZ = 1;
  kp.blockDimX = 128, kp.blockDimY = 1, kp.blockDimZ = 1;
  kp.kernelParams = args;
  CUgraphNode node = NULL;
  CU(cuGraphAddKernelNode(&node, g, deps, n, &kp));
  return node;
}

static CUDA_MEMCPY3D dtod(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.srcPitch = bytes;
  c.srcHeight = 1;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = bytes;
  c.dstHeight = 1;
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

static CUDA_MEMSET_NODE_PARAMS memset32(CUdeviceptr dst, unsigned value, size_t n) {
  CUDA_MEMSET_NODE_PARAMS m;
  memset(&m, 0, sizeof m);
  m.dst = dst;
  m.value = value;
  m.elementSize = 4;
  m.width = n;
  m.height = 1;
  m.pitch = n * 4;
  return m;
}

/* Every element of [from, to) of a device buffer of N u32 equals want. */
static int all_equal(CUdeviceptr p, size_t from, size_t to, unsigned want) {
  static unsigned host[N];
  if (cuMemcpyDtoH(host, p, sizeof host) != CUDA_SUCCESS) return 0;
  for (size_t i = from; i < to; ++i)
    if (host[i] != want) {
      fprintf(stderr, "  element %zu is 0x%x, want 0x%x\n", i, host[i], want);
      return 0;
    }
  return 1;
}

/* Host nodes: each appends its tag to a log, in graph order. */
static int g_order[64];
static volatile int g_orders;
static void CUDA_CB host_tag(void* tag) {
  if (g_orders < 64) g_order[g_orders] = (int)(intptr_t)tag;
  g_orders = g_orders + 1;
}

static volatile int g_flag;
static void CUDA_CB host_set_flag(void* p) {
  (void)p;
  g_flag = 1;
}

static int contains(const CUgraphNode* list, size_t n, CUgraphNode x) {
  for (size_t i = 0; i < n; ++i)
    if (list[i] == x) return 1;
  return 0;
}

/* ---------- a graph with every common node type, launched twice; queries; parameters ---------- */
static void test_basic_graph(CUstream s) {
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, N * 4));
  CU(cuMemAlloc(&b, N * 4));
  CUgraph g = NULL;
  CU(cuGraphCreate(&g, 0));

  CUgraphNode ms = NULL, k = NULL, cp = NULL, h1 = NULL, e = NULL, h2 = NULL;
  CUDA_MEMSET_NODE_PARAMS m = memset32(a, 0x11111111u, N);
  CU(cuGraphAddMemsetNode(&ms, g, NULL, 0, &m, g_ctx));
  unsigned seven = 7;
  unsigned long long count = N;
  k = add_fill(g, NULL, 0, b, &seven, &count);
  seven = 1234; /* the node keeps the value it was given */
  CUgraphNode deps2[2] = {ms, k};
  CUDA_MEMCPY3D c = dtod(a, b, N * 2);
  CU(cuGraphAddMemcpyNode(&cp, g, deps2, 2, &c, g_ctx));
  CUDA_HOST_NODE_PARAMS hp = {host_tag, (void*)(intptr_t)1};
  CU(cuGraphAddHostNode(&h1, g, &cp, 1, &hp));
  CU(cuGraphAddEmptyNode(&e, g, &h1, 1));
  hp.userData = (void*)(intptr_t)2;
  CU(cuGraphAddHostNode(&h2, g, &e, 1, &hp));

  /* Topology. */
  size_t n = 0;
  CU(cuGraphGetNodes(g, NULL, &n));
  CHECK(n == 6, "graph has %zu nodes, want 6", n);
  CUgraphNode nodes[8];
  n = 8;
  CU(cuGraphGetNodes(g, nodes, &n));
  CHECK(n == 6 && contains(nodes, n, ms) && contains(nodes, n, h2), "cuGraphGetNodes: %zu nodes", n);
  n = 8;
  CU(cuGraphGetRootNodes(g, nodes, &n));
  CHECK(n == 2 && contains(nodes, 2, ms) && contains(nodes, 2, k), "root nodes: %zu", n);
  n = 0;
  CU(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
  CHECK(n == 5, "graph has %zu edges, want 5", n);
  CUgraphNode from[8], to[8];
  n = 8;
  CU(cuGraphGetEdges(g, from, to, NULL, &n));
  int found = 0;
  for (size_t i = 0; i < n; ++i) found += (from[i] == k && to[i] == cp) || (from[i] == e && to[i] == h2);
  CHECK(n == 5 && found == 2, "edges: %zu, %d of 2 expected ones", n, found);
  n = 8;
  CU(cuGraphNodeGetDependencies(cp, nodes, NULL, &n));
  CHECK(n == 2 && contains(nodes, 2, ms) && contains(nodes, 2, k), "dependencies of the copy: %zu", n);
  n = 8;
  CU(cuGraphNodeGetDependentNodes(ms, nodes, NULL, &n));
  CHECK(n == 1 && nodes[0] == cp, "dependents of the memset: %zu", n);
  CUgraphNodeType type;
  CU(cuGraphNodeGetType(h1, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_HOST, "host node type %d", (int)type);

  /* Parameters read back. */
  CUDA_KERNEL_NODE_PARAMS kp;
  memset(&kp, 0, sizeof kp);
  CU(cuGraphKernelNodeGetParams(k, &kp));
  CHECK(kp.func == g_fill && kp.gridDimX == 8 && kp.blockDimX == 128, "kernel node params read back wrong");
  CHECK(kp.kernelParams && kp.kernelParams[1] && *(unsigned*)kp.kernelParams[1] == 7 &&
            *(CUdeviceptr*)kp.kernelParams[0] == b && *(unsigned long long*)kp.kernelParams[2] == N,
        "kernel node arguments read back wrong");
  CUDA_MEMSET_NODE_PARAMS m2;
  CU(cuGraphMemsetNodeGetParams(ms, &m2));
  CHECK(m2.dst == a && m2.value == 0x11111111u && m2.elementSize == 4 && m2.width == N, "memset params read back");
  CUDA_MEMCPY3D c2;
  CU(cuGraphMemcpyNodeGetParams(cp, &c2));
  CHECK(c2.srcDevice == b && c2.dstDevice == a && c2.WidthInBytes == N * 2, "memcpy params read back");
  CUDA_HOST_NODE_PARAMS hp2;
  CU(cuGraphHostNodeGetParams(h2, &hp2));
  CHECK(hp2.fn == host_tag && hp2.userData == (void*)(intptr_t)2, "host params read back");

  /* Instantiate, launch twice. */
  CUgraphExec x = NULL;
  CU(cuGraphInstantiate(&x, g, 0));
  g_orders = 0;
  CU(cuGraphLaunch(x, s));
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 7) && all_equal(a, N / 2, N, 0x11111111u), "graph results wrong");
  CHECK(all_equal(b, 0, N, 7), "kernel node result wrong");
  CHECK(g_orders == 4 && g_order[0] == 1 && g_order[1] == 2 && g_order[2] == 1 && g_order[3] == 2,
        "host nodes ran %d times, out of order", g_orders);

  /* Changed in the graph: a later instance sees it, the earlier one does not. */
  unsigned nine = 9;
  void* args9[] = {&b, &nine, &count};
  kp.kernelParams = args9;
  kp.extra = NULL;
  CU(cuGraphKernelNodeSetParams(k, &kp));
  CUgraphExec x2 = NULL;
  CU(cuGraphInstantiate(&x2, g, 0));
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 7), "an instance changed with its graph");
  CU(cuGraphLaunch(x2, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 9), "a new instance missed the graph's change");

  /* Changed in an instance only. */
  unsigned five = 5;
  void* args5[] = {&b, &five, &count};
  kp.kernelParams = args5;
  CU(cuGraphExecKernelNodeSetParams(x, k, &kp));
  m.value = 0x22222222u;
  CU(cuGraphExecMemsetNodeSetParams(x, ms, &m, g_ctx));
  CUDA_HOST_NODE_PARAMS hp3 = {host_tag, (void*)(intptr_t)3};
  CU(cuGraphExecHostNodeSetParams(x, h2, &hp3));
  g_orders = 0;
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 5) && all_equal(a, N / 2, N, 0x22222222u), "instance parameters not applied");
  CHECK(g_orders == 2 && g_order[0] == 1 && g_order[1] == 3, "changed host node: %d runs", g_orders);

  /* The generic forms: a kernel node's params through cuGraphExecNodeSetParams. */
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_KERNEL;
  unsigned eleven = 11;
  void* args11[] = {&b, &eleven, &count};
  np.kernel.func = g_fill;
  np.kernel.gridDimX = 4, np.kernel.gridDimY = 1, np.kernel.gridDimZ = 1;
  np.kernel.blockDimX = 256, np.kernel.blockDimY = 1, np.kernel.blockDimZ = 1;
  np.kernel.kernelParams = args11;
  CU(cuGraphExecNodeSetParams(x, k, &np));
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 11), "cuGraphExecNodeSetParams not applied");

  /* cuGraphExecUpdate: the same topology with other values is taken... */
  CUgraph g2 = NULL;
  CU(cuGraphCreate(&g2, 0));
  CUgraphNode ms_b, k_b, cp_b, h1_b, e_b, h2_b;
  m.value = 0x33333333u;
  CU(cuGraphAddMemsetNode(&ms_b, g2, NULL, 0, &m, g_ctx));
  unsigned thirteen = 13;
  k_b = add_fill(g2, NULL, 0, b, &thirteen, &count);
  CUgraphNode deps2b[2] = {ms_b, k_b};
  CU(cuGraphAddMemcpyNode(&cp_b, g2, deps2b, 2, &c, g_ctx));
  hp.userData = (void*)(intptr_t)4;
  CU(cuGraphAddHostNode(&h1_b, g2, &cp_b, 1, &hp));
  CU(cuGraphAddEmptyNode(&e_b, g2, &h1_b, 1));
  CU(cuGraphAddHostNode(&h2_b, g2, &e_b, 1, &hp));
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CU(cuGraphExecUpdate(x, g2, &info));
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "update result %d", (int)info.result);
  g_orders = 0;
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(a, 0, N / 2, 13) && all_equal(a, N / 2, N, 0x33333333u), "updated instance results wrong");
  CHECK(g_orders == 2 && g_order[0] == 4 && g_order[1] == 4, "updated host nodes: %d runs", g_orders);
  /* ... another topology is refused, naming why. */
  CUgraphNode extra_node;
  CU(cuGraphAddEmptyNode(&extra_node, g2, &h2_b, 1));
  memset(&info, 0, sizeof info);
  CUresult rc = cuGraphExecUpdate(x, g2, &info);
  CHECK(rc == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE && info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
        "a changed topology was not refused: %s, result %d", err_name(rc), (int)info.result);

  /* Edges added and removed. */
  CUgraphNode x1, x2n;
  CU(cuGraphAddEmptyNode(&x1, g2, NULL, 0));
  CU(cuGraphAddEmptyNode(&x2n, g2, NULL, 0));
  size_t before = 0, after = 0;
  CU(cuGraphGetEdges(g2, NULL, NULL, NULL, &before));
  CU(cuGraphAddDependencies(g2, &x1, &x2n, NULL, 1));
  CU(cuGraphGetEdges(g2, NULL, NULL, NULL, &after));
  CHECK(after == before + 1, "edge not added: %zu -> %zu", before, after);
  CU(cuGraphRemoveDependencies(g2, &x1, &x2n, NULL, 1));
  CU(cuGraphGetEdges(g2, NULL, NULL, NULL, &after));
  CHECK(after == before, "edge not removed: %zu -> %zu", before, after);
  CHECK(cuGraphRemoveDependencies(g2, &x1, &x2n, NULL, 1) != CUDA_SUCCESS, "removing a missing edge was accepted");
  CU(cuGraphDestroyNode(x2n));
  n = 0;
  CU(cuGraphGetNodes(g2, NULL, &n));
  CHECK(n == 8, "after destroying a node: %zu nodes, want 8", n);

  CU(cuGraphExecDestroy(x));
  CU(cuGraphExecDestroy(x2));
  CU(cuGraphDestroy(g));
  CU(cuGraphDestroy(g2));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
}

/* ---------- kernel arguments as `extra`, the generic cuGraphAddNode, a child graph ---------- */
static void test_extra_and_child(CUstream s) {
  CUdeviceptr c = 0, d = 0;
  CU(cuMemAlloc(&c, N * 4));
  CU(cuMemAlloc(&d, N * 4));
  CUgraph child = NULL, parent = NULL;
  CU(cuGraphCreate(&child, 0));
  CU(cuGraphCreate(&parent, 0));
  /* rgpu_fill_u32's parameter buffer: p at 0, value at 8, n at 16. */
  unsigned char buf[24];
  memset(buf, 0, sizeof buf);
  unsigned three = 3;
  unsigned long long count = N;
  memcpy(buf, &c, 8);
  memcpy(buf + 8, &three, 4);
  memcpy(buf + 16, &count, 8);
  size_t size = sizeof buf;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_KERNEL;
  np.kernel.func = g_fill;
  np.kernel.gridDimX = 16, np.kernel.gridDimY = 1, np.kernel.gridDimZ = 1;
  np.kernel.blockDimX = 64, np.kernel.blockDimY = 1, np.kernel.blockDimZ = 1;
  np.kernel.extra = extra;
  CUgraphNode kn = NULL;
  CU(cuGraphAddNode(&kn, child, NULL, NULL, 0, &np));
  CUgraphNode cn = NULL, cp = NULL;
  CU(cuGraphAddChildGraphNode(&cn, parent, NULL, 0, child));
  CUDA_MEMCPY3D copy = dtod(d, c, N * 4);
  CU(cuGraphAddMemcpyNode(&cp, parent, &cn, 1, &copy, g_ctx));
  CUgraph embedded = NULL;
  CU(cuGraphChildGraphNodeGetGraph(cn, &embedded));
  size_t n = 0;
  if (embedded) CU(cuGraphGetNodes(embedded, NULL, &n));
  CHECK(embedded && n == 1, "the child graph node holds %zu nodes", n);
  CUgraphExec x = NULL;
  CU(cuGraphInstantiate(&x, parent, 0));
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(d, 0, N, 3), "child graph result wrong");
  CU(cuGraphExecDestroy(x));
  CU(cuGraphDestroy(parent));
  CU(cuGraphDestroy(child));
  CU(cuMemFree(c));
  CU(cuMemFree(d));
}

/* ---------- event record and wait nodes across two streams ---------- */
static void test_events(CUstream s) {
  CUstream s2 = NULL;
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent ev = NULL;
  CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr x = 0, y = 0;
  CU(cuMemAlloc(&x, N * 4));
  CU(cuMemAlloc(&y, N * 4));
  CU(cuMemsetD32(y, 0, N));
  CUgraph ga = NULL, gb = NULL;
  CU(cuGraphCreate(&ga, 0));
  CU(cuGraphCreate(&gb, 0));
  unsigned v = 21;
  unsigned long long count = N;
  CUgraphNode k = add_fill(ga, NULL, 0, x, &v, &count);
  CUgraphNode rec = NULL, wait = NULL, cp = NULL;
  CU(cuGraphAddEventRecordNode(&rec, ga, &k, 1, ev));
  CU(cuGraphAddEventWaitNode(&wait, gb, NULL, 0, ev));
  CUDA_MEMCPY3D copy = dtod(y, x, N * 4);
  CU(cuGraphAddMemcpyNode(&cp, gb, &wait, 1, &copy, g_ctx));
  CUevent got = NULL;
  CU(cuGraphEventRecordNodeGetEvent(rec, &got));
  CHECK(got == ev, "event record node names another event");
  CUgraphExec xa = NULL, xb = NULL;
  CU(cuGraphInstantiate(&xa, ga, 0));
  CU(cuGraphInstantiate(&xb, gb, 0));
  CU(cuGraphLaunch(xa, s));
  CU(cuGraphLaunch(xb, s2));
  CU(cuStreamSynchronize(s2));
  CHECK(all_equal(y, 0, N, 21), "the wait node did not order the copy after the record");
  CU(cuStreamSynchronize(s));
  CU(cuGraphExecDestroy(xa));
  CU(cuGraphExecDestroy(xb));
  CU(cuGraphDestroy(ga));
  CU(cuGraphDestroy(gb));
  CU(cuEventDestroy(ev));
  CU(cuStreamDestroy(s2));
  CU(cuMemFree(x));
  CU(cuMemFree(y));
}

/* ---------- memory alloc and free nodes ---------- */
static void test_mem_nodes(CUstream s, CUdevice dev) {
  CUdeviceptr out = 0;
  CU(cuMemAlloc(&out, N * 4));
  CUgraph g = NULL;
  CU(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.poolProps.location.id = dev;
  ap.bytesize = N * 4;
  CUgraphNode an = NULL, ms = NULL, cp = NULL, fn = NULL;
  CU(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
  CHECK(ap.dptr != 0, "allocation node returned no address");
  CUDA_MEMSET_NODE_PARAMS m = memset32(ap.dptr, 0x5a5a5a5au, N);
  CU(cuGraphAddMemsetNode(&ms, g, &an, 1, &m, g_ctx));
  CUDA_MEMCPY3D copy = dtod(out, ap.dptr, N * 4);
  CU(cuGraphAddMemcpyNode(&cp, g, &ms, 1, &copy, g_ctx));
  CU(cuGraphAddMemFreeNode(&fn, g, &cp, 1, ap.dptr));
  CUDA_MEM_ALLOC_NODE_PARAMS back;
  memset(&back, 0, sizeof back);
  CU(cuGraphMemAllocNodeGetParams(an, &back));
  CHECK(back.dptr == ap.dptr && back.bytesize == N * 4 && back.poolProps.location.id == dev,
        "allocation node params read back wrong");
  CUdeviceptr freed = 0;
  CU(cuGraphMemFreeNodeGetParams(fn, &freed));
  CHECK(freed == ap.dptr, "free node names another pointer");
  CUgraphExec x = NULL;
  CU(cuGraphInstantiate(&x, g, 0));
  CU(cuGraphLaunch(x, s));
  CU(cuGraphLaunch(x, s));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(out, 0, N, 0x5a5a5a5au), "graph-allocated memory result wrong");
  cuuint64_t high = 0, zero = 0;
  CU(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &high));
  CHECK(high >= N * 4, "graph memory high watermark %llu, want at least %d", (unsigned long long)high, N * 4);
  CU(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
  CHECK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero) != CUDA_SUCCESS,
        "the current graph memory use was set");
  CU(cuDeviceGraphMemTrim(dev));
  CU(cuGraphExecDestroy(x));
  CU(cuGraphDestroy(g));
  CU(cuMemFree(out));
}

/* ---------- what the real driver answers (tests/conformance, H200 run 2) ----------
 * An allocation a graph keeps (no free node) is made again at every launch: a launch while the
 * last one's is outstanding is refused; freed outside the graph (cuMemFree, cuMemFreeAsync) the
 * next launch works. A capture ended with a NULL graph ends. A synchronize in a capture is
 * refused and invalidates it. cuMemFreeAsync on a stream from a thread with no current context
 * works (the stream names the context). Through rgpu a launch is one-way: its error comes with
 * the next call that waits. */
static CUresult launched(CUgraphExec x, CUstream s) {
  CUresult rc = cuGraphLaunch(x, s);
  return rc == CUDA_SUCCESS ? cuStreamSynchronize(s) : rc;
}

typedef struct {
  CUdeviceptr p;
  CUstream s;
  CUresult free_rc, current_rc;
  CUcontext current;
} NoContextFree;

static void* free_without_context(void* arg) {
  NoContextFree* a = arg;
  a->current_rc = cuCtxGetCurrent(&a->current);
  a->free_rc = cuMemFreeAsync(a->p, a->s);
  return NULL;
}

static void test_driver_answers(CUstream s, CUdevice dev) {
  CUgraph g = NULL;
  CU(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.poolProps.location.id = dev;
  ap.bytesize = N * 4;
  CUgraphNode an = NULL, ms = NULL;
  CU(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
  CUDA_MEMSET_NODE_PARAMS m = memset32(ap.dptr, 0x77u, N);
  CU(cuGraphAddMemsetNode(&ms, g, &an, 1, &m, g_ctx));
  CUgraphExec x = NULL;
  CU(cuGraphInstantiate(&x, g, 0));
  CU(launched(x, s));
  CHECK(all_equal(ap.dptr, 0, N, 0x77u), "a graph's allocation does not hold what the graph wrote");
  CUresult rc = launched(x, s);
  CHECK(rc == CUDA_ERROR_INVALID_VALUE, "a launch while its allocation is outstanding: %s", err_name(rc));
  CU(cuMemFree(ap.dptr));
  CU(launched(x, s));
  CU(cuMemFreeAsync(ap.dptr, s));
  CU(cuStreamSynchronize(s));
  CU(launched(x, s));
  CU(cuMemFreeAsync(ap.dptr, s));
  CU(cuStreamSynchronize(s));
  CU(cuGraphExecDestroy(x));
  CU(cuGraphDestroy(g));

  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, 4096));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU(cuGraphCreate(&g, 0));
  CU(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async(d, 1, 4096, s));
  CU(cuStreamEndCapture(s, NULL));
  CU(cuStreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "capture to a graph ended with a NULL graph: status %d", (int)st);
  CU(cuGraphDestroy(g));
  CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async(d, 2, 4096, s));
  CU(cuStreamEndCapture(s, NULL));
  CU(cuStreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "a capture ended with a NULL graph: status %d", (int)st);

  CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async(d, 3, 4096, s));
  rc = cuStreamSynchronize(s);
  CHECK(rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a synchronize in a capture: %s", err_name(rc));
  CU(cuStreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "after a synchronize in a capture: status %d", (int)st);
  CUgraph out = NULL;
  rc = cuStreamEndCapture(s, &out);
  CHECK(rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && out == NULL, "ending an invalidated capture: %s",
        err_name(rc));
  CU(cuMemFree(d));

  NoContextFree a;
  memset(&a, 0, sizeof a);
  a.s = s;
  CU(cuMemAllocAsync(&a.p, 1 << 20, s));
  CU(cuStreamSynchronize(s));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_without_context, &a) == 0, "no thread");
  pthread_join(t, NULL);
  CHECK(a.current_rc == CUDA_SUCCESS && a.current == NULL, "the new thread has a current context");
  CHECK(a.free_rc == CUDA_SUCCESS, "cuMemFreeAsync on a stream from a thread with no current context: %s",
        err_name(a.free_rc));
  CU(cuStreamSynchronize(s));
}

/* ---------- a conditional IF node (cuGraphAddNode), its body from the driver ---------- */
static void test_conditional(CUstream s) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, N * 4));
  for (unsigned take = 0; take < 2; ++take) {
    CU(cuMemsetD32(p, 0, N));
    CUgraph g = NULL;
    CU(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h = 0;
    CU(cuGraphConditionalHandleCreate(&h, g, g_ctx, take, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = h;
    np.conditional.type = CU_GRAPH_COND_TYPE_IF;
    np.conditional.size = 1;
    np.conditional.ctx = g_ctx;
    CUgraphNode cn = NULL;
    CU(cuGraphAddNode(&cn, g, NULL, NULL, 0, &np));
    CUgraph body = np.conditional.phGraph_out ? np.conditional.phGraph_out[0] : NULL;
    CHECK(body != NULL, "the conditional node gave no body graph");
    if (!body) {
      CU(cuGraphDestroy(g));
      continue;
    }
    CUgraphNode ms = NULL;
    CUDA_MEMSET_NODE_PARAMS m = memset32(p, 0x77u, N);
    CU(cuGraphAddMemsetNode(&ms, body, NULL, 0, &m, g_ctx));
    CUgraphExec x = NULL;
    CU(cuGraphInstantiate(&x, g, 0));
    CU(cuGraphLaunch(x, s));
    CU(cuStreamSynchronize(s));
    CHECK(all_equal(p, 0, N, take ? 0x77u : 0), "IF body %s", take ? "did not run" : "ran with a false condition");
    CU(cuGraphExecDestroy(x));
    /* Wrong size for an IF node. */
    np.conditional.size = 3;
    np.conditional.phGraph_out = NULL;
    CUgraphNode bad = NULL;
    CHECK(cuGraphAddNode(&bad, g, NULL, NULL, 0, &np) != CUDA_SUCCESS, "an IF node with 3 bodies was accepted");
    CU(cuGraphDestroy(g));
  }
  CU(cuMemFree(p));
}

/* ---------- a host node the program spins on (no driver call while it waits) ---------- */
static void test_spin_on_host_node(CUstream s) {
  CUgraph g = NULL;
  CU(cuGraphCreate(&g, 0));
  CUgraphNode hn = NULL;
  CUDA_HOST_NODE_PARAMS hp = {host_set_flag, NULL};
  CU(cuGraphAddHostNode(&hn, g, NULL, 0, &hp));
  CUgraphExec x = NULL;
  CU(cuGraphInstantiate(&x, g, 0));
  g_flag = 0;
  CU(cuGraphLaunch(x, s));
  double t0 = now_ms();
  while (!g_flag && now_ms() - t0 < 10000) usleep(100);
  CHECK(g_flag, "a launched graph's host node did not run while the program waited without driver calls");
  CU(cuStreamSynchronize(s));
  CU(cuGraphExecDestroy(x));
  CU(cuGraphDestroy(g));
}

/* ---------- wrong uses ---------- */
static void test_refusals(void) {
  CUdeviceptr a = 0;
  CU(cuMemAlloc(&a, N * 4));
  CUgraph g = NULL, other = NULL;
  CU(cuGraphCreate(&g, 0));
  CU(cuGraphCreate(&other, 0));
  CUgraphNode foreign = NULL, n = NULL;
  CU(cuGraphAddEmptyNode(&foreign, other, NULL, 0));
  CHECK(cuGraphAddEmptyNode(&n, g, &foreign, 1) != CUDA_SUCCESS, "a dependency from another graph was accepted");
  CUDA_MEMSET_NODE_PARAMS m = memset32(a, 0, N);
  m.elementSize = 3;
  CHECK(cuGraphAddMemsetNode(&n, g, NULL, 0, &m, g_ctx) != CUDA_SUCCESS, "memset element size 3 was accepted");
  CUDA_HOST_NODE_PARAMS hp = {NULL, NULL};
  CHECK(cuGraphAddHostNode(&n, g, NULL, 0, &hp) != CUDA_SUCCESS, "a host node without a function was accepted");
  CUDA_KERNEL_NODE_PARAMS kp;
  memset(&kp, 0, sizeof kp);
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  CHECK(cuGraphAddKernelNode(&n, g, NULL, 0, &kp) != CUDA_SUCCESS, "a kernel node without a kernel was accepted");
  CUgraphNode ms = NULL;
  m.elementSize = 4;
  CU(cuGraphAddMemsetNode(&ms, g, NULL, 0, &m, g_ctx));
  CHECK(cuGraphKernelNodeGetParams(ms, &kp) != CUDA_SUCCESS, "kernel params of a memset node were given");
  CHECK(cuGraphGetNodes(g, NULL, NULL) != CUDA_SUCCESS, "cuGraphGetNodes without a count was accepted");

  /* Host to host in a memcpy node: the real driver takes it; rgpu's server cannot reach this
   * process's memory at either end. */
  static unsigned h2h_src[16], h2h_dst[16];
  CUDA_MEMCPY3D hh = dtod(0, 0, sizeof h2h_src);
  hh.srcMemoryType = hh.dstMemoryType = CU_MEMORYTYPE_HOST;
  hh.srcHost = h2h_src;
  hh.dstHost = h2h_dst;
  CUgraphNode hn = NULL;
  CUresult hrc = cuGraphAddMemcpyNode(&hn, g, NULL, 0, &hh, g_ctx);
  if (g_rgpu)
    CHECK(hrc == CUDA_ERROR_NOT_SUPPORTED, "a host-to-host memcpy node through rgpu: %s, want NOT_SUPPORTED",
          err_name(hrc));
  else
    CHECK(hrc == CUDA_SUCCESS, "a host-to-host memcpy node on the real driver: %s", err_name(hrc));
  CU(cuGraphDestroy(g));
  CU(cuGraphDestroy(other));
  CU(cuMemFree(a));
}

/* ---------- memcpy nodes with a host side ----------
 * The real driver reads and writes host memory when the node runs; through rgpu the bytes move
 * around each launch (staged) or through the mapped copy (DEVICEMAP). Covered: pinned memory
 * without DEVICEMAP and pageable memory (heap, stack) as source and destination, named as host
 * memory and as unified addresses; a pitched destination whose gaps must survive; mapped memory;
 * a cloned graph; parameters changed in the graph and in an instance; launched twice with the
 * host source changed between launches (sampled at launch, as simpleCudaGraphs relies on). */
static void test_host_sides(CUstream s) {
  enum { M = 1024 };
  unsigned* pinned = NULL;
  unsigned* mapped = NULL;
  CU(cuMemAllocHost((void**)&pinned, M * 4));
  CU(cuMemHostAlloc((void**)&mapped, M * 4, CU_MEMHOSTALLOC_DEVICEMAP));
  unsigned* heap = malloc(M * 4);
  unsigned stack_out[M];
  if (!pinned || !mapped || !heap) return;
  CUdeviceptr d = 0, d2 = 0;
  CU(cuMemAlloc(&d, M * 4));
  CU(cuMemAlloc(&d2, M * 4));
  for (int unified = 0; unified < 2; ++unified) {
    for (int i = 0; i < M; ++i) pinned[i] = 100 + i, heap[i] = 0, stack_out[i] = 0, mapped[i] = 0;
    CUgraph g = NULL;
    CU(cuGraphCreate(&g, 0));
    /* pinned → d, d → heap, d → stack (by unified address when `unified`), d → mapped */
    CUDA_MEMCPY3D in = dtod(d, 0, M * 4);
    in.srcMemoryType = unified ? CU_MEMORYTYPE_UNIFIED : CU_MEMORYTYPE_HOST;
    in.srcHost = unified ? NULL : pinned;
    in.srcDevice = unified ? (CUdeviceptr)(uintptr_t)pinned : 0;
    CUgraphNode n_in = NULL, n_heap = NULL, n_stack = NULL, n_mapped = NULL;
    CU(cuGraphAddMemcpyNode(&n_in, g, NULL, 0, &in, g_ctx));
    CUDA_MEMCPY3D out = dtod(0, d, M * 4);
    out.dstMemoryType = CU_MEMORYTYPE_HOST;
    out.dstHost = heap;
    CU(cuGraphAddMemcpyNode(&n_heap, g, &n_in, 1, &out, g_ctx));
    out.dstMemoryType = unified ? CU_MEMORYTYPE_UNIFIED : CU_MEMORYTYPE_HOST;
    out.dstHost = unified ? NULL : stack_out;
    out.dstDevice = unified ? (CUdeviceptr)(uintptr_t)stack_out : 0;
    CU(cuGraphAddMemcpyNode(&n_stack, g, &n_in, 1, &out, g_ctx));
    out.dstMemoryType = CU_MEMORYTYPE_HOST;
    out.dstHost = mapped;
    out.dstDevice = 0;
    CU(cuGraphAddMemcpyNode(&n_mapped, g, &n_in, 1, &out, g_ctx));
    CUgraphExec e = NULL;
    CU(cuGraphInstantiate(&e, g, 0));
    for (int launch = 0; launch < 2 && e; ++launch) {
      for (int i = 0; i < M; ++i) pinned[i] = 1000 * launch + i;
      CU(cuGraphLaunch(e, s));
      CU(cuStreamSynchronize(s));
      int bad = 0;
      for (int i = 0; i < M; ++i)
        bad += heap[i] != 1000u * launch + i || stack_out[i] != 1000u * launch + i || mapped[i] != 1000u * launch + i;
      CHECK(bad == 0, "host-side memcpy nodes (%s), launch %d: %d elements wrong (heap[1]=%u stack[1]=%u mapped[1]=%u)",
            unified ? "unified" : "host", launch, bad, heap[1], stack_out[1], mapped[1]);
    }
    /* A clone launches the same copies. */
    CUgraph clone = NULL;
    CUgraphExec ce = NULL;
    CU(cuGraphClone(&clone, g));
    if (clone) CU(cuGraphInstantiate(&ce, clone, 0));
    if (ce) {
      for (int i = 0; i < M; ++i) pinned[i] = 7 + i, heap[i] = 0;
      CU(cuGraphLaunch(ce, s));
      CU(cuStreamSynchronize(s));
      CHECK(heap[0] == 7 && heap[M - 1] == 7 + M - 1, "a cloned graph's host-side copy: heap[0]=%u", heap[0]);
      CU(cuGraphExecDestroy(ce));
    }
    if (clone) CU(cuGraphDestroy(clone));
    /* New parameters in the instance: the heap node now fills the second half of heap only. */
    if (e) {
      CUDA_MEMCPY3D half = dtod(0, d, M * 2);
      half.dstMemoryType = CU_MEMORYTYPE_HOST;
      half.dstHost = heap + M / 2;
      CU(cuGraphExecMemcpyNodeSetParams(e, n_heap, &half, g_ctx));
      for (int i = 0; i < M; ++i) pinned[i] = 5000 + i, heap[i] = 1;
      CU(cuGraphLaunch(e, s));
      CU(cuStreamSynchronize(s));
      CHECK(heap[0] == 1 && heap[M / 2 - 1] == 1 && heap[M / 2] == 5000 && heap[M - 1] == 5000 + M / 2 - 1,
            "instance memcpy parameters with a host side: heap[0]=%u heap[M/2]=%u", heap[0], heap[M / 2]);
      CU(cuGraphExecDestroy(e));
    }
    /* New parameters in the graph: the input node now reads the heap (pageable) instead. */
    for (int i = 0; i < M; ++i) heap[i] = 77 + i;
    CUDA_MEMCPY3D from_heap = dtod(d, 0, M * 4);
    from_heap.srcMemoryType = CU_MEMORYTYPE_HOST;
    from_heap.srcHost = heap;
    CU(cuGraphMemcpyNodeSetParams(n_in, &from_heap));
    CU(cuGraphInstantiate(&e, g, 0));
    if (e) {
      CU(cuGraphLaunch(e, s));
      CU(cuStreamSynchronize(s));
      CHECK(stack_out[0] == 77 && stack_out[M - 1] == 77 + M - 1, "graph memcpy parameters with a host side: %u",
            stack_out[0]);
      CU(cuGraphExecDestroy(e));
    }
    CU(cuGraphDestroy(g));
  }

  /* A pitched destination: 4 rows of 64 bytes into host rows 128 bytes apart; the gaps stay. */
  {
    unsigned char rows[4 * 128];
    memset(rows, 0xee, sizeof rows);
    CU(cuMemsetD8(d2, 0x42, M * 4));
    CUDA_MEMCPY3D c = dtod(0, d2, 64);
    c.srcPitch = 64;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = rows;
    c.dstPitch = 128;
    c.dstHeight = 4;
    c.Height = 4;
    CUgraph g = NULL;
    CUgraphNode n = NULL;
    CUgraphExec e = NULL;
    CU(cuGraphCreate(&g, 0));
    /* Driver 580 refuses this node (CUDA_ERROR_INVALID_VALUE, seen on the H200 run directly);
       rgpu stages it, and then the bytes must land where the driver would put them. */
    CUresult add = cuGraphAddMemcpyNode(&n, g, NULL, 0, &c, g_ctx);
    CHECK(add == CUDA_SUCCESS || add == CUDA_ERROR_INVALID_VALUE, "pitched host destination node: %d", (int)add);
    if (add == CUDA_SUCCESS) CU(cuGraphInstantiate(&e, g, 0));
    if (e) {
      CU(cuGraphLaunch(e, s));
      CU(cuStreamSynchronize(s));
      int bad = 0;
      for (int i = 0; i < 4 * 128; ++i) bad += rows[i] != ((i % 128) < 64 ? 0x42 : 0xee);
      CHECK(bad == 0, "a pitched host destination: %d bytes wrong", bad);
      CU(cuGraphExecDestroy(e));
    }
    CU(cuGraphDestroy(g));
  }
  CU(cuMemFree(d));
  CU(cuMemFree(d2));
  CU(cuMemFreeHost(pinned));
  CU(cuMemFreeHost(mapped));
  free(heap);
}

/* Stream capture with host copies (as cuda-samples simpleCudaGraphs and jacobiCudaGraphs do):
 * cuMemcpyHtoDAsync / cuMemcpyDtoHAsync / cuMemcpyAsync between device memory and pinned,
 * pageable, stack and mapped host memory, on the capturing stream and on a stream joined to the
 * capture through events. Nothing runs before the launch; each launch reads the host sources
 * anew and fills the host destinations. Then a clone, and cuGraphExecUpdate to a graph that
 * writes elsewhere. */
static void test_capture_host_copies(CUstream s) {
  enum { M = 1024 };
  unsigned *pinned = NULL, *mapped = NULL, *out_a = NULL, *out_b = NULL;
  CU(cuMemAllocHost((void**)&pinned, M * 4));
  CU(cuMemAllocHost((void**)&out_a, M * 4));
  CU(cuMemAllocHost((void**)&out_b, M * 4));
  CU(cuMemHostAlloc((void**)&mapped, M * 4, CU_MEMHOSTALLOC_DEVICEMAP));
  unsigned* heap = malloc(M * 4);
  unsigned stack_out[M];
  CUstream s2 = NULL;
  CUevent fork = NULL, join = NULL;
  CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr d = 0, d2 = 0;
  CU(cuMemAlloc(&d, M * 4));
  CU(cuMemAlloc(&d2, M * 4));
  if (!pinned || !mapped || !out_a || !out_b || !heap || !s2 || !d || !d2) return;
  for (int i = 0; i < M; ++i) pinned[i] = 100 + i, heap[i] = 0, stack_out[i] = 0, mapped[i] = 0;
  CU(cuMemsetD32(d, 0, M));

  CUgraph g = NULL;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemcpyHtoDAsync(d, pinned, M * 4, s));
  CU(cuEventRecord(fork, s));
  CU(cuStreamWaitEvent(s2, fork, 0));
  CU(cuStreamIsCapturing(s2, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "a stream that waited on a captured event joins the capture (%d)", st);
  CU(cuMemcpyDtoHAsync(heap, d, M * 4, s2));
  CU(cuMemsetD32Async(d2, 0x55, M, s));
  CU(cuMemcpyAsync((CUdeviceptr)(uintptr_t)stack_out, d2, M * 4, s));
  CU(cuMemcpyDtoHAsync(mapped, d, M * 4, s));
  CU(cuEventRecord(join, s2));
  CU(cuStreamWaitEvent(s, join, 0));
  CU(cuStreamEndCapture(s, &g));
  CU(cuStreamIsCapturing(s2, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "the joined stream's capture ends with the origin's (%d)", st);
  CU(cuStreamSynchronize(s));
  CHECK(heap[0] == 0 && stack_out[0] == 0 && mapped[0] == 0, "captured copies ran before any launch: %u %u %u",
        heap[0], stack_out[0], mapped[0]);
  CUgraphExec e = NULL;
  if (g) CU(cuGraphInstantiate(&e, g, 0));
  for (int launch = 0; launch < 2 && e; ++launch) {
    for (int i = 0; i < M; ++i) pinned[i] = 1000 * launch + i;
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < M; ++i)
      bad += heap[i] != 1000u * launch + i || mapped[i] != 1000u * launch + i || stack_out[i] != 0x55;
    CHECK(bad == 0, "captured host copies, launch %d: %d elements wrong (heap[1]=%u mapped[1]=%u stack[1]=0x%x)",
          launch, bad, heap[1], mapped[1], stack_out[1]);
  }
  if (e) CU(cuGraphExecDestroy(e));
  /* A clone brings the captured transfers along. */
  CUgraph clone = NULL;
  CUgraphExec ce = NULL;
  if (g) CU(cuGraphClone(&clone, g));
  if (clone) CU(cuGraphInstantiate(&ce, clone, 0));
  if (ce) {
    for (int i = 0; i < M; ++i) pinned[i] = 7 + i, heap[i] = 0;
    CU(cuGraphLaunch(ce, s));
    CU(cuStreamSynchronize(s));
    CHECK(heap[0] == 7 && heap[M - 1] == 7 + M - 1, "a clone of a captured graph: heap[0]=%u", heap[0]);
    CU(cuGraphExecDestroy(ce));
  }
  if (clone) CU(cuGraphDestroy(clone));
  if (g) CU(cuGraphDestroy(g));

  /* cuGraphExecUpdate: an instance of a graph writing out_a takes a graph writing out_b. */
  CUgraph ga = NULL, gb = NULL;
  unsigned* outs[2] = {out_a, out_b};
  CUgraph* graphs[2] = {&ga, &gb};
  for (int k = 0; k < 2; ++k) {
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuMemcpyHtoDAsync(d, pinned, M * 4, s));
    CU(cuMemcpyDtoHAsync(outs[k], d, M * 4, s));
    CU(cuStreamEndCapture(s, graphs[k]));
  }
  CUgraphExec ea = NULL;
  if (ga) CU(cuGraphInstantiate(&ea, ga, 0));
  if (ea && gb) {
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CU(cuGraphExecUpdate(ea, gb, &info));
    for (int i = 0; i < M; ++i) pinned[i] = 300 + i, out_a[i] = 1, out_b[i] = 2;
    CU(cuGraphLaunch(ea, s));
    CU(cuStreamSynchronize(s));
    CHECK(out_a[0] == 1 && out_b[0] == 300 && out_b[M - 1] == 300 + M - 1,
          "an updated instance copies to the new graph's host buffer: out_a[0]=%u out_b[0]=%u", out_a[0], out_b[0]);
    CU(cuGraphExecDestroy(ea));
  }
  if (ga) CU(cuGraphDestroy(ga));
  if (gb) CU(cuGraphDestroy(gb));

  CU(cuEventDestroy(fork));
  CU(cuEventDestroy(join));
  CU(cuStreamDestroy(s2));
  CU(cuMemFree(d));
  CU(cuMemFree(d2));
  CU(cuMemFreeHost(pinned));
  CU(cuMemFreeHost(mapped));
  CU(cuMemFreeHost(out_a));
  CU(cuMemFreeHost(out_b));
  free(heap);
}

/* cuStreamBeginCaptureToGraph after a node of the caller's graph, cuStreamGetCaptureInfo_v3 on
 * it, a node added by hand and made the stream's dependency with
 * cuStreamUpdateCaptureDependencies(_v2) (as cuda-samples graphConditionalNodes does). */
static void test_capture_to_graph(CUstream s) {
  enum { M = 1024 };
  unsigned* heap = malloc(M * 4);
  unsigned* heap2 = malloc(M * 4);
  CUdeviceptr d = 0, d2 = 0;
  CU(cuMemAlloc(&d, M * 4));
  CU(cuMemAlloc(&d2, M * 4));
  if (!heap || !heap2 || !d || !d2) return;
  for (int i = 0; i < M; ++i) heap[i] = 0, heap2[i] = 0;
  CUgraphNode none = NULL;
  CHECK(cuStreamUpdateCaptureDependencies_v2(s, &none, NULL, 0, CU_STREAM_ADD_CAPTURE_DEPENDENCIES) ==
            CUDA_ERROR_ILLEGAL_STATE,
        "cuStreamUpdateCaptureDependencies on a stream that is not capturing");
  CUgraph g = NULL;
  CU(cuGraphCreate(&g, 0));
  CUgraphNode first = NULL, extra = NULL;
  CUDA_MEMSET_NODE_PARAMS m7 = memset32(d, 7, M), m9 = memset32(d2, 9, M);
  CU(cuGraphAddMemsetNode(&first, g, NULL, 0, &m7, g_ctx));
  CU(cuStreamBeginCaptureToGraph(s, g, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph cg = NULL;
  const CUgraphNode* deps = NULL;
  size_t n = 0;
  CU(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &n));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && cg == g && n == 1 && deps && deps[0] == first,
        "capture into the caller's graph after its node: status %d, graph %s, %zu dependencies", st,
        cg == g ? "the caller's" : "another", n);
  CU(cuMemcpyDtoHAsync(heap, d, M * 4, s));
  CU(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &n));
  CHECK(n == 1 && deps && deps[0] != first, "the captured copy is the stream's dependency (%zu)", n);
  if (n == 1 && deps) CU(cuGraphAddMemsetNode(&extra, g, deps, 1, &m9, g_ctx));
  CU(cuStreamUpdateCaptureDependencies_v2(s, &extra, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  CU(cuStreamUpdateCaptureDependencies_v2(s, &first, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
  CU(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &n));
  CHECK(n == 2 && deps && contains(deps, n, extra) && contains(deps, n, first),
        "dependencies set to the added node, then the first added (%zu)", n);
  CU(cuMemcpyDtoHAsync(heap2, d2, M * 4, s));
  CUgraph out = NULL;
  CU(cuStreamEndCapture(s, &out));
  CHECK(out == g, "cuStreamEndCapture returns the caller's graph");
  size_t count = 0;
  CU(cuGraphGetNodes(g, NULL, &count));
  CHECK(count == 4, "memset, copy, added memset, copy: %zu nodes", count);
  CUgraphExec e = NULL;
  CU(cuGraphInstantiate(&e, g, 0));
  if (e) {
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    CHECK(heap[0] == 7 && heap[M - 1] == 7 && heap2[0] == 9 && heap2[M - 1] == 9,
          "a graph captured into after its own node: heap[0]=%u heap2[0]=%u", heap[0], heap2[0]);
    CU(cuGraphExecDestroy(e));
  }
  CU(cuGraphDestroy(g));
  CU(cuMemFree(d));
  CU(cuMemFree(d2));
  free(heap);
  free(heap2);
}

/* ---------- JIT linking ---------- */
static void run_linked(const void* cubin, const char* what, CUstream s) {
  CUmodule mod = NULL;
  CUfunction f = NULL;
  CU(cuModuleLoadData(&mod, cubin));
  if (mod) CU(cuModuleGetFunction(&f, mod, "rgpu_fill_u32"));
  if (!f) return;
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, N * 4));
  unsigned v = 0xabcd;
  unsigned long long count = N;
  void* args[] = {&p, &v, &count};
  CU(cuLaunchKernel(f, 8, 1, 1, 128, 1, 1, 0, s, args, NULL));
  CU(cuStreamSynchronize(s));
  CHECK(all_equal(p, 0, N, 0xabcd), "kernel from the %s link wrong", what);
  CU(cuMemFree(p));
  CU(cuModuleUnload(mod));
}

static void test_link(const char* ptx_path, CUstream s) {
  size_t len = 0;
  char* ptx = (char*)read_file(ptx_path, &len);
  CHECK(ptx != NULL, "cannot read %s", ptx_path);
  if (!ptx) return;
  char info[8192], error[8192];
  info[0] = error[0] = 0;
  float wall = -1;
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE, CU_JIT_WALL_TIME};
  void* vals[] = {info, (void*)(uintptr_t)sizeof info, error, (void*)(uintptr_t)sizeof error, (void*)(uintptr_t)1, 0};
  CUlinkState st = NULL;
  CU(cuLinkCreate(6, opts, vals, &st));
  CU(cuLinkAddData(st, CU_JIT_INPUT_PTX, ptx, len + 1, "test_kernels.ptx", 0, NULL, NULL));
  void* cubin = NULL;
  size_t size = 0;
  CU(cuLinkComplete(st, &cubin, &size));
  CHECK(cubin && size > 0, "cuLinkComplete gave no image");
  memcpy(&wall, &vals[5], sizeof wall);
  CHECK(wall >= 0, "wall time not written back: %f", wall);
  size_t info_used = (size_t)(uintptr_t)vals[1];
  CHECK(strlen(info) > 0 && info_used > 0 && info_used <= sizeof info, "info log empty (%zu bytes reported)",
        info_used);
  if (cubin) run_linked(cubin, "data", s);
  CU(cuLinkDestroy(st));

  /* From a file, no options. */
  st = NULL;
  CU(cuLinkCreate(0, NULL, NULL, &st));
  CU(cuLinkAddFile(st, CU_JIT_INPUT_PTX, ptx_path, 0, NULL, NULL));
  cubin = NULL;
  CU(cuLinkComplete(st, &cubin, &size));
  if (cubin) run_linked(cubin, "file", s);
  CU(cuLinkDestroy(st));

  /* Wrong uses: a missing file, input that is no PTX (refused when added or at completion, with
   * a line in the error log). */
  st = NULL;
  error[0] = 0;
  vals[0] = info;
  vals[1] = (void*)(uintptr_t)sizeof info;
  vals[3] = (void*)(uintptr_t)sizeof error;
  CU(cuLinkCreate(4, opts, vals, &st));
  CHECK(cuLinkAddFile(st, CU_JIT_INPUT_PTX, "/nonexistent/kernels.ptx", 0, NULL, NULL) == CUDA_ERROR_FILE_NOT_FOUND,
        "a missing file was not refused with CUDA_ERROR_FILE_NOT_FOUND");
  char junk[] = "this is not PTX at all";
  CUresult added = cuLinkAddData(st, CU_JIT_INPUT_PTX, junk, sizeof junk, "junk", 0, NULL, NULL);
  CUresult done = CUDA_ERROR_UNKNOWN;
  if (added == CUDA_SUCCESS) done = cuLinkComplete(st, &cubin, &size);
  CHECK(added != CUDA_SUCCESS || done != CUDA_SUCCESS, "input that is no PTX was linked");
  CHECK(strlen(error) > 0, "no error log for input that is no PTX");
  CU(cuLinkDestroy(st));
  free(ptx);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s IMAGE [PTX]   (images built from tests/kernels/test_kernels.cu)\n", argv[0]);
    return 2;
  }
  char ptx_path[4096];
  if (argc > 2) {
    snprintf(ptx_path, sizeof ptx_path, "%s", argv[2]);
  } else {
    snprintf(ptx_path, sizeof ptx_path, "%s", argv[1]);
    char* slash = strrchr(ptx_path, '/');
    snprintf(slash ? slash + 1 : ptx_path, sizeof ptx_path - (size_t)(slash ? slash + 1 - ptx_path : 0),
             "test_kernels.ptx");
  }
  g_rgpu = getenv("RGPU_SERVER") != NULL;
  CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed: %s\n", err_name(rc));
    return 1;
  }
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&g_ctx, dev));
  CU(cuCtxSetCurrent(g_ctx));
  size_t len = 0;
  void* image = read_file(argv[1], &len);
  CHECK(image != NULL, "cannot read %s", argv[1]);
  CUmodule mod = NULL;
  if (image) CU(cuModuleLoadData(&mod, image));
  free(image);
  if (mod) CU(cuModuleGetFunction(&g_fill, mod, "rgpu_fill_u32"));
  if (!g_fill) {
    fprintf(stderr, "graph_test: no kernel, nothing tested\n");
    return 1;
  }
  CUstream s = NULL;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  test_basic_graph(s);
  test_extra_and_child(s);
  test_events(s);
  test_mem_nodes(s, dev);
  test_conditional(s);
  test_spin_on_host_node(s);
  test_host_sides(s);
  test_capture_host_copies(s);
  test_capture_to_graph(s);
  test_driver_answers(s, dev);
  test_refusals();
  test_link(ptx_path, s);

  CU(cuStreamDestroy(s));
  CU(cuModuleUnload(mod));
  CU(cuCtxSynchronize());
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "graph_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("graph_test: all %d checks passed\n", g_checks);
  return 0;
}
