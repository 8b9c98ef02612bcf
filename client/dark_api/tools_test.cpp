// TOOLS_CONTEXT slots 51/39 and TOOLS_MODULE slot 7 (tools_context.cpp, tools_module.cpp) through
// an in-process rgpu-server session on the fake driver, whose tables (fakecuda/export_table.cpp)
// mimic what driver 580 was probed to do: the answers come from the server's driver, are asked
// once per context or module, and the function handles slot 7 hands out launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/dark_api/dark_api.h"
#include "client/dark_api/test_util.h"
#include "test_kernel_paths.h"

namespace rgpu::client::dark {
namespace {

using ContextObject = CUresult (*)(CUcontext, void*, void**);
using ContextQuery = CUresult (*)(CUcontext, void*, void*);
using Visitor = int (*)(void*, CUfunction, const char*);
using ModuleWalk = uint64_t (*)(CUcontext, CUmodule, Visitor, void*);

ContextObject object_slot() { return testing::slot<ContextObject>(TableId::kToolsContext, 51); }
ContextQuery query_slot() { return testing::slot<ContextQuery>(TableId::kToolsContext, 39); }
ModuleWalk walk_slot() { return testing::slot<ModuleWalk>(TableId::kToolsModule, 7); }
using CurrentContext = CUresult (*)(void*, void*, void*, void*, void*);
CurrentContext tls_current_context_slot() { return testing::slot<CurrentContext>(TableId::kToolsTls, 2); }

class ToolsTables : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::connect_to_fake_server());
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  CUcontext ctx_ = nullptr;
};

TEST_F(ToolsTables, ContextObjectIsAskedOnceAndQueriedWithoutTheServer) {
  const uint64_t asked_before = tools_context_server_queries();
  void* object = nullptr;
  ASSERT_EQ(object_slot()(ctx_, nullptr, &object), CUDA_SUCCESS);
  ASSERT_NE(object, nullptr);
  const uint64_t asked = tools_context_server_queries();
  EXPECT_LE(asked, asked_before + 1);  // none when an earlier test already asked for this context
  // The 8 bytes the driver writes, and not one more.
  unsigned char out[16];
  std::memset(out, 0xaa, sizeof out);
  ASSERT_EQ(query_slot()(ctx_, object, out), CUDA_SUCCESS);
  uint64_t value;
  std::memcpy(&value, out, sizeof value);
  EXPECT_NE(value, 0u);
  EXPECT_EQ(value % 7, 0u);  // the fake's answers, like driver 580's, are multiples of 7
  for (size_t i = 8; i < sizeof out; ++i) EXPECT_EQ(out[i], 0xaa) << "byte " << i;
  // As cuBLAS and cuSOLVER ask: before every launch. Same object, same answer, no round trip.
  for (int i = 0; i < 100; ++i) {
    void* again = nullptr;
    ASSERT_EQ(object_slot()(ctx_, nullptr, &again), CUDA_SUCCESS);
    ASSERT_EQ(again, object);
    uint64_t v = 0;
    ASSERT_EQ(query_slot()(ctx_, again, &v), CUDA_SUCCESS);
    ASSERT_EQ(v, value);
  }
  EXPECT_EQ(tools_context_server_queries(), asked);
}

