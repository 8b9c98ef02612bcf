// Fuzz target for the server's handlers (server/dispatch.h) against the fake driver and the fake
// NVML: every payload a client sends reaches one of them, so none may crash, read past its
// payload, or hand the driver a pointer the wire made up. An input is one call: its first 2 bytes
// pick the op (an op id find_handler accepts is used as is; any other value is mapped onto those
// ops), the rest is the payload. Every op the server accepts is fed: control ops, mapped memory,
// CUDA calls and NVML calls (dispatch_fuzz_ops_test checks that the seeds name each one). Like
// the session (server/session.cpp), a handler must either reject the payload (args not ok) or
// answer at least a CUresult, and after it the session's mapped-memory steps run (marks after GPU
// work, updates before a synchronizing reply).
//
// Each input runs with a fresh HandleMap that holds what a client would have bound by then: the
// primary context (kCtx), a stream (kStream), an event (kEvent) and, when the test image was
// built, a module (kModule) and its function rgpu_fill_u32 (kFunc). A device buffer of kBufSize
// bytes exists too; the 8-byte value kDevicePlaceholder anywhere in a payload is replaced with its
// address, so seeds (and their mutants) reach the fake driver's memory paths. When an input
// destroys one of those objects, releases or resets the primary context, or poisons it, the
// next input starts a fresh "epoch" (reset, retain, create all again); so does every 512th.
//
// Mapped buffers an input makes are freed at the next epoch. NVML device 0's handle id replaces
// the 8-byte value kNvmlDevicePlaceholder. Nothing in fakecuda blocks forever on its own; the one kernel that waits on purpose (rgpu_spin) is never bound
// here, so no input can launch it. The standalone driver's --hang-seconds catches any other hang.
//
// The module and library loads and the launches were left out while they crashed (found by this
// target; fixed by server/handlers/image.h and launch.cpp's arguments_fit); they are in now.
//
// Built three ways (RGPU_DISPATCH_FUZZ_FAMILY), so that the decoders with most at stake get inputs
// of their own instead of one in several hundred: 0, every op (dispatch_fuzz); 1, the NVML ops
// only (nvml_fuzz: server/nvml/, gen/nvml_server_dispatch.gen.cpp); 2, mapped and managed memory
// (mapped_fuzz: server/mapped_memory.cpp's kOpMapped* and kOpManagedAlloc) beside the few CUDA
// calls that write mapped memory or synchronize, which run its marks and updates.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common/wire.h"
#include "gen/driver_table.gen.h"
#include "gen/nvml_ops.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/op_classes.h"
#include "protocol/wire/control.h"
#include "protocol/wire/copy.h"
#include "protocol/wire/dark_api.h"
#include "protocol/wire/launch.h"
#include "protocol/wire/module.h"
#include "server/dispatch.h"
#include "server/handle_map.h"
#include "server/handlers/control.h"
#include "server/mapped_memory.h"
#include "server/nccl/nccl_server.h"
#include "server/nvml/nvml_server.h"
#include "tests/fuzz/dispatch_fuzz.h"

#ifndef RGPU_FAKECUDA_PATH
#error "RGPU_FAKECUDA_PATH must name build/lib/libfakecuda.so"
#endif
#ifndef RGPU_FAKENVML_PATH
#error "RGPU_FAKENVML_PATH must name build/lib/libfakenvml.so"
#endif

