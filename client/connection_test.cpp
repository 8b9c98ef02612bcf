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
#include <thread>

#include "client/runtime.h"
#include "common/env.h"
#include "common/net.h"
#include "protocol/handshake.h"
#include "server/session.h"

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
    if (!proto::server_handshake(fd, "", &hs, &err)) _exit(1);
    _exit(server::run_session(fd, {&table, "test", hs.identity}));
  }
  close(lfd);
  setenv("RGPU_SERVER", ("127.0.0.1:" + std::to_string(ntohs(sa.sin_port))).c_str(), 1);
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

TEST_F(Batching, ASynchronizeWithNoContextCurrentIsInvalidContext) {
  CUresult rc = CUDA_SUCCESS;
  std::thread t([&] { rc = cuCtxSynchronize(); });  // a new thread: no context current
  t.join();
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

}  // namespace
}  // namespace rgpu::client