TEST_F(ToolsTables, ContextObjectRefusesWhatItDoesNotKnowByName) {
  void* object = nullptr;
  EXPECT_EQ(object_slot()(ctx_, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  // NULL is not "the current context" for slot 51 (driver 580: CUDA_ERROR_INVALID_HANDLE).
  EXPECT_EQ(object_slot()(nullptr, nullptr, &object), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(object, nullptr);
  uint64_t not_an_object[8] = {};
  uint64_t value = 5;
  EXPECT_EQ(query_slot()(ctx_, not_an_object, &value), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(value, 5u);
}

// The second argument is a stream (cuBLAS passes its handle's stream; through the shim a client
// stream id such as 0x1017, which was once answered as the NULL stream's and made cublasSgemm
// compute wrong results on the H200): each stream its own object and value, asked once each;
// CU_STREAM_LEGACY is the NULL stream.
TEST_F(ToolsTables, EachStreamHasItsOwnObject) {
  void* plain = nullptr;
  ASSERT_EQ(object_slot()(ctx_, nullptr, &plain), CUDA_SUCCESS);
  void* legacy = nullptr;
  ASSERT_EQ(object_slot()(ctx_, CU_STREAM_LEGACY, &legacy), CUDA_SUCCESS);
  EXPECT_EQ(legacy, plain);
  CUstream s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
  const uint64_t asked = tools_context_server_queries();
  void *o1 = nullptr, *o2 = nullptr;
  ASSERT_EQ(object_slot()(ctx_, s1, &o1), CUDA_SUCCESS);
  ASSERT_EQ(object_slot()(ctx_, s2, &o2), CUDA_SUCCESS);
  EXPECT_NE(o1, plain);
  EXPECT_NE(o2, plain);
  EXPECT_NE(o1, o2);
  uint64_t v0 = 0, v1 = 0, v2 = 0;
  ASSERT_EQ(query_slot()(ctx_, plain, &v0), CUDA_SUCCESS);
  ASSERT_EQ(query_slot()(ctx_, o1, &v1), CUDA_SUCCESS);
  ASSERT_EQ(query_slot()(ctx_, o2, &v2), CUDA_SUCCESS);
  EXPECT_NE(v1, v0);
  EXPECT_NE(v2, v1);
  for (int i = 0; i < 10; ++i) {
    void* again = nullptr;
    ASSERT_EQ(object_slot()(ctx_, s1, &again), CUDA_SUCCESS);
    ASSERT_EQ(again, o1);
  }
  EXPECT_EQ(tools_context_server_queries(), asked + 2);
  ASSERT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
}

TEST_F(ToolsTables, EachContextHasItsOwnObjectUntilItIsDestroyed) {
  void* primary = nullptr;
  ASSERT_EQ(object_slot()(ctx_, nullptr, &primary), CUDA_SUCCESS);
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&created, 0, 0), CUDA_SUCCESS);
  void* object = nullptr;
  ASSERT_EQ(object_slot()(created, nullptr, &object), CUDA_SUCCESS);
  EXPECT_NE(object, primary);
  uint64_t primary_value = 0, value = 0;
  EXPECT_EQ(query_slot()(ctx_, primary, &primary_value), CUDA_SUCCESS);
  EXPECT_EQ(query_slot()(created, object, &value), CUDA_SUCCESS);
  EXPECT_NE(value, primary_value);  // driver 580: 7 × each context's id
  // Slot 39 answers by the object: the context argument changes nothing (driver 580).
  uint64_t by_object = 0;
  EXPECT_EQ(query_slot()(ctx_, object, &by_object), CUDA_SUCCESS);
  EXPECT_EQ(by_object, value);
  EXPECT_EQ(query_slot()(nullptr, object, &by_object), CUDA_SUCCESS);
  EXPECT_EQ(by_object, value);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  value = 5;
  EXPECT_EQ(query_slot()(created, object, &value), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(value, 5u);
}

std::vector<uint8_t> read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

using Visited = std::vector<std::pair<CUfunction, std::string>>;
int record(void* user, CUfunction f, const char* name) {
  static_cast<Visited*>(user)->emplace_back(f, name);
  return 1;  // ignored, as by the driver
}

// TOOLS_TLS slot 2 writes the current context into the first word of its first argument and
// nothing else; cuBLAS passes that word to TOOLS_CONTEXT 51 (while the shim wrote nothing, it
// passed stale stack bytes and cublasSgemm failed on the H200).
TEST_F(ToolsTables, TlsSlotTwoWritesTheCurrentContext) {
  uint64_t record[4] = {0xaaaaaaaaaaaaaaaaull, 0xbbbbbbbbbbbbbbbbull, 0x14, 0};
  ASSERT_EQ(tls_current_context_slot()(record, nullptr, nullptr, reinterpret_cast<void*>(0x42), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(record[0], reinterpret_cast<uint64_t>(ctx_));
  EXPECT_EQ(record[1], 0xbbbbbbbbbbbbbbbbull);
  EXPECT_EQ(record[2], 0x14u);
  // What cuBLAS does next with it: slot 51 for its stream, in that context.
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  void* object = nullptr;
  EXPECT_EQ(object_slot()(reinterpret_cast<CUcontext>(record[0]), s, &object), CUDA_SUCCESS);
  EXPECT_NE(object, nullptr);
  ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(ToolsTables, ModuleWalkVisitsEveryFunctionWithHandlesThatLaunch) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time, so there are no images";
  std::vector<uint8_t> image = read_file(RGPU_TEST_KERNEL_FATBIN);
  ASSERT_FALSE(image.empty());
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  const uint64_t asked_before = tools_module_server_queries();
  Visited visited;
  ASSERT_EQ(walk_slot()(ctx_, module, &record, &visited), 9u);
  // In the driver's order (the fake's: its symbol table's); every kernel once.
  std::vector<std::string> names;
  CUfunction fill = nullptr;
  for (auto& [f, name] : visited) {
    if (name.find("rgpu_local_scale") == std::string::npos) names.push_back(name);  // a mangled local name
    if (name == "rgpu_fill_u32") fill = f;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"rgpu_affine", "rgpu_big_params", "rgpu_count", "rgpu_empty",
                                              "rgpu_fill_u32", "rgpu_printf", "rgpu_spin", "rgpu_vec_add"}));
  // The handles are the shim's: rgpu_fill_u32 launches through one and fills device memory.
  ASSERT_NE(fill, nullptr);
  CUdeviceptr buf = 0;
  ASSERT_EQ(cuMemAlloc_v2(&buf, 64 * sizeof(unsigned)), CUDA_SUCCESS);
  unsigned value = 0x5eed;
  unsigned long long n = 64;
  void* args[] = {&buf, &value, &n};
  ASSERT_EQ(cuLaunchKernel(fill, 1, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  std::vector<unsigned> host(64);
  ASSERT_EQ(cuMemcpyDtoH_v2(host.data(), buf, 64 * sizeof(unsigned)), CUDA_SUCCESS);
  for (unsigned v : host) ASSERT_EQ(v, 0x5eedu);
  EXPECT_EQ(cuMemFree_v2(buf), CUDA_SUCCESS);
  // Asked once: a second walk visits the same handles from the client's cache.
  Visited again;
  ASSERT_EQ(walk_slot()(nullptr, module, &record, &again), 9u);
  EXPECT_EQ(again, visited);
  EXPECT_EQ(tools_module_server_queries(), asked_before + 1);
  EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
}

TEST_F(ToolsTables, ModuleWalkOfSomethingElseVisitsNothing) {
  Visited visited;
  EXPECT_EQ(walk_slot()(ctx_, reinterpret_cast<CUmodule>(0x7777), &record, &visited), 0u);
  EXPECT_EQ(walk_slot()(ctx_, nullptr, &record, &visited), 0u);
  EXPECT_TRUE(visited.empty());
}

// The driver makes a new object, with a new value, for the primary context after a reset
// (probed: 7 before, 28 after, same context handle), so the cached answer must go with the reset.
TEST_F(ToolsTables, PrimaryContextResetForgetsTheCachedObject) {
  void* before = nullptr;
  ASSERT_EQ(object_slot()(ctx_, nullptr, &before), CUDA_SUCCESS);
  const uint64_t asked = tools_context_server_queries();
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  uint64_t value = 5;
  EXPECT_EQ(query_slot()(ctx_, before, &value), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(value, 5u);
  CUcontext again = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(again), CUDA_SUCCESS);
  void* after = nullptr;
  ASSERT_EQ(object_slot()(again, nullptr, &after), CUDA_SUCCESS);
  EXPECT_EQ(tools_context_server_queries(), asked + 1);
  EXPECT_NE(after, before);
  EXPECT_EQ(query_slot()(again, after, &value), CUDA_SUCCESS);
}

using ClusterTopology = CUresult (*)(void**, uint64_t*);
using ClusterTopologyFree = CUresult (*)(void*, uint64_t);
ClusterTopology topology_slot() { return testing::slot<ClusterTopology>(TableId::kCublasLt1734, 4); }
ClusterTopologyFree topology_free_slot() { return testing::slot<ClusterTopologyFree>(TableId::kCublasLt1734, 13); }

// CUBLASLT_1734DC26 4 and 13 (cluster_topology.cpp): cuBLASLt's first clustered matmul (every
// bf16 one) asked slot 4, a stub that answered CUDA_ERROR_NOT_SUPPORTED. The server's driver
// answers: the fake's GPC of each of an H200's 66 TPCs (fakecuda/export_table.cpp).
TEST_F(ToolsTables, ClusterTopologyIsTheServersDriversGpcOfEachTpcAskedOncePerDevice) {
  const uint64_t asked_before = cluster_topology_server_queries();
  std::vector<void*> copies;
  for (int i = 0; i < 3; ++i) {
    void* data = nullptr;
    uint64_t token = 0;
    ASSERT_EQ(topology_slot()(&data, &token), CUDA_SUCCESS);
    ASSERT_NE(data, nullptr);
    ASSERT_EQ(token, 66u);  // the shim's token: the byte count, one per TPC (132 SMs / 2)
    std::map<int, int> tpcs_per_gpc;
    for (size_t t = 0; t < token; ++t) ++tpcs_per_gpc[static_cast<const uint8_t*>(data)[t]];
    EXPECT_EQ(tpcs_per_gpc, (std::map<int, int>{{0, 9}, {1, 9}, {2, 8}, {3, 8}, {4, 8}, {5, 8}, {6, 8}, {7, 8}}));
    copies.push_back(data);
  }
  EXPECT_LE(cluster_topology_server_queries(), asked_before + 1);  // none when an earlier test asked
  for (void* data : copies) EXPECT_EQ(topology_free_slot()(data, 66), CUDA_SUCCESS);
  // What slot 4 did not hand out, or has taken back, is refused.
  EXPECT_EQ(topology_free_slot()(copies[0], 66), CUDA_ERROR_INVALID_VALUE);
  int not_handed_out = 0;
  EXPECT_EQ(topology_free_slot()(&not_handed_out, 4), CUDA_ERROR_INVALID_VALUE);
  uint64_t token = 0;
  void* data = nullptr;
  EXPECT_EQ(topology_slot()(nullptr, &token), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(topology_slot()(&data, nullptr), CUDA_ERROR_INVALID_VALUE);
  std::thread([] {  // no current context
    void* d = nullptr;
    uint64_t t = 0;
    EXPECT_EQ(topology_slot()(&d, &t), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(d, nullptr);
  }).join();
}

}  // namespace
}  // namespace rgpu::client::dark
