// Batching and deferred errors, driven in-process: the client code of the shim talks to a real
// rgpu-server session (forked, as in production) on the fake driver.
#include <cuda.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>
#include <thread>

#include "client/runtime.h"
#include "common/env.h"
#include "common/net.h"
#include "protocol/handshake.h"
#include "server/session.h"
#include "test_kernel_paths.h"

namespace rgpu::client {
namespace {

pid_t g_server = -1;

// Starts a one-session server in a child process and points RGPU_SERVER at it.
void start_server() {
  net::Address addr{"127.0.0.1", 0};
  std::string err;
  int lfd = net::listen_tcp(addr, &err);
  ASSERT_GE(lfd, 0) << err;
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
  g_server = fork();
  if (g_server == 0) {
    int fd = accept(lfd, nullptr, nullptr);
    void* lib = dlopen(RGPU_FAKE_DRIVER, RTLD_NOW | RTLD_LOCAL);
    static server::DriverTable table;
    server::load_driver_table(lib, &table);
    proto::ServerHandshakeResult hs;
    if (!proto::server_handshake(fd, "", &hs, &err, proto::kOurCapabilities | proto::kCapChannel)) _exit(1);
    server::SessionOptions options{&table, "test", hs.identity};
    options.channel = (hs.capabilities & proto::kCapChannel) != 0;
    options.session = hs.session;
    _exit(server::run_session(fd, options));
  }
  close(lfd);
  setenv("RGPU_SERVER", ("127.0.0.1:" + std::to_string(ntohs(sa.sin_port))).c_str(), 1);
  setenv("RGPU_ANSWER_CACHE", "none", 1);  // round trips counted here must not depend on earlier runs
  env::reload();
}

class Batching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    start_server();
    ASSERT_EQ(init(0), CUDA_SUCCESS);
    CUdevice dev;
    ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CUcontext ctx;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  }
  static void TearDownTestSuite() {
    if (g_server > 0) kill(g_server, SIGTERM);
  }
  void TearDown() override {
    setenv("RGPU_BATCH", "1", 1);
    env::reload();
  }
};

