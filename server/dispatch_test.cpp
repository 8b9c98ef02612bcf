// Tests of server/dispatch.cpp: one find_handler answers for every op the server accepts, and the
// handlers it adds (mapped memory, cuMemFree_v2 of managed memory) do what the session did.
#include "server/dispatch.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "gen/nvml_ops.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "server/handlers/control.h"
#include "server/mapped_memory.h"
#include "server/nvml/nvml_server.h"

#ifndef RGPU_FAKE_DRIVER
#error "RGPU_FAKE_DRIVER must name build/lib/libfakecuda.so"
#endif

namespace rgpu::server {
namespace {

TEST(Dispatch, OneLookupAnswersControlMappedCudaAndNvmlOps) {
  EXPECT_EQ(find_handler(proto::kOpSnapshot), &handlers::snapshot);
  EXPECT_EQ(find_handler(proto::kOpSessions), &handlers::sessions);
  EXPECT_EQ(find_handler(proto::kOpModuleByHash), &handlers::module_by_hash);
  EXPECT_EQ(find_handler(proto::kOpAllocMany), &handlers::alloc_many);
  EXPECT_EQ(find_handler(proto::kOpClusterTopology), &handlers::cluster_topology);
  for (uint16_t op : std::initializer_list<uint16_t>{proto::kOpMappedAlloc, proto::kOpMappedWrite, proto::kOpMappedCopy, proto::kOpMappedFree,
                      proto::kOpManagedAlloc})
    EXPECT_NE(find_handler(op), nullptr) << op;
  EXPECT_EQ(find_handler(op::cuMemAlloc_v2), find_generated_handler(op::cuMemAlloc_v2));
  EXPECT_NE(find_handler(op::cuMemFree_v2), nullptr);
  EXPECT_NE(find_handler(op::cuMemFree_v2), find_generated_handler(op::cuMemFree_v2));
  EXPECT_EQ(find_handler(nvml_op::nvmlInit_v2), nvml::find_handler(nvml_op::nvmlInit_v2));
  EXPECT_NE(find_handler(nvml_op::nvmlInit_v2), nullptr);
}

TEST(Dispatch, UnknownOpsHaveNoHandler) {
  for (uint16_t op : std::initializer_list<uint16_t>{uint16_t{0}, proto::kOpGoodbye, proto::kOpCallbackDone, uint16_t{255}, uint16_t{0xffff}})
    EXPECT_EQ(find_handler(op), nullptr) << op;
}

TEST(Dispatch, EveryAcceptedOpHasAName) {
  for (uint32_t v = 0; v <= 0xffff; ++v) {
    const uint16_t op = static_cast<uint16_t>(v);
    if (find_handler(op)) {
      EXPECT_NE(op_name(op), nullptr) << op;
    }
  }
  EXPECT_STREQ(op_name(op::cuMemFree_v2), "cuMemFree_v2");
  EXPECT_STREQ(op_name(nvml_op::nvmlInit_v2), "nvmlInit_v2");
  EXPECT_STREQ(op_name(proto::kOpMappedAlloc), "mapped alloc");
}

// Records the frames a handler sends the client.
class Frames : public ClientCallbacks {
 public:
  void run(uint64_t, int32_t) override {}
  void drop(uint64_t, int32_t) override {}
  bool send_frame(uint16_t op, const void* head, size_t head_len, const void* data, size_t n) override {
    std::vector<uint8_t> f(static_cast<const uint8_t*>(head), static_cast<const uint8_t*>(head) + head_len);
    if (n) f.insert(f.end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    sent.push_back({op, f});
    return connected;
  }
  struct Frame {
    uint16_t op;
    std::vector<uint8_t> payload;
  };
  std::vector<Frame> sent;
  bool connected = true;
};

class DispatchWithDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    void* lib = dlopen(RGPU_FAKE_DRIVER, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    load_driver_table(lib, &drv_);
    ASSERT_EQ(drv_.cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(drv_.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  }
  // Runs `op` as the session does; returns the reply's CUresult, or -1 when there is none.
  int32_t run(uint16_t op, const std::vector<uint8_t>& args, std::vector<uint8_t>* reply = nullptr) {
    std::vector<uint8_t> body;
    Reader in(args.data(), args.size());
    Writer out(&body);
    Dispatch d{drv_, handles_, in, out, op, &frames_, nullptr, &mapped_};
    find_handler(op)(d);
    if (reply) *reply = body;
    if (!in.ok() || body.size() < 4) return -1;
    int32_t rc;
    std::memcpy(&rc, body.data(), 4);
    return rc;
  }
  uint64_t managed_alloc(uint64_t size) {
    std::vector<uint8_t> args, reply;
    Writer w(&args);
    w.put_u64(size), w.put_u32(CU_MEM_ATTACH_GLOBAL);
    EXPECT_EQ(run(proto::kOpManagedAlloc, args, &reply), CUDA_SUCCESS);
    Reader r(reply.data(), reply.size());
    r.i32();
    return r.u64();
  }
  static std::vector<uint8_t> u64(uint64_t v) {
    std::vector<uint8_t> a(8);
    std::memcpy(a.data(), &v, 8);
    return a;
  }

  static DriverTable drv_;
  HandleMap handles_;
  MappedMemory mapped_;
  Frames frames_;
};
DriverTable DispatchWithDriver::drv_;

TEST_F(DispatchWithDriver, FreeingManagedMemoryTellsTheClientToDropItsCopyFirst) {
  const uint64_t addr = managed_alloc(8192);
  ASSERT_FALSE(mapped_.empty());
  EXPECT_EQ(run(op::cuMemFree_v2, u64(addr)), CUDA_SUCCESS);
  ASSERT_EQ(frames_.sent.size(), 1u);
  EXPECT_EQ(frames_.sent[0].op, proto::kOpMappedUpdate);
  Reader r(frames_.sent[0].payload.data(), frames_.sent[0].payload.size());
  EXPECT_EQ(r.u64(), addr);
  EXPECT_EQ(r.u64(), ~uint64_t{0});
  EXPECT_TRUE(mapped_.empty());
  // The driver freed it: a second free is the driver's error, and tells the client nothing.
  EXPECT_EQ(run(op::cuMemFree_v2, u64(addr)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(frames_.sent.size(), 1u);
}

TEST_F(DispatchWithDriver, FreeingDeviceMemorySendsNothingEvenWithManagedMemoryAround) {
  managed_alloc(4096);
  CUdeviceptr dev = 0;
  ASSERT_EQ(drv_.cuMemAlloc_v2(&dev, 256), CUDA_SUCCESS);
  EXPECT_EQ(run(op::cuMemFree_v2, u64(dev)), CUDA_SUCCESS);
  EXPECT_TRUE(frames_.sent.empty());
  EXPECT_FALSE(mapped_.empty());
  EXPECT_EQ(run(op::cuMemFree_v2, {1, 2, 3}), -1);  // truncated: no answer, the session drops it
}

TEST_F(DispatchWithDriver, WhenTheClientCannotBeToldTheFreeIsNotAnswered) {
  const uint64_t addr = managed_alloc(4096);
  frames_.connected = false;
  EXPECT_EQ(run(op::cuMemFree_v2, u64(addr)), -1);
}

TEST_F(DispatchWithDriver, MappedOpsReachTheSessionsMappedMemory) {
  const uint64_t addr = managed_alloc(4096);
  std::vector<uint8_t> args = u64(addr);
  std::vector<uint8_t> offset = u64(16);
  args.insert(args.end(), offset.begin(), offset.end());
  args.push_back(0x5a);
  EXPECT_EQ(run(proto::kOpMappedWrite, args), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(addr)[16], 0x5a);
  EXPECT_EQ(run(proto::kOpMappedFree, u64(addr)), CUDA_SUCCESS);
  EXPECT_TRUE(mapped_.empty());
  EXPECT_EQ(run(proto::kOpMappedFree, u64(addr)), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DispatchWithDriver, MappedOpsWithoutASessionAnswerNotSupported) {
  std::vector<uint8_t> args(20, 0), body;
  Reader in(args.data(), args.size());
  Writer out(&body);
  Dispatch d{drv_, handles_, in, out, proto::kOpMappedAlloc};
  find_handler(proto::kOpMappedAlloc)(d);
  ASSERT_GE(body.size(), 4u);
  int32_t rc;
  std::memcpy(&rc, body.data(), 4);
  EXPECT_EQ(rc, CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
}  // namespace rgpu::server
