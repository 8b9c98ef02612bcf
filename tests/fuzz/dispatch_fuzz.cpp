// Fuzz target for the server's handlers (server/dispatch.h) against the fake driver: every
// payload a client sends reaches one of them, so none may crash, read past its payload, or hand
// the driver a pointer the wire made up. An input is one call: its first 2 bytes pick the op (an
// op id that has a handler is used as is; any other value is mapped onto the ops that have one),
// the rest is the payload. Like the session (server/session.cpp), a handler must either reject
// the payload (args not ok) or answer at least a CUresult.
//
// Each input runs with a fresh HandleMap that holds what a client would have bound by then: the
// primary context (kCtx), a stream (kStream), an event (kEvent) and, when the test image was
// built, a module (kModule) and its function rgpu_fill_u32 (kFunc). A device buffer of kBufSize
// bytes exists too; the 8-byte value kDevicePlaceholder anywhere in a payload is replaced with its
// address, so seeds (and their mutants) reach the fake driver's memory paths. When an input
// destroys one of those objects, releases or resets the primary context, or poisons it, the
// next input starts a fresh "epoch" (reset, retain, create all again); so does every 512th.
//
// Ops left out: kOpSnapshot (run once at start; it takes no arguments). Nothing in fakecuda
// blocks forever on its own; the one kernel that waits on purpose (rgpu_spin) is never bound
// here, so no input can launch it. The standalone driver's --hang-seconds catches any other hang.
//
// The module and library loads and the launches were left out while they crashed (found by this
// target; fixed by server/handlers/image.h and launch.cpp's arguments_fit); they are in now.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/wire.h"
#include "gen/driver_table.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "server/dispatch.h"
#include "server/handle_map.h"
#include "server/handlers/control.h"

#ifndef RGPU_FAKECUDA_PATH
#error "RGPU_FAKECUDA_PATH must name build/lib/libfakecuda.so"
#endif

namespace {

using rgpu::server::DriverTable;
using rgpu::server::Handler;
using rgpu::server::HandleMap;

constexpr uint64_t kCtx = 0x1000, kStream = 0x1001, kEvent = 0x1002, kModule = 0x1003, kFunc = 0x1004;
constexpr uint64_t kDevicePlaceholder = 0xD0D0D0D0D0D0D0D0ull;
constexpr size_t kBufSize = 4096;
constexpr int kInputsPerEpoch = 512;


DriverTable g_drv;
std::vector<uint16_t> g_ops;  // every op with a handler
std::vector<uint8_t> g_image;

struct Epoch {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUevent event = nullptr;
  CUmodule module = nullptr;
  CUfunction func = nullptr;
  CUdeviceptr buf = 0;
  int inputs = 0;
} g;

void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "dispatch_fuzz: %s failed with %d\n", what, rc);
    std::abort();
  }
}

void new_epoch() {
  unsigned flags = 0;
  int active = 0;
  CUcontext c = nullptr;
  while (g_drv.cuCtxPopCurrent_v2(&c) == CUDA_SUCCESS && c) {
  }
  check(g_drv.cuDevicePrimaryCtxGetState(0, &flags, &active), "cuDevicePrimaryCtxGetState");
  if (active) check(g_drv.cuDevicePrimaryCtxReset_v2(0), "cuDevicePrimaryCtxReset");
  g = Epoch{};
  check(g_drv.cuDevicePrimaryCtxRetain(&g.ctx, 0), "cuDevicePrimaryCtxRetain");
  check(g_drv.cuCtxSetCurrent(g.ctx), "cuCtxSetCurrent");
  check(g_drv.cuStreamCreate(&g.stream, 0), "cuStreamCreate");
  check(g_drv.cuEventCreate(&g.event, 0), "cuEventCreate");
  check(g_drv.cuMemAlloc_v2(&g.buf, kBufSize), "cuMemAlloc");
  if (!g_image.empty()) {
    check(g_drv.cuModuleLoadData(&g.module, g_image.data()), "cuModuleLoadData");
    check(g_drv.cuModuleGetFunction(&g.func, g.module, "rgpu_fill_u32"), "cuModuleGetFunction");
  }
}

}  // namespace

// fakecuda backs device memory with new (std::nothrow) and answers OUT_OF_MEMORY when that fails,
// as the real driver does for a huge cuMemAlloc. Under ASan a huge allocation would abort (or, up
// to the machine's memory, take seconds to map and poison): cap it and let it fail instead.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:max_allocation_size_mb=1024"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  void* lib = dlopen(RGPU_FAKECUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dispatch_fuzz: cannot load %s: %s\n", RGPU_FAKECUDA_PATH, dlerror());
    std::abort();
  }
  rgpu::server::load_driver_table(lib, &g_drv);
  for (uint32_t op = 0; op <= 0xffff; ++op) {
    if (rgpu::server::find_handler(static_cast<uint16_t>(op)) ||
        rgpu::server::handlers::control_handler(static_cast<uint16_t>(op)))
      g_ops.push_back(static_cast<uint16_t>(op));
  }
  if (g_ops.empty()) std::abort();
