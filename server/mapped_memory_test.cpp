// Tests of server/mapped_memory.h against the fake driver: which ranges a client may name, what
// a free ends, and which pages go back to the client after GPU work (the marks and their ends).
#include "server/mapped_memory.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gen/ops.gen.h"
#include "protocol/messages.h"

#ifndef RGPU_FAKE_DRIVER
#error "RGPU_FAKE_DRIVER must name build/lib/libfakecuda.so"
#endif

namespace rgpu::server {
namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kStreamId = proto::kFirstClientHandle;

// One update frame's payload: u64 client base, u64 offset, then the bytes (or u64 ~0: dropped).
struct Update {
  uint64_t base, offset;
  std::vector<uint8_t> bytes;
};

class MappedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    void* lib = dlopen(RGPU_FAKE_DRIVER, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    load_driver_table(lib, &drv_);
    ASSERT_EQ(drv_.cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(drv_.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
  }
  void SetUp() override { ASSERT_TRUE(handles_.bind(kStreamId, stream_)); }

  // A page-aligned address nothing in this process uses (reserved, then given back).
  static uint64_t free_address(size_t len) {
    void* p = mmap(nullptr, len + kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    munmap(p, len + kPage);
    return reinterpret_cast<uint64_t>(p);
  }

  // Runs one request; returns the CUresult (or -1 when the request did not decode) and the rest.
  template <class F>
  int32_t call(F f, std::vector<uint8_t> request, Reader* rest = nullptr) {
    request_ = std::move(request);
    reply_.clear();
    Reader in(request_.data(), request_.size());
    Writer out(&reply_);
    f(in, out);
    if (!in.ok()) return -1;
    EXPECT_GE(reply_.size(), 4u);
    Reader r(reply_.data(), reply_.size());
    int32_t rc = r.i32();
    if (rest) *rest = r;
    return rc;
  }
  static std::vector<uint8_t> args(std::initializer_list<uint64_t> u64s, std::vector<uint8_t> tail = {}) {
    std::vector<uint8_t> v;
    Writer w(&v);
    for (uint64_t x : u64s) w.put_u64(x);
    w.append(tail.data(), tail.size());
    return v;
  }

  // kOpMappedAlloc at `base`; returns the server's address (== base when it was free here).
  uint8_t* alloc(uint64_t base, uint64_t size, uint64_t* dptr = nullptr) {
    std::vector<uint8_t> req;
    Writer w(&req);
    w.put_u64(base), w.put_u64(size), w.put_u32(0);
    Reader rest;
    int32_t rc = call([&](Reader& in, Writer& out) { m_.alloc(drv_, in, out); }, req, &rest);
    EXPECT_EQ(rc, CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) return nullptr;
    uint64_t d = rest.u64(), here = rest.u64();
    if (dptr) *dptr = d;
    return reinterpret_cast<uint8_t*>(here);
  }
  int32_t alloc_rc(uint64_t base, uint64_t size) {
    std::vector<uint8_t> req;
    Writer w(&req);
    w.put_u64(base), w.put_u64(size), w.put_u32(0);
    return call([&](Reader& in, Writer& out) { m_.alloc(drv_, in, out); }, req);
  }
  int32_t free_rc(uint64_t base) {
    return call([&](Reader& in, Writer& out) { m_.free(drv_, in, out); }, args({base}));
  }
  int32_t write_rc(uint64_t base, uint64_t offset, std::vector<uint8_t> bytes) {
    return call([&](Reader& in, Writer& out) { m_.write(in, out); }, args({base, offset}, bytes));
  }
  int32_t copy_rc(uint16_t op, uint64_t dev, uint64_t stream, uint64_t host, uint64_t n) {
    std::vector<uint8_t> req;
    Writer w(&req);
    w.put_u16(op), w.put_u64(dev), w.put_u64(stream), w.put_u64(host), w.put_u64(n);
    return call([&](Reader& in, Writer& out) { m_.copy(drv_, handles_, in, out); }, req);
  }
  std::vector<Update> updates(const uint64_t* finished_up_to = nullptr) {
    std::vector<Update> got;
    EXPECT_TRUE(m_.send_updates(
        [&](const std::vector<uint8_t>& p) {
          Reader r(p.data(), p.size());
          Update u{r.u64(), r.u64(), {}};
          u.bytes.assign(p.begin() + 16, p.end());
          got.push_back(std::move(u));
          return true;
        },
        finished_up_to));
    return got;
  }
  void note_launch() {
    m_.note_gpu_work(op::cuLaunchKernel, nullptr, 0);
  }

  static DriverTable drv_;
  static CUstream stream_;
  HandleMap handles_;
  MappedMemory m_;
  std::vector<uint8_t> request_, reply_;
};
DriverTable MappedMemoryTest::drv_;
CUstream MappedMemoryTest::stream_ = nullptr;

TEST_F(MappedMemoryTest, AllocMapsTheServerCopyAtTheClientsAddressAndGivesItsDevicePointer) {
  const uint64_t base = free_address(3 * kPage);
  uint64_t dptr = 0;
  uint8_t* here = alloc(base, 3 * kPage - 100, &dptr);
  ASSERT_NE(here, nullptr);
  EXPECT_EQ(reinterpret_cast<uint64_t>(here), base);
  EXPECT_EQ(dptr, base);  // the fake's device pointer of registered memory is its address
  EXPECT_FALSE(m_.empty());
  for (size_t i = 0; i < 3 * kPage - 100; ++i) ASSERT_EQ(here[i], 0) << i;  // starts zeroed
  EXPECT_EQ(free_rc(base), CUDA_SUCCESS);
  EXPECT_TRUE(m_.empty());
}

TEST_F(MappedMemoryTest, AllocRefusesEmptyHugeUnalignedAndMalformedRequests) {
  const uint64_t base = free_address(kPage);
  EXPECT_EQ(alloc_rc(base, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(alloc_rc(base, (uint64_t{16} << 30) + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(alloc_rc(base + 8, kPage), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call([&](Reader& in, Writer& out) { m_.alloc(drv_, in, out); }, args({base, kPage})), -1);
  EXPECT_TRUE(reply_.empty());  // a request that does not decode gets no answer at all
  EXPECT_TRUE(m_.empty());
}

TEST_F(MappedMemoryTest, AllocRefusesARangeThatOverlapsABufferAlreadyMapped) {
  const uint64_t base = free_address(8 * kPage);
  ASSERT_NE(alloc(base + 2 * kPage, 2 * kPage), nullptr);
  EXPECT_EQ(alloc_rc(base + 2 * kPage, kPage), CUDA_ERROR_INVALID_VALUE);  // the same start
  EXPECT_EQ(alloc_rc(base + 3 * kPage, kPage), CUDA_ERROR_INVALID_VALUE);  // starts inside it
  EXPECT_EQ(alloc_rc(base, 3 * kPage), CUDA_ERROR_INVALID_VALUE);          // runs into it
  EXPECT_EQ(alloc_rc(base, 8 * kPage), CUDA_ERROR_INVALID_VALUE);          // covers it
  // Next to it on either side is fine.
  EXPECT_NE(alloc(base, 2 * kPage), nullptr);
  EXPECT_NE(alloc(base + 4 * kPage, kPage), nullptr);
}

TEST_F(MappedMemoryTest, WritesLandInTheServerCopyWithinTheBufferOnly) {
  const uint64_t base = free_address(2 * kPage);
  const uint64_t size = 2 * kPage - 10;
  uint8_t* here = alloc(base, size);
  ASSERT_NE(here, nullptr);
  EXPECT_EQ(write_rc(base, 100, {1, 2, 3}), CUDA_SUCCESS);
  EXPECT_EQ(here[100], 1);
  EXPECT_EQ(here[102], 3);
  EXPECT_EQ(write_rc(base, size - 2, {9, 9}), CUDA_SUCCESS);  // the last two bytes
  EXPECT_EQ(write_rc(base, size - 1, {9, 9}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(write_rc(base, size + 1, {}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(write_rc(base, ~uint64_t{0}, {9}), CUDA_ERROR_INVALID_VALUE);  // offset + n wraps
  EXPECT_EQ(write_rc(base + kPage, 0, {9}), CUDA_ERROR_INVALID_VALUE);     // not a buffer's start
  EXPECT_EQ(write_rc(base + 16 * kPage, 0, {9}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call([&](Reader& in, Writer& out) { m_.write(in, out); }, args({base})), -1);
  // What the client wrote is what it has: no update sends it back.
  note_launch();
  EXPECT_TRUE(updates().empty());
}

TEST_F(MappedMemoryTest, AfterGpuWorkOnlyThePagesThatChangedGoBack) {
  const uint64_t base = free_address(4 * kPage);
  uint8_t* here = alloc(base, 4 * kPage);
  ASSERT_NE(here, nullptr);
  here[2 * kPage + 5] = 42;  // what a kernel wrote
  EXPECT_TRUE(updates().empty()) << "no GPU work was noted: nothing is compared";
  note_launch();
  std::vector<Update> u = updates();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].base, base);
  EXPECT_EQ(u[0].offset, 2 * kPage);
  ASSERT_EQ(u[0].bytes.size(), kPage);
  EXPECT_EQ(u[0].bytes[5], 42);
  // Sent once: the shadow now holds it.
  EXPECT_TRUE(updates().empty());
}

TEST_F(MappedMemoryTest, ACopyOrMemsetMarksOnlyTheBufferItWritesInto) {
  const uint64_t a = free_address(kPage);
  uint8_t* ha = alloc(a, kPage);
  const uint64_t b = free_address(kPage);
  uint8_t* hb = alloc(b, kPage);
  ASSERT_TRUE(ha && hb);
  ha[0] = 1;
  hb[0] = 2;
  const uint64_t dst = b + 16;  // the fake's device pointer is the address
  m_.note_gpu_work(op::cuMemsetD8_v2, reinterpret_cast<const uint8_t*>(&dst), sizeof dst);
  std::vector<Update> u = updates();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].base, b);
  // A destination in no buffer marks none; a copy into host memory marks none.
  const uint64_t elsewhere = 0x10;
  ha[1] = 3;
  m_.note_gpu_work(op::cuMemsetD8_v2, reinterpret_cast<const uint8_t*>(&elsewhere), sizeof elsewhere);
  m_.note_gpu_work(op::cuMemcpyDtoH_v2, reinterpret_cast<const uint8_t*>(&a), sizeof a);
  m_.note_gpu_work(op::cuMemsetD8_v2, reinterpret_cast<const uint8_t*>(&a), 4);  // too short to name one
  EXPECT_TRUE(updates().empty());
}

TEST_F(MappedMemoryTest, MarksLastUntilASynchronizeHasSeenTheirWorkFinish) {
  const uint64_t base = free_address(kPage);
  uint8_t* here = alloc(base, kPage);
  ASSERT_NE(here, nullptr);
  note_launch();
  const uint64_t before_sync = m_.generation();
  note_launch();  // a launch on another thread after the synchronize began
  EXPECT_TRUE(updates(&before_sync).empty());
  here[7] = 7;  // the later launch's write lands afterwards: its mark must still be there
  ASSERT_EQ(updates().size(), 1u);
  const uint64_t all = m_.generation();
  EXPECT_TRUE(updates(&all).empty());
  here[8] = 8;  // no GPU work since everything finished: not compared
  EXPECT_TRUE(updates().empty());
}

TEST_F(MappedMemoryTest, MappedCopiesMoveBytesBetweenDeviceAndTheServerCopyWithinBounds) {
  const uint64_t base = free_address(kPage);
  uint8_t* here = alloc(base, kPage);
  ASSERT_NE(here, nullptr);
  CUdeviceptr dev = 0;
  ASSERT_EQ(drv_.cuMemAlloc_v2(&dev, kPage), CUDA_SUCCESS);
  for (size_t i = 0; i < 64; ++i) here[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(copy_rc(op::cuMemcpyHtoD_v2, dev, 0, base, 64), CUDA_SUCCESS);
  ASSERT_EQ(drv_.cuMemsetD8_v2(dev, 0xab, 16), CUDA_SUCCESS);
  EXPECT_EQ(copy_rc(op::cuMemcpyDtoHAsync_v2, dev, kStreamId, base + 32, 16), CUDA_SUCCESS);
  ASSERT_EQ(drv_.cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(here[32], 0xab);
  // The copy marked what it wrote: that page goes back.
  std::vector<Update> u = updates();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].bytes[32], 0xab);
  EXPECT_EQ(u[0].bytes[31], 31);

  EXPECT_EQ(copy_rc(op::cuMemcpyHtoD_v2, dev, 0, base + kPage - 8, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_rc(op::cuMemcpyHtoD_v2, dev, 0, base - 8, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_rc(op::cuMemcpyHtoD_v2, dev, 0, base + 8, ~uint64_t{0}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_rc(op::cuMemcpyDtoHAsync_v2, dev, kStreamId + 1, base, 16), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(copy_rc(op::cuMemsetD8_v2, dev, 0, base, 16), CUDA_ERROR_INVALID_VALUE);  // not a copy
  EXPECT_EQ(copy_rc(0xffff, dev, 0, base, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv_.cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(MappedMemoryTest, AFreedBufferIsGoneAndItsAddressFreeAgain) {
  const uint64_t base = free_address(kPage);
  ASSERT_NE(alloc(base, kPage), nullptr);
  EXPECT_EQ(free_rc(base + 8), CUDA_ERROR_INVALID_VALUE);  // not a buffer's start
  EXPECT_EQ(free_rc(base), CUDA_SUCCESS);
  EXPECT_EQ(free_rc(base), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(write_rc(base, 0, {1}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_rc(op::cuMemcpyHtoD_v2, 0, 0, base, 1), CUDA_ERROR_INVALID_VALUE);
  // Unmapped and unregistered: the same address maps again, at the same place.
  uint8_t* again = alloc(base, kPage);
  EXPECT_EQ(reinterpret_cast<uint64_t>(again), base);
}

TEST_F(MappedMemoryTest, ManagedMemoryEndsWithTheProgramsFreeOfItsAddress) {
  std::vector<uint8_t> req;
  Writer w(&req);
  w.put_u64(10000), w.put_u32(CU_MEM_ATTACH_GLOBAL);
  Reader rest;
  ASSERT_EQ(call([&](Reader& in, Writer& out) { m_.managed_alloc(drv_, in, out); }, req, &rest), CUDA_SUCCESS);
  const uint64_t addr = rest.u64();
  EXPECT_EQ(addr % kPage, 0u);
  EXPECT_EQ(write_rc(addr, 9990, std::vector<uint8_t>(10, 5)), CUDA_SUCCESS);  // 10000 bytes are mirrored
  EXPECT_EQ(write_rc(addr, 9991, std::vector<uint8_t>(10, 5)), CUDA_ERROR_INVALID_VALUE);

  std::vector<std::vector<uint8_t>> sent;
  auto send = [&](const std::vector<uint8_t>& p) {
    sent.push_back(p);
    return true;
  };
  EXPECT_TRUE(m_.forget_managed(addr + 8, send));  // not its address: nothing ends
  EXPECT_TRUE(sent.empty());
  EXPECT_TRUE(m_.forget_managed(addr, send));
  ASSERT_EQ(sent.size(), 1u);
  Reader r(sent[0].data(), sent[0].size());
  EXPECT_EQ(r.u64(), addr);
  EXPECT_EQ(r.u64(), ~uint64_t{0});  // "drop your copy"
  EXPECT_EQ(r.left(), 0u);
  EXPECT_TRUE(m_.empty());
  EXPECT_EQ(write_rc(addr, 0, {1}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv_.cuMemFree_v2(addr), CUDA_SUCCESS);  // the free forget_managed runs before
}

TEST_F(MappedMemoryTest, ForgetManagedLeavesMappedHostMemoryAlone) {
  const uint64_t base = free_address(kPage);
  ASSERT_NE(alloc(base, kPage), nullptr);
  bool sent = false;
  EXPECT_TRUE(m_.forget_managed(base, [&](const std::vector<uint8_t>&) { return sent = true; }));
  EXPECT_FALSE(sent);
  EXPECT_EQ(write_rc(base, 0, {1}), CUDA_SUCCESS);
}

TEST_F(MappedMemoryTest, AFailedSendIsReported) {
  const uint64_t base = free_address(kPage);
  uint8_t* here = alloc(base, kPage);
  ASSERT_NE(here, nullptr);
  here[0] = 1;
  note_launch();
  EXPECT_FALSE(m_.send_updates([](const std::vector<uint8_t>&) { return false; }));
}

}  // namespace
}  // namespace rgpu::server