namespace {

using rgpu::server::DriverTable;
using rgpu::server::Handler;
using rgpu::server::HandleMap;

constexpr uint64_t kCtx = 0x1000, kStream = 0x1001, kEvent = 0x1002, kModule = 0x1003, kFunc = 0x1004;
constexpr uint64_t kDevicePlaceholder = 0xD0D0D0D0D0D0D0D0ull;
constexpr uint64_t kNvmlDevicePlaceholder = 0xD1D1D1D1D1D1D1D1ull;
constexpr size_t kBufSize = 4096;
constexpr int kInputsPerEpoch = 512;

#ifndef RGPU_DISPATCH_FUZZ_FAMILY
#define RGPU_DISPATCH_FUZZ_FAMILY 0
#endif
// Whether this build feeds op o (the file comment's families).
bool in_family(uint16_t o) {
  namespace proto = rgpu::proto;
  namespace op = rgpu::op;
  switch (RGPU_DISPATCH_FUZZ_FAMILY) {
    case 1:
      return o >= proto::kFirstNvmlOp;
    case 2:
      for (uint16_t m : std::initializer_list<uint16_t>{
               proto::kOpMappedAlloc, proto::kOpMappedFree, proto::kOpMappedWrite, proto::kOpMappedCopy,
               proto::kOpManagedAlloc, op::cuMemcpyHtoD_v2, op::cuMemcpyDtoH_v2, op::cuMemcpyDtoD_v2,
               op::cuMemsetD8Async, op::cuMemsetD32_v2, op::cuLaunchKernel, op::cuStreamSynchronize,
               op::cuCtxSynchronize, op::cuEventSynchronize})
        if (o == m) return true;
      return false;
    default:
      return true;
  }
}


DriverTable g_drv;
std::vector<uint16_t> g_ops;  // every op find_handler accepts, ascending
std::vector<uint8_t> g_image;
uint64_t g_nvml_device = 0;  // NVML device 0's handle id
rgpu::server::MappedMemory& g_mapped = *new rgpu::server::MappedMemory();
std::vector<uint64_t> g_mapped_bases;  // client bases of the mapped buffers inputs made
std::vector<rgpu::server::DispatchFuzzCount> g_counts(65536);

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

// kOpMappedFree for each buffer inputs made (before the context they were made in goes).
void free_mapped() {
  for (uint64_t base : g_mapped_bases) {
    rgpu::Reader in(&base, sizeof base);
    std::vector<uint8_t> body;
    rgpu::Writer out(&body);
    g_mapped.free(g_drv, in, out);
  }
  g_mapped_bases.clear();
}

void new_epoch() {
  free_mapped();
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

uint16_t rgpu::server::dispatch_fuzz_op(uint16_t v) {
  return std::binary_search(g_ops.begin(), g_ops.end(), v) ? v : g_ops[v % g_ops.size()];
}
const std::vector<rgpu::server::DispatchFuzzCount>& rgpu::server::dispatch_fuzz_counts() { return g_counts; }

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
  for (uint32_t op = 0; op <= 0xffff; ++op)
    if (rgpu::server::find_handler(static_cast<uint16_t>(op)) && in_family(static_cast<uint16_t>(op)))
      g_ops.push_back(static_cast<uint16_t>(op));
  if (g_ops.empty()) std::abort();
  // NVML: what a session's first NVML calls do (nvmlInit, a device handle).
  // NCCL: the handlers' decoders are fed, but no NCCL library runs what they decode (the fake
  // NCCL's rendezvous sockets and threads would pile up over millions of inputs): every NCCL op
  // that decodes is answered "no NCCL library" (server/nccl/nccl_server.h).
  rgpu::server::nccl::set_library("/nonexistent/rgpu-dispatch-fuzz/libnccl.so.2");
  rgpu::server::nvml::set_library(RGPU_FAKENVML_PATH);
  const rgpu::server::nvml::NvmlTable* nvml = rgpu::server::nvml::table();
  nvmlDevice_t nvml_dev = nullptr;
  if (!nvml || nvml->nvmlInit_v2() != NVML_SUCCESS || nvml->nvmlDeviceGetHandleByIndex_v2(0, &nvml_dev) != NVML_SUCCESS) {
    std::fprintf(stderr, "dispatch_fuzz: the fake NVML %s does not answer\n", RGPU_FAKENVML_PATH);
    std::abort();
  }
  g_nvml_device = rgpu::server::nvml::to_id(nvml_dev);
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
  const uint16_t op = rgpu::server::dispatch_fuzz_op(v);
  Handler h = rgpu::server::find_handler(op);

  // Exact-size heap copy of the payload so ASan sees any over-read; placeholders → the buffer.
  std::vector<uint8_t> payload(data + 2, data + size);
  for (size_t i = 0; i + 8 <= payload.size(); ++i) {
    uint64_t x;
    std::memcpy(&x, &payload[i], 8);
    if (x == kDevicePlaceholder) std::memcpy(&payload[i], &g.buf, 8);
    if (x == kNvmlDevicePlaceholder) std::memcpy(&payload[i], &g_nvml_device, 8);
  }

  // A mapped buffer that would be made costs its size twice here (the copy and its shadow, zeroed
  // and compared at every synchronizing call): those over 1 MiB are left out (the code is the same
  // for any size; mapped_fuzz spent half its time comparing 64 MiB ones, and the refusal of sizes
  // past the limit is still fed). Read from the payload after the placeholders are replaced: a
  // placeholder straddling the size field makes a new size (0x100007e00 from the device buffer's
  // address made an ASan out-of-memory abort).
  if (op == rgpu::proto::kOpMappedAlloc || op == rgpu::proto::kOpManagedAlloc) {
    const size_t at = op == rgpu::proto::kOpMappedAlloc ? 8 : 0;
    uint64_t n = 0;
    if (payload.size() >= at + 8) std::memcpy(&n, payload.data() + at, 8);
    if (n > (1u << 20) && n <= (uint64_t{16} << 30)) return 0;
  }

  HandleMap handles;
  if (!handles.bind(kCtx, g.ctx) || !handles.bind(kStream, g.stream) || !handles.bind(kEvent, g.event)) std::abort();
  if (g.module && (!handles.bind(kModule, g.module) || !handles.bind(kFunc, g.func))) std::abort();

  rgpu::Reader in(payload.data(), payload.size());
  std::vector<uint8_t> body;
  rgpu::Writer out(&body);
  // The bulk buffer lives on from input to input, as the session's do (server/session.cpp
  // next_bulk): a copy's size (up to 64 MiB from a few bytes) then costs an allocation once.
  static rgpu::Bytes& bulk = *new rgpu::Bytes();
  bulk.clear();
  rgpu::server::Dispatch d{g_drv, handles, in, out, op, nullptr, &bulk, &g_mapped};
  h(d);
  ++g_counts[op].inputs;
  if (in.ok() && body.size() < sizeof(int32_t)) {
    std::fprintf(stderr, "dispatch_fuzz: %s (op %u) accepted its arguments but wrote no CUresult\n",
                 rgpu::server::op_name(op) ? rgpu::server::op_name(op) : "?", op);
    std::abort();
  }
  if (in.ok()) {
    ++g_counts[op].decoded;
    int32_t rc;
    std::memcpy(&rc, body.data(), sizeof rc);
    // A mapped buffer made: remembered, to be freed at the next epoch.
    if (rc == 0 && body.size() >= 12 && (op == rgpu::proto::kOpMappedAlloc || op == rgpu::proto::kOpManagedAlloc)) {
      uint64_t base;
      if (op == rgpu::proto::kOpMappedAlloc)
        std::memcpy(&base, payload.data(), sizeof base);  // the client's base
      else
        std::memcpy(&base, body.data() + 4, sizeof base);  // the managed address
      g_mapped_bases.push_back(base);
    }
    // The session's steps around the reply (server/session.cpp Worker::loop).
    if (op != rgpu::proto::kOpMappedCopy && !g_mapped.empty() && rgpu::op_touches_memory(op))
      g_mapped.note_gpu_work(op, payload.data(), payload.size());
    if (rgpu::op_synchronizes(op)) g_mapped.send_updates([](const std::vector<uint8_t>&) { return true; });
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
    if (!in_family(op)) return;
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
  // Copies between servers: outside a session (here) they decode and refuse, dialling nothing.
  seed(rgpu::proto::kOpPeerTicket, [](rgpu::Writer&) {});
  seed(rgpu::proto::kOpPeerSend, [&](rgpu::Writer& w) {
    rgpu::proto::wire::put_peer_send(w, {1, "127.0.0.1", 9, {}, dev, 64, true, kStream});
  });
  seed(rgpu::proto::kOpPeerReceive, [&](rgpu::Writer& w) { rgpu::proto::wire::put_peer_receive(w, {1, dev, 64, false, 0}); });
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

  // Control ops and mapped memory (protocol/messages.h says what each does; the payloads are
  // protocol/wire/'s where a codec exists).
  namespace proto = rgpu::proto;
  const uint64_t host = 0x5a0000400000ull;  // a mapped buffer's client address
  seed(proto::kOpSnapshot, [](rgpu::Writer&) {});
  seed(proto::kOpSessions, [](rgpu::Writer&) {});
  // No sessions are listed here: refused before any checkpoint call reaches the fake.
  seed(proto::kOpSessionControl, [](rgpu::Writer& w) { w.put_u8(proto::kSessionSuspend), w.put_u32(1), w.put_i32(-1); });
  seed(proto::kOpMappedAlloc, [&](rgpu::Writer& w) { w.put_u64(host), w.put_u64(8192), w.put_u32(0); });
  seed(proto::kOpMappedWrite, [&](rgpu::Writer& w) { w.put_u64(host), w.put_u64(16), w.append(bytes, sizeof bytes); });
  seed(proto::kOpMappedCopy, [&](rgpu::Writer& w) {
    w.put_u16(op::cuMemcpyHtoDAsync_v2), w.put_u64(dev), w.put_u64(kStream), w.put_u64(host), w.put_u64(64);
  });
  seed(proto::kOpMappedCopy, [&](rgpu::Writer& w) {
    w.put_u16(op::cuMemcpyDtoH_v2), w.put_u64(dev), w.put_u64(0), w.put_u64(host + 64), w.put_u64(64);
  });
  seed(proto::kOpMappedFree, [&](rgpu::Writer& w) { w.put_u64(host); });
  seed(proto::kOpManagedAlloc, [](rgpu::Writer& w) { w.put_u64(4096), w.put_u32(CU_MEM_ATTACH_GLOBAL); });
  namespace wire = rgpu::proto::wire;
  seed(proto::kOpParamLayout, [](rgpu::Writer& w) { wire::put_param_layout_ask(w, {kFunc, 2}); });
  seed(proto::kOpFuncAttributes, [](rgpu::Writer& w) { wire::put_func_attributes_ask(w, {kFunc, 0, 0}); });
  seed(proto::kOpAllocAhead, [](rgpu::Writer& w) { wire::put_alloc_ahead(w, {4096, 3}); });
  seed(proto::kOpAllocMany, [](rgpu::Writer& w) { wire::put_alloc_many(w, {{512, 2}, {4096, 1}}); });
  // (The hash and the UUID were once written length-prefixed, which the server read as garbage.)
  seed(proto::kOpModuleByHash, [](rgpu::Writer& w) { wire::put_module_by_hash(w, {0x2003, op::cuModuleLoadData, {}}); });
  seed(proto::kOpToolsContextObject, [](rgpu::Writer& w) { wire::put_tools_context_ask(w, {kCtx, kStream}); });
  seed(proto::kOpModuleFunctions, [](rgpu::Writer& w) { wire::put_module_functions_ask(w, {kCtx, kModule}); });
  seed(proto::kOpClusterTopology, [](rgpu::Writer& w) { wire::put_context_ask(w, kCtx); });
  seed(proto::kOpExportTableInfo, [](rgpu::Writer& w) {
    const CUuuid uuid = {{0x6b, char(0xd5), char(0xfb), 0x6c, 0x5b, char(0xf4), char(0xe7), 0x4a, char(0x89), char(0x87),
                          char(0xd9), 0x39, 0x12, char(0xfd), char(0x9d), char(0xf9)}};
    wire::put_export_table_ask(w, uuid);
  });
  seed(proto::kOpClusterOccupancyTable, [](rgpu::Writer& w) {
    w.put_u64(kFunc);
    for (unsigned v : {8u, 1u, 1u, 32u, 1u, 1u, 0u}) w.put_u32(v);
    w.put_u64(kStream);
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = 2, a.value.clusterDim.y = 1, a.value.clusterDim.z = 1;
    w.put_u32(1);
    w.put(a);
    w.put_u32(1), w.put_u32(4), w.put_u8(1);
  });
  // NVML (gen/nvml_server_dispatch.gen.cpp has each layout).
  namespace nvml_op = rgpu::nvml_op;
  const uint64_t nvml_dev = kNvmlDevicePlaceholder;
  seed(nvml_op::nvmlInit_v2, [](rgpu::Writer&) {});
  seed(nvml_op::nvmlDeviceGetCount_v2, [](rgpu::Writer& w) { w.put_u8(1); });
  seed(nvml_op::nvmlDeviceGetHandleByIndex_v2, [](rgpu::Writer& w) { w.put_u32(0), w.put_u8(1); });
  seed(nvml_op::nvmlDeviceGetName, [&](rgpu::Writer& w) { w.put_u64(nvml_dev), w.put_u8(1), w.put_u32(96); });

  // Every other op the server accepts, with a payload of zeros (NULL handles, absent outputs,
  // zero counts: most decode and reach the driver) and with one of handle placeholders.
  std::vector<uint8_t> zeros(256, 0), handles;
  for (uint64_t h : {kCtx, kStream, kEvent, kModule, kFunc, dev, nvml_dev}) {
    rgpu::Writer w(&handles);
    w.put_u64(h);
  }
  handles.resize(256, 0);
  for (uint32_t v = 0; v <= 0xffff; ++v) {
    const uint16_t o = static_cast<uint16_t>(v);
    if (!rgpu::server::find_handler(o)) continue;
    seed(o, [&](rgpu::Writer& w) { w.append(zeros.data(), zeros.size()); });
    seed(o, [&](rgpu::Writer& w) { w.append(handles.data(), handles.size()); });
  }
}