#ifdef RGPU_TEST_IMAGE
  if (FILE* f = std::fopen(RGPU_TEST_IMAGE, "rb")) {
    int ch;
    while ((ch = std::fgetc(f)) != EOF) g_image.push_back(static_cast<uint8_t>(ch));
    std::fclose(f);
  }
#endif
  // What the first kOpSnapshot of every session does: cuInit and the device snapshot.
  HandleMap handles;
  rgpu::Reader in(nullptr, 0);
  std::vector<uint8_t> body;
  rgpu::Writer out(&body);
  rgpu::server::Dispatch d{g_drv, handles, in, out, rgpu::proto::kOpSnapshot};
  rgpu::server::handlers::snapshot(d);
  int32_t rc = -1;
  if (body.size() >= 4) std::memcpy(&rc, body.data(), 4);
  check(static_cast<CUresult>(rc), "the snapshot handler");
  new_epoch();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint16_t v;
  std::memcpy(&v, data, 2);
  uint16_t op = std::binary_search(g_ops.begin(), g_ops.end(), v) ? v : g_ops[v % g_ops.size()];
  Handler h = rgpu::server::find_handler(op);
  if (!h) h = rgpu::server::handlers::control_handler(op);

  // Exact-size heap copy of the payload so ASan sees any over-read; placeholders → the buffer.
  std::vector<uint8_t> payload(data + 2, data + size);
  for (size_t i = 0; i + 8 <= payload.size(); ++i) {
    uint64_t x;
    std::memcpy(&x, &payload[i], 8);
    if (x == kDevicePlaceholder) std::memcpy(&payload[i], &g.buf, 8);
  }

  HandleMap handles;
  if (!handles.bind(kCtx, g.ctx) || !handles.bind(kStream, g.stream) || !handles.bind(kEvent, g.event)) std::abort();
  if (g.module && (!handles.bind(kModule, g.module) || !handles.bind(kFunc, g.func))) std::abort();

  rgpu::Reader in(payload.data(), payload.size());
  std::vector<uint8_t> body;
  rgpu::Writer out(&body);
  rgpu::server::Dispatch d{g_drv, handles, in, out, op};
  h(d);
  if (in.ok() && body.size() < sizeof(int32_t)) {
    std::fprintf(stderr, "dispatch_fuzz: %s (op %u) accepted its arguments but wrote no CUresult\n",
                 rgpu::op::name(op) ? rgpu::op::name(op) : "?", op);
    std::abort();
  }

  // Put the client's world back: our context current and alone on this thread's stack.
  CUcontext c = nullptr;
  while (g_drv.cuCtxPopCurrent_v2(&c) == CUDA_SUCCESS && c) {
    if (c != g.ctx) g_drv.cuCtxDestroy_v2(c);
  }
  unsigned flags = 0;
  int active = 0;
  void* p = nullptr;
  bool intact = g_drv.cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active &&
                handles.get_raw(kStream, &p) && handles.get_raw(kEvent, &p) &&
                (!g.module || handles.get_raw(kModule, &p));
  if (intact) intact = g_drv.cuCtxSetCurrent(g.ctx) == CUDA_SUCCESS && g_drv.cuCtxSynchronize() == CUDA_SUCCESS;
  if (!intact || ++g.inputs >= kInputsPerEpoch) new_epoch();
  return 0;
}