TEST_F(Batching, CallsThatReturnNothingNeverWait) {
  CUdeviceptr d;
  ASSERT_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
  uint64_t trips = connection()->round_trips();
  uint64_t oneway = connection()->oneway_calls();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(cuMemsetD8_v2(d, static_cast<unsigned char>(i), 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(connection()->round_trips(), trips);
  EXPECT_EQ(connection()->oneway_calls(), oneway + 1000);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(connection()->round_trips(), trips + 1);
  unsigned char last = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&last, d + 12345, 1), CUDA_SUCCESS);
  EXPECT_EQ(last, static_cast<unsigned char>(999));  // in order: the last memset won
  ASSERT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

TEST_F(Batching, AOneWayFailureIsReportedByTheNextCallThatWaitsAndOnlyOnce) {
  // A memset through a pointer that was never allocated fails on the server.
  EXPECT_EQ(cuMemsetD8_v2(0x10, 0, 16), CUDA_SUCCESS);  // queued: it cannot know yet
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Batching, TheFirstOfSeveralFailuresIsTheOneReported) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);  // minted: no round trip
  ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(0x10, 0, 16), CUDA_SUCCESS);   // INVALID_VALUE on the server
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);        // INVALID_HANDLE on the server
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Batching, WithBatchingOffEveryCallWaitsAndFailsAtOnce) {
  setenv("RGPU_BATCH", "0", 1);
  env::reload();
  uint64_t trips = connection()->round_trips();
  EXPECT_EQ(cuMemsetD8_v2(0x10, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(connection()->round_trips(), trips + 1);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Batching, CreatedHandlesAreUsableBeforeAnyRoundTrip) {
  uint64_t trips = connection()->round_trips();
  CUstream s;
  CUevent e;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(connection()->round_trips(), trips);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// One-way calls with arguments the driver refuses at once (client/driver/argument_checks.h) fail
// at once, send nothing and leave nothing for the next call that waits: on the H200 the later
// call used to fail in their place (bench/recorded/h200-2026-12-01/real_vs_rgpu_real.diff).
TEST_F(Batching, ArgumentErrorsTheDriverGivesAtOnceComeAtOnceAndSendNothing) {
  CUdeviceptr d;
  ASSERT_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  const uint64_t trips = connection()->round_trips();
  const uint64_t oneway = connection()->oneway_calls();
  EXPECT_EQ(cuMemsetD32_v2(d + 1, 0, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD16Async(d + 1, 0, 4, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D32_v2(d, 258, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);
  CUstream bad_stream = nullptr;
  EXPECT_EQ(cuStreamCreate(&bad_stream, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreateWithPriority(&bad_stream, 0x2, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(bad_stream, nullptr);
  CUevent bad_event = nullptr;
  EXPECT_EQ(cuEventCreate(&bad_event, 0x100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(&bad_event, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(bad_event, nullptr);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventRecordWithFlags(e, s, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(connection()->oneway_calls(), oneway);
  EXPECT_EQ(connection()->round_trips(), trips);
  // The accepted neighbours still go one-way, and nothing was left to fail the next wait.
  EXPECT_EQ(cuMemsetD32_v2(d + 4, 0, 4), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD32_v2(d + 1, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(connection()->oneway_calls(), oneway + 2);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// Launches and attribute sets of a real kernel (the fake's rgpu_fill_u32): what the client knows
// (the device, the limit last set, the attributes asked once, the occupancy asked) is enough to
// refuse at once, and a launch the driver accepts still goes one-way.
TEST_F(Batching, LaunchArgumentErrorsComeAtOnceFromWhatTheClientKnows) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time, so there are no images";
  std::ifstream file(RGPU_TEST_KERNEL_FATBIN, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(image.empty());
  CUmodule mod;
  ASSERT_EQ(cuModuleLoadData(&mod, image.data()), CUDA_SUCCESS);
  CUfunction fill;
  ASSERT_EQ(cuModuleGetFunction(&fill, mod, "rgpu_fill_u32"), CUDA_SUCCESS);
  CUdeviceptr d;
  ASSERT_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
  unsigned value = 7;
  unsigned long long n = 64;
  void* args[] = {&d, &value, &n};
  ASSERT_EQ(cuLaunchKernel(fill, 1, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);  // layout known
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  uint64_t trips = connection()->round_trips();
  const uint64_t oneway = connection()->oneway_calls();
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 1025, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 65, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(fill, 0, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(fill, 1, 65536, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 300 << 10, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 300 << 10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(connection()->round_trips(), trips);
  EXPECT_EQ(connection()->oneway_calls(), oneway);
  // Above 48 KiB with nothing known: the function's attributes are asked once (the default limit).
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, (48 << 10) + 1, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(connection()->round_trips(), trips + 1);
  trips = connection()->round_trips();
  // Raised: the limit set is known with no question asked, in both directions.
  EXPECT_EQ(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 100 << 10, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, (100 << 10) + 1, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(connection()->round_trips(), trips);
  // Cooperative: once the occupancy is known, one block more than can be resident is too large.
  int per_sm = 0, sms = 0;
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fill, 256, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  ASSERT_GT(per_sm, 0);
  trips = connection()->round_trips();
  const unsigned most = static_cast<unsigned>(per_sm * sms);
  EXPECT_EQ(cuLaunchCooperativeKernel(fill, most + 1, 1, 1, 256, 1, 1, 0, nullptr, args),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cuLaunchCooperativeKernel(fill, 1, 1, 1, 32, 1, 1, 300 << 10, nullptr, args),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cuLaunchCooperativeKernel(fill, most, 1, 1, 256, 1, 1, 0, nullptr, args), CUDA_SUCCESS);
  EXPECT_EQ(connection()->round_trips(), trips);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // nothing deferred
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(mod), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Batching, ASynchronizeWithNoContextCurrentIsInvalidContext) {
  CUresult rc = CUDA_SUCCESS;
  std::thread t([&] { rc = cuCtxSynchronize(); });  // a new thread: no context current
  t.join();
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

}  // namespace
}  // namespace rgpu::client