// Seeds: one well-formed call for each family of handlers (hand-written and generated).
void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  auto seed = [&](uint16_t op, auto fill) {
    std::vector<uint8_t> s;
    rgpu::Writer w(&s);
    w.put_u16(op);
    fill(w);
    out->push_back(std::move(s));
  };
  const uint64_t dev = kDevicePlaceholder;
  namespace op = rgpu::op;
  seed(op::cuMemAlloc_v2, [](rgpu::Writer& w) { w.put_u8(1), w.put_u64(4096); });
  seed(op::cuMemGetInfo_v2, [](rgpu::Writer& w) { w.put_u8(1), w.put_u8(1); });
  seed(op::cuMemFree_v2, [&](rgpu::Writer& w) { w.put_u64(dev); });
  seed(op::cuMemsetD32_v2, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u32(7), w.put_u64(16); });
  seed(op::cuMemsetD8Async, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u8(7), w.put_u64(16), w.put_u64(kStream); });
  seed(op::cuMemcpyDtoD_v2, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u64(dev + 64), w.put_u64(64); });
  seed(op::cuMemGetAddressRange_v2, [&](rgpu::Writer& w) { w.put_u8(1), w.put_u8(1), w.put_u64(dev); });
  uint8_t bytes[32] = {1, 2, 3, 4, 5, 6, 7, 8};
  seed(op::cuMemcpyHtoD_v2, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_bytes(bytes, sizeof bytes); });
  seed(op::cuMemcpyHtoDAsync_v2,
       [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u64(kStream), w.put_bytes(bytes, sizeof bytes); });
  seed(op::cuMemcpyDtoH_v2, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u64(64); });
  seed(op::cuMemcpyDtoHAsync_v2, [&](rgpu::Writer& w) { w.put_u64(dev), w.put_u64(kStream), w.put_u64(64); });
  seed(op::cuStreamSynchronize, [](rgpu::Writer& w) { w.put_u64(kStream); });
  seed(op::cuStreamQuery, [](rgpu::Writer& w) { w.put_u64(kStream); });
  seed(op::cuStreamCreate, [](rgpu::Writer& w) { w.put_u64(0x2000), w.put_u32(0); });
  seed(op::cuStreamDestroy_v2, [](rgpu::Writer& w) { w.put_u64(kStream); });
  seed(op::cuStreamWaitEvent, [](rgpu::Writer& w) { w.put_u64(kStream), w.put_u64(kEvent), w.put_u32(0); });
  seed(op::cuEventRecord, [](rgpu::Writer& w) { w.put_u64(kEvent), w.put_u64(kStream); });
  seed(op::cuEventSynchronize, [](rgpu::Writer& w) { w.put_u64(kEvent); });
  seed(op::cuEventElapsedTime, [](rgpu::Writer& w) { w.put_u8(1), w.put_u64(kEvent), w.put_u64(kEvent); });
  seed(op::cuCtxSynchronize, [](rgpu::Writer&) {});
  seed(op::cuCtxSetCurrent, [](rgpu::Writer& w) { w.put_u64(kCtx); });
  seed(op::cuCtxPushCurrent_v2, [](rgpu::Writer& w) { w.put_u64(kCtx); });
  seed(op::cuCtxCreate_v2, [](rgpu::Writer& w) { w.put_u8(1), w.put_u32(0), w.put_i32(0); });
  seed(op::cuCtxGetLimit, [](rgpu::Writer& w) { w.put_u8(1), w.put_u32(0); });
  seed(op::cuDevicePrimaryCtxRetain, [](rgpu::Writer& w) { w.put_u8(1), w.put_i32(0); });
  seed(op::cuDeviceGetName, [](rgpu::Writer& w) { w.put_u8(1), w.put_i32(64), w.put_i32(0); });
  seed(op::cuModuleUnload, [](rgpu::Writer& w) { w.put_u64(kModule); });
  seed(op::cuModuleGetFunction, [](rgpu::Writer& w) { w.put_u64(0x2001), w.put_u64(kModule), w.put_str("rgpu_fill_u32"); });
  seed(rgpu::proto::kOpClusterTopology, [](rgpu::Writer& w) { w.put_u64(0); });  // the current context
  seed(op::cuFuncGetParamInfo, [](rgpu::Writer& w) { w.put_u64(kFunc), w.put_u64(1); });
  seed(op::cuModuleLoadData, [&](rgpu::Writer& w) { w.put_u64(0x2002), w.put_bytes(g_image.data(), g_image.size()); });
  // rgpu_fill_u32(unsigned* p, unsigned value, unsigned long long n): layout (0,8) (8,4) (16,8).
  auto launch_args = [&](rgpu::Writer& w) {
    w.put_u32(3);
    w.put_u32(0), w.put_u32(8), w.put_u32(8), w.put_u32(4), w.put_u32(16), w.put_u32(8);
    uint8_t packed[24] = {};
    std::memcpy(packed, &dev, 8);
    uint32_t value = 0x55;
    uint64_t n = 16;
    std::memcpy(packed + 8, &value, 4);
    std::memcpy(packed + 16, &n, 8);
    w.put_bytes(packed, sizeof packed);
  };
  auto launch_head = [](rgpu::Writer& w) {
    w.put_u64(kFunc);
    for (unsigned v : {1u, 1u, 1u, 16u, 1u, 1u}) w.put_u32(v);
    w.put_u32(0);
    w.put_u64(kStream);
  };
  seed(op::cuLaunchKernel, [&](rgpu::Writer& w) { launch_head(w), launch_args(w); });
  seed(op::cuLaunchKernelEx, [&](rgpu::Writer& w) {
    launch_head(w);
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    a.value.programmaticEvent.event = reinterpret_cast<CUevent>(kEvent);
    w.put_u32(1);
    w.put(a);
    launch_args(w);
  });
}
