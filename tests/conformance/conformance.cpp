// rgpu_conformance: the same driver and NVML calls against the libraries named on the command line,
// each answer printed in a canonical form, so the real driver's output is the oracle for the fake's
// (tests/conformance/README.md). One line per answer:
//
//   <section> <what> = <CUresult or nvmlReturn_t name> [values]
//
// Values are printed only on success. What legitimately differs between two machines (pointers,
// handles, UUIDs, bus ids, clocks, free memory, temperatures) is printed as a relation (nonnull,
// equal to the allocation, aligned to 2 MiB) or as <masked>; what programs branch on (attributes,
// limits, sizes, flags, error names and strings) is printed as is. A symbol the library lacks is
// printed as `absent`.
//
//   rgpu_conformance --cuda LIB [--nvml LIB] [--image FATBIN]
//
// The libraries are opened with dlopen: the real libcuda.so.1 / libnvidia-ml.so.1, fakecuda's
// libfakecuda.so / libfakenvml.so, or rgpu's shim (build/lib/libcuda.so.1 with RGPU_SERVER set).
#include <cuda.h>
#include <dlfcn.h>
#include <nvml.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gen/cuda_enums.gen.h"
#include "gen/nvml_enums.gen.h"

namespace {

using rgpu::cuda_enum::enum_name;

// ---------- the driver's entry points, resolved by dlsym (versioned names, as cuda.h maps them) ----------
#define RGPU_STR2(x) #x
#define RGPU_STR(x) RGPU_STR2(x)
#define CUDA_FUNCS(X)                                                                                         \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)    \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDeviceGetPCIBusId) X(cuDeviceGetAttribute)    \
  X(cuDeviceCanAccessPeer) X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) X(cuDeviceGetP2PAttribute)      \
  X(cuDevicePrimaryCtxGetState) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)   \
  X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxGetApiVersion) X(cuCtxGetFlags) X(cuCtxGetStreamPriorityRange)  \
  X(cuCtxGetCacheConfig) X(cuCtxGetLimit) X(cuCtxSetLimit) X(cuCtxSynchronize) X(cuMemGetInfo) X(cuMemAlloc)  \
  X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostAlloc) X(cuMemHostGetFlags)                      \
  X(cuMemHostGetDevicePointer) X(cuMemAllocManaged) X(cuMemGetAddressRange) X(cuPointerGetAttribute)          \
  X(cuPointerGetAttributes) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD32) X(cuMemsetD8Async)                 \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy)     \
  X(cuStreamGetFlags) X(cuStreamGetPriority) X(cuStreamQuery) X(cuStreamSynchronize) X(cuStreamWaitEvent)     \
  X(cuStreamGetCtx) X(cuStreamIsCapturing) X(cuStreamGetCaptureInfo) X(cuStreamBeginCapture)                 \
  X(cuStreamBeginCaptureToGraph) X(cuStreamEndCapture) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)    \
  X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuModuleLoadData) X(cuModuleUnload)           \
  X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncGetName)    \
  X(cuFuncGetParamInfo) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuKernelGetAttribute) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuOccupancyMaxPotentialBlockSize) X(cuLaunchKernel)        \
  X(cuLaunchCooperativeKernel) X(cuLaunchKernelEx) X(cuMemGetAllocationGranularity) X(cuMemAddressReserve)    \
  X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)             \
  X(cuMemGetAccess) X(cuMemRetainAllocationHandle) X(cuMemGetAllocationPropertiesFromHandle)                  \
  X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle) X(cuGraphCreate) X(cuGraphDestroy)       \
  X(cuGraphGetNodes) X(cuGraphNodeGetType) X(cuGraphAddMemAllocNode) X(cuGraphAddMemsetNode)                 \
  X(cuGraphAddMemFreeNode) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy)

#define DECLARE(fn) decltype(&::fn) p_##fn = nullptr;
CUDA_FUNCS(DECLARE)
#undef DECLARE

#define NVML_FUNCS(X)                                                                                          \
  X(nvmlInit_v2) X(nvmlShutdown) X(nvmlErrorString) X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion)  \
  X(nvmlSystemGetCudaDriverVersion) X(nvmlSystemGetCudaDriverVersion_v2) X(nvmlDeviceGetCount_v2)              \
  X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetHandleByPciBusId_v2) X(nvmlDeviceGetHandleByUUID)            \
  X(nvmlDeviceGetIndex) X(nvmlDeviceGetMinorNumber) X(nvmlDeviceGetName) X(nvmlDeviceGetUUID)                  \
  X(nvmlDeviceGetBrand) X(nvmlDeviceGetArchitecture) X(nvmlDeviceGetCudaComputeCapability)                     \
  X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetBAR1MemoryInfo)                      \
  X(nvmlDeviceGetPciInfo_v3) X(nvmlDeviceGetP2PStatus) X(nvmlDeviceGetTopologyCommonAncestor)                  \
  X(nvmlDeviceGetCurrPcieLinkGeneration) X(nvmlDeviceGetMaxPcieLinkGeneration)                                 \
  X(nvmlDeviceGetGpuMaxPcieLinkGeneration) X(nvmlDeviceGetCurrPcieLinkWidth) X(nvmlDeviceGetMaxPcieLinkWidth)  \
  X(nvmlDeviceGetPcieSpeed) X(nvmlDeviceGetGpuFabricInfo) X(nvmlDeviceGetGpuFabricInfoV)                       \
  X(nvmlDeviceGetNvLinkState) X(nvmlDeviceGetNvLinkVersion) X(nvmlDeviceGetNvLinkCapability)                   \
  X(nvmlDeviceGetNvLinkRemotePciInfo_v2) X(nvmlDeviceGetNvLinkRemoteDeviceType) X(nvmlDeviceGetCpuAffinity)    \
  X(nvmlDeviceGetNumaNodeId) X(nvmlDeviceGetComputeMode) X(nvmlDeviceGetPersistenceMode)                       \
  X(nvmlDeviceGetMigMode) X(nvmlDeviceGetEccMode) X(nvmlDeviceGetDisplayMode) X(nvmlDeviceGetDisplayActive)    \
  X(nvmlDeviceGetPerformanceState) X(nvmlDeviceGetFanSpeed) X(nvmlDeviceGetTemperature)                        \
  X(nvmlDeviceGetPowerUsage) X(nvmlDeviceGetEnforcedPowerLimit) X(nvmlDeviceGetPowerManagementLimit)           \
  X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetMaxClockInfo)                      \
  X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlDeviceGetGraphicsRunningProcesses_v3)                       \
  X(nvmlDeviceGetFieldValues) X(nvmlDeviceGetVirtualizationMode) X(nvmlDeviceGetSerial)                        \
  X(nvmlDeviceGetVbiosVersion) X(nvmlDeviceGetBoardPartNumber) X(nvmlDeviceGetInforomImageVersion)             \
  X(nvmlSystemGetConfComputeState) X(nvmlDeviceGetConfComputeMemSizeInfo) X(nvmlDeviceGetAttributes_v2)        \
  X(nvmlDeviceGetCurrentClocksEventReasons) X(nvmlDeviceGetTotalEnergyConsumption)                             \
  X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetRemappedRows) X(nvmlDeviceGetComputeInstanceId)     \
  X(nvmlDeviceGetGpuInstanceId) X(nvmlDeviceIsMigDeviceHandle) X(nvmlDeviceGetMaxMigDeviceCount)

#define DECLARE(fn) decltype(&::fn) p_##fn = nullptr;
NVML_FUNCS(DECLARE)
#undef DECLARE

// A call to a symbol the library lacks answers this (printed "absent").
constexpr int kAbsent = -424242;
#define CU(fn, ...) (p_##fn ? p_##fn(__VA_ARGS__) : static_cast<CUresult>(kAbsent))
#define NV(fn, ...) (p_##fn ? p_##fn(__VA_ARGS__) : static_cast<nvmlReturn_t>(kAbsent))

// ---------- printing ----------
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string cu_name(int r) {
  if (r == kAbsent) return "absent";
  const char* n = enum_name(rgpu::cuda_enum::kCUresult, r);
  return n ? n : fmt("CUresult(%d)", r);
}

std::string nvml_name(int r) {
  if (r == kAbsent) return "absent";
  const char* n = rgpu::nvml_enum::enum_name(rgpu::nvml_enum::knvmlReturn_t, r);
  return n ? n : fmt("nvmlReturn_t(%d)", r);
}

// One answer: its result, and the values when it succeeded. put(what, call[, values]) is a macro
// so that values are read after the call returns (an argument list has no order of evaluation).
template <class R, class V>
bool put_result(const std::string& what, R r, bool ok, const std::string& name, V values) {
  std::string v = ok ? values() : std::string();
  printf("%s = %s%s%s\n", what.c_str(), name.c_str(), v.empty() ? "" : " ", v.c_str());
  return ok;
}
#define put(what, call, ...)                                                                  \
  ([&] {                                                                                      \
    CUresult r_ = (call);                                                                     \
    return put_result(what, r_, r_ == CUDA_SUCCESS, cu_name(r_), [&] { return std::string(__VA_ARGS__); }); \
  }())
#define put_nv(what, call, ...)                                                                   \
  ([&] {                                                                                          \
    nvmlReturn_t r_ = (call);                                                                     \
    return put_result(what, r_, r_ == NVML_SUCCESS, nvml_name(r_), [&] { return std::string(__VA_ARGS__); }); \
  }())
void note(const std::string& what, const std::string& value) { printf("%s: %s\n", what.c_str(), value.c_str()); }

std::string ptr_class(uint64_t p) {
  if (!p) return "null";
  std::string s = "nonnull";
  if (p % (2u << 20) == 0) s += ",aligned2M";
  else if (p % 4096 == 0) s += ",aligned4K";
  else if (p % 256 == 0) s += ",aligned256";
  return s;
}

// An answer about a pointer: its relation to the one expected.
std::string rel(uint64_t got, uint64_t expect) {
  if (got == expect) return "=expected";
  if (!got) return "null";
  return fmt("expected%+" PRId64, static_cast<int64_t>(got - expect));
}

// ---------- loading ----------
void* open_lib(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "rgpu_conformance: cannot open %s: %s\n", path, dlerror());
    exit(2);
  }
  return h;
}

void load_cuda(void* h) {
#define LOAD(fn) p_##fn = reinterpret_cast<decltype(p_##fn)>(dlsym(h, RGPU_STR(fn)));
  CUDA_FUNCS(LOAD)
}
void load_nvml(void* h) { NVML_FUNCS(LOAD) }
#undef LOAD

std::vector<char> read_file(const char* path) {
  std::vector<char> v;
  FILE* f = fopen(path, "rb");
  if (!f) return v;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  fclose(f);
  return v;
}

// ---------- sections ----------
CUdevice g_dev = 0;
CUcontext g_ctx = nullptr;

void errors() {
  // Every CUresult cuda.h names, and values it does not.
  std::vector<int> codes;
  for (const auto& e : rgpu::cuda_enum::kCUresult) codes.push_back(static_cast<int>(e.value));
  for (int extra : {-1, 12345, 1000, 10000}) codes.push_back(extra);
  for (int c : codes) {
    const char* name = nullptr;
    const char* text = nullptr;
    CUresult rn = CU(cuGetErrorName, static_cast<CUresult>(c), &name);
    CUresult rs = CU(cuGetErrorString, static_cast<CUresult>(c), &text);
    put(fmt("error %d name", c), rn, name ? name : "(null)");
    put(fmt("error %d string", c), rs, text ? fmt("\"%s\"", text) : "(null)");
  }
}

// Attributes whose values depend on the machine (clocks, where the device sits).
bool machine_attribute(int a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      return true;
    default:
      return false;
  }
}

void device() {
  int n = -1;
  put("device count", CU(cuDeviceGetCount, &n), fmt("%d", n));
  put("device get 0", CU(cuDeviceGet, &g_dev, 0));
  CUdevice bad = 0;
  put("device get 1", CU(cuDeviceGet, &bad, 1));
  put("device get -1", CU(cuDeviceGet, &bad, -1));
  char name[256] = {};
  if (put("device name", CU(cuDeviceGetName, name, sizeof name, g_dev), "")) {
    // fakecuda names itself; the rest of the name is the real one's.
    std::string s = name;
    size_t at = s.find(" (rgpu fake)");
    if (at != std::string::npos) s.erase(at);
    note("device name text", s);
  }
  size_t total = 0;
  put("device total mem", CU(cuDeviceTotalMem, &total, g_dev), fmt("%zu MiB", total >> 20));
  CUuuid uuid{};
  put("device uuid", CU(cuDeviceGetUuid, &uuid, g_dev), "<masked>");
  char bus[64] = {};
  put("device pci bus id", CU(cuDeviceGetPCIBusId, bus, sizeof bus, g_dev),
      fmt("<masked> length %zu", strlen(bus)));
  put("device pci bus id short buffer", CU(cuDeviceGetPCIBusId, bus, 4, g_dev), fmt("\"%s\"", bus));
  int last = 0;
  for (const auto& e : rgpu::cuda_enum::kCUdevice_attribute) {
    if (enum_name(rgpu::cuda_enum::kCUdevice_attribute, e.value) != e.name) continue;  // an alias
    int v = -12345;
    CUresult r = CU(cuDeviceGetAttribute, &v, static_cast<CUdevice_attribute>(e.value), g_dev);
    put(fmt("attribute %s", e.name), r, machine_attribute(int(e.value)) ? "<masked>" : fmt("%d", v));
    last = std::max(last, int(e.value));
  }
  int v = 0;
  put("attribute 0", CU(cuDeviceGetAttribute, &v, static_cast<CUdevice_attribute>(0), g_dev), fmt("%d", v));
  put(fmt("attribute %d (past MAX)", last + 1),
      CU(cuDeviceGetAttribute, &v, static_cast<CUdevice_attribute>(last + 1), g_dev), fmt("%d", v));
  put("attribute on device 7", CU(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 7), fmt("%d", v));
  int can = -1;
  put("can access peer 0 0", CU(cuDeviceCanAccessPeer, &can, g_dev, g_dev), fmt("%d", can));
  put("p2p attribute 0 0", CU(cuDeviceGetP2PAttribute, &v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, g_dev, g_dev),
      fmt("%d", v));
}

void context() {
  unsigned flags = 99;
  int active = 99;
  put("primary state before retain", CU(cuDevicePrimaryCtxGetState, g_dev, &flags, &active),
      fmt("flags %u active %d", flags, active));
  CUcontext cur = reinterpret_cast<CUcontext>(1);
  put("current before retain", CU(cuCtxGetCurrent, &cur), ptr_class(uint64_t(cur)));
  CUdevice d = 99;
  put("ctx device without context", CU(cuCtxGetDevice, &d), fmt("%d", d));
  put("primary retain", CU(cuDevicePrimaryCtxRetain, &g_ctx, g_dev), ptr_class(uint64_t(g_ctx)));
  put("primary state after retain", CU(cuDevicePrimaryCtxGetState, g_dev, &flags, &active),
      fmt("flags %u active %d", flags, active));
  put("set current", CU(cuCtxSetCurrent, g_ctx));
  put("current", CU(cuCtxGetCurrent, &cur), cur == g_ctx ? "=primary" : "other");
  put("ctx device", CU(cuCtxGetDevice, &d), fmt("%d", d));
  unsigned api = 0;
  put("ctx api version", CU(cuCtxGetApiVersion, g_ctx, &api), fmt("%u", api));
  put("ctx flags", CU(cuCtxGetFlags, &flags), fmt("%#x", flags));
  int lo = 99, hi = 99;
  put("ctx stream priority range", CU(cuCtxGetStreamPriorityRange, &lo, &hi), fmt("least %d greatest %d", lo, hi));
  CUfunc_cache cc{};
  put("ctx cache config", CU(cuCtxGetCacheConfig, &cc), fmt("%d", int(cc)));
  for (const auto& e : rgpu::cuda_enum::kCUlimit) {
    size_t val = 0xdead;
    put(fmt("limit %s", e.name), CU(cuCtxGetLimit, &val, static_cast<CUlimit>(e.value)), fmt("%zu", val));
  }
  size_t val = 0;
  put("limit 99", CU(cuCtxGetLimit, &val, static_cast<CUlimit>(99)), fmt("%zu", val));
  put("set limit stack 4096", CU(cuCtxSetLimit, CU_LIMIT_STACK_SIZE, 4096));
  put("limit stack after set", CU(cuCtxGetLimit, &val, CU_LIMIT_STACK_SIZE), fmt("%zu", val));
  put("set limit printf fifo 2 MiB", CU(cuCtxSetLimit, CU_LIMIT_PRINTF_FIFO_SIZE, 2 << 20));
  put("limit printf fifo after set", CU(cuCtxGetLimit, &val, CU_LIMIT_PRINTF_FIFO_SIZE), fmt("%zu", val));
  put("set limit 99", CU(cuCtxSetLimit, static_cast<CUlimit>(99), 1));
  // The fake's guesses (fakecuda/context.cpp kLimits): query-only and cc 9.0 refusals, the L2
  // fetch hint's range, the persisting L2 size's clamp.
  for (CUlimit l : {CU_LIMIT_SHMEM_SIZE, CU_LIMIT_CIG_ENABLED, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH,
                    CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED}) {
    put(fmt("set limit %d to 0", int(l)), CU(cuCtxSetLimit, l, 0));
    put(fmt("limit %d after set", int(l)), CU(cuCtxGetLimit, &val, l), fmt("%zu", val));
  }
  for (size_t v : {size_t(64), size_t(129), size_t(1000)}) {
    put(fmt("set limit l2 fetch %zu", v), CU(cuCtxSetLimit, CU_LIMIT_MAX_L2_FETCH_GRANULARITY, v));
    put(fmt("limit l2 fetch after set %zu", v), CU(cuCtxGetLimit, &val, CU_LIMIT_MAX_L2_FETCH_GRANULARITY), fmt("%zu", val));
  }
  put("set limit persisting l2 1 TiB", CU(cuCtxSetLimit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE, size_t(1) << 40));
  put("limit persisting l2 after set", CU(cuCtxGetLimit, &val, CU_LIMIT_PERSISTING_L2_CACHE_SIZE), fmt("%zu", val));
  put("set limit persisting l2 0", CU(cuCtxSetLimit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0));
  size_t free_b = 0, total_b = 0;
  put("mem info", CU(cuMemGetInfo, &free_b, &total_b),
      fmt("total %zu MiB, free <= total %d", total_b >> 20, free_b <= total_b));
  CUmemoryPool pool = nullptr;
  put("default mem pool", CU(cuDeviceGetDefaultMemPool, &pool, g_dev), ptr_class(uint64_t(pool)));
  CUmemoryPool pool2 = nullptr;
  put("current mem pool", CU(cuDeviceGetMemPool, &pool2, g_dev), pool2 == pool ? "=default" : "other");
}

// Prints every pointer attribute of p; base/size name the allocation it should fall in.
void pointer_attributes(const char* what, uint64_t p, uint64_t base, size_t size) {
  for (const auto& e : rgpu::cuda_enum::kCUpointer_attribute) {
    alignas(16) unsigned char buf[256];
    memset(buf, 0, sizeof buf);
    CUresult r = CU(cuPointerGetAttribute, buf, static_cast<CUpointer_attribute>(e.value), CUdeviceptr(p));
    uint64_t v = 0;
    memcpy(&v, buf, sizeof v);
    std::string shown;
    switch (e.value) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        shown = v == uint64_t(g_ctx) ? "=primary" : ptr_class(v);
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        shown = v == p ? "=pointer" : ptr_class(v);
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        shown = rel(v, base);
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        shown = v == size ? "=size" : fmt("%" PRIu64, v);
        break;
      case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        shown = "<masked>";
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        shown = ptr_class(v);
        break;
      default:
        shown = fmt("%" PRIu64, v);
    }
    put(fmt("pointer %s %s", what, e.name), r, shown);
  }
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPED};
  unsigned mt = 77;
  int managed = 77, ordinal = 77, mapped = 77;
  void* data[] = {&mt, &managed, &ordinal, &mapped};
  put(fmt("pointer %s attributes (4)", what), CU(cuPointerGetAttributes, 4, attrs, data, CUdeviceptr(p)),
      fmt("type %u managed %d ordinal %d mapped %d", mt, managed, ordinal, mapped));
  CUdeviceptr rb = 0;
  size_t rs = 0;
  put(fmt("pointer %s address range", what), CU(cuMemGetAddressRange, &rb, &rs, CUdeviceptr(p)),
      fmt("base %s size %s", rel(rb, base).c_str(), rs == size ? "=size" : fmt("%zu", rs).c_str()));
}

void memory() {
  CUdeviceptr p = 0;
  const size_t n = 1 << 20;
  put("alloc 1 MiB", CU(cuMemAlloc, &p, n), ptr_class(p));
  CUdeviceptr z = 0;
  put("alloc 0", CU(cuMemAlloc, &z, 0), ptr_class(z));
  CUdeviceptr huge = 0;
  put("alloc 1 PiB", CU(cuMemAlloc, &huge, size_t(1) << 50), ptr_class(huge));
  pointer_attributes("device", p, p, n);
  pointer_attributes("device+100", p + 100, p, n);
  std::vector<uint32_t> host(n / 4), back(n / 4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint32_t(i * 2654435761u);
  put("htod 1 MiB", CU(cuMemcpyHtoD, p, host.data(), n));
  put("dtoh 1 MiB", CU(cuMemcpyDtoH, back.data(), p, n), back == host ? "equal" : "DIFFERENT");
  put("htod past end", CU(cuMemcpyHtoD, p + n - 4, host.data(), 8));
  put("memset d32", CU(cuMemsetD32, p, 0x01020304u, n / 4));
  put("dtoh after memset", CU(cuMemcpyDtoH, back.data(), p, 8), fmt("%#x %#x", back[0], back[1]));
  put("memset d32 unaligned", CU(cuMemsetD32, p + 1, 0, 4));

  void* pinned = nullptr;
  put("host alloc 64 KiB", CU(cuMemHostAlloc, &pinned, 65536, CU_MEMHOSTALLOC_DEVICEMAP), ptr_class(uint64_t(pinned)));
  unsigned hf = 0;
  put("host get flags", CU(cuMemHostGetFlags, &hf, pinned), fmt("%#x", hf));
  CUdeviceptr dp = 0;
  put("host get device pointer", CU(cuMemHostGetDevicePointer, &dp, pinned, 0),
      dp == uint64_t(pinned) ? "=host pointer" : ptr_class(dp));
  pointer_attributes("pinned", uint64_t(pinned), uint64_t(pinned), 65536);
  std::vector<char> pageable(4096);
  pointer_attributes("pageable", uint64_t(pageable.data()), uint64_t(pageable.data()), 4096);
  put("host get flags pageable", CU(cuMemHostGetFlags, &hf, pageable.data()), fmt("%#x", hf));
  pointer_attributes("null", 0, 0, 0);

  CUdeviceptr m = 0;
  put("alloc managed 64 KiB", CU(cuMemAllocManaged, &m, 65536, CU_MEM_ATTACH_GLOBAL), ptr_class(m));
  if (m) pointer_attributes("managed", m, m, 65536);

  put("free interior", CU(cuMemFree, p + 100));
  put("free", CU(cuMemFree, p));
  put("free again", CU(cuMemFree, p));
  put("free 0", CU(cuMemFree, 0));
  put("free bogus", CU(cuMemFree, 0x1000));
  if (m) put("free managed", CU(cuMemFree, m));
  put("free host", CU(cuMemFreeHost, pinned));
}

void streams_and_events(CUfunction spin) {
  CUstream s = nullptr, nb = nullptr, pr = nullptr;
  put("stream create", CU(cuStreamCreate, &s, 0), ptr_class(uint64_t(s)));
  put("stream create non-blocking", CU(cuStreamCreate, &nb, CU_STREAM_NON_BLOCKING));
  put("stream create bad flags", CU(cuStreamCreate, &pr, 0x80));
  put("stream create priority -9", CU(cuStreamCreateWithPriority, &pr, 0, -9));
  unsigned f = 99;
  int prio = 99;
  put("stream flags", CU(cuStreamGetFlags, s, &f), fmt("%u", f));
  put("stream flags non-blocking", CU(cuStreamGetFlags, nb, &f), fmt("%u", f));
  put("stream flags legacy", CU(cuStreamGetFlags, CU_STREAM_LEGACY, &f), fmt("%u", f));
  put("stream priority", CU(cuStreamGetPriority, s, &prio), fmt("%d", prio));
  if (pr) put("stream priority clamped", CU(cuStreamGetPriority, pr, &prio), fmt("%d", prio));
  CUcontext sc = nullptr;
  put("stream ctx", CU(cuStreamGetCtx, s, &sc), sc == g_ctx ? "=primary" : ptr_class(uint64_t(sc)));
  put("stream query idle", CU(cuStreamQuery, s));
  put("stream query legacy idle", CU(cuStreamQuery, nullptr));

  CUevent e = nullptr, e2 = nullptr, nt = nullptr;
  put("event create", CU(cuEventCreate, &e, CU_EVENT_DEFAULT));
  put("event create 2", CU(cuEventCreate, &e2, CU_EVENT_DEFAULT));
  put("event create disable timing", CU(cuEventCreate, &nt, CU_EVENT_DISABLE_TIMING));
  CUevent bad = nullptr;
  put("event create bad flags", CU(cuEventCreate, &bad, 0x100));
  put("event query unrecorded", CU(cuEventQuery, e));
  put("event synchronize unrecorded", CU(cuEventSynchronize, e));
  float ms = -1;
  put("elapsed unrecorded", CU(cuEventElapsedTime, &ms, e, e2));
  put("record", CU(cuEventRecord, e, s));
  if (spin) {
    long long wait_ms = 300;
    void* args[] = {&wait_ms};
    put("launch spin 300 ms", CU(cuLaunchKernel, spin, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
    put("stream query busy", CU(cuStreamQuery, s));
  }
  put("record 2", CU(cuEventRecord, e2, s));
  put("record disable timing", CU(cuEventRecord, nt, s));
  if (spin) put("event query busy", CU(cuEventQuery, e2));
  put("stream wait event", CU(cuStreamWaitEvent, nb, e2, 0));
  put("stream synchronize", CU(cuStreamSynchronize, nb));
  put("stream synchronize busy one", CU(cuStreamSynchronize, s));
  put("stream query done", CU(cuStreamQuery, s));
  put("event query done", CU(cuEventQuery, e2));
  put("elapsed", CU(cuEventElapsedTime, &ms, e, e2), spin ? fmt("positive %d", ms > 0) : "");
  put("elapsed disable timing", CU(cuEventElapsedTime, &ms, e, nt));
  put("stream wait event flags 7", CU(cuStreamWaitEvent, nb, e2, 7));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  put("is capturing", CU(cuStreamIsCapturing, s, &st), enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  put("is capturing legacy", CU(cuStreamIsCapturing, nullptr, &st),
      enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  for (CUevent ev : {e, e2, nt}) put("event destroy", CU(cuEventDestroy, ev));
  put("stream destroy", CU(cuStreamDestroy, s));
  put("stream destroy non-blocking", CU(cuStreamDestroy, nb));
  if (pr) put("stream destroy priority", CU(cuStreamDestroy, pr));
}

struct Kernels {
  CUmodule mod = nullptr;
  CUfunction fill = nullptr, spin = nullptr, empty = nullptr, vec_add = nullptr;
};

void functions(const std::vector<char>& image, Kernels* k) {
  if (image.empty()) {
    note("module", "no image given");
    return;
  }
  put("module load", CU(cuModuleLoadData, &k->mod, image.data()));
  std::vector<char> junk(256, 'x');
  CUmodule jm = nullptr;
  put("module load junk", CU(cuModuleLoadData, &jm, junk.data()));
  if (!k->mod) return;
  const char* names[] = {"rgpu_fill_u32", "rgpu_spin", "rgpu_empty", "rgpu_vec_add", "rgpu_affine"};
  CUfunction* slots[] = {&k->fill, &k->spin, &k->empty, &k->vec_add, nullptr};
  CUfunction affine = nullptr;
  for (int i = 0; i < 5; ++i) {
    CUfunction fn = nullptr;
    if (!put(fmt("function %s", names[i]), CU(cuModuleGetFunction, &fn, k->mod, names[i]))) continue;
    if (slots[i]) *slots[i] = fn;
    else affine = fn;
    for (const auto& e : rgpu::cuda_enum::kCUfunction_attribute) {
      int v = -1;
      put(fmt("function %s %s", names[i], e.name),
          CU(cuFuncGetAttribute, &v, static_cast<CUfunction_attribute>(e.value), fn), fmt("%d", v));
    }
    const char* fname = nullptr;
    put(fmt("function %s name", names[i]), CU(cuFuncGetName, &fname, fn), fname ? fname : "(null)");
    for (size_t p = 0; p < 5; ++p) {
      size_t off = 99, sz = 99;
      CUresult r = CU(cuFuncGetParamInfo, fn, p, &off, &sz);
      put(fmt("function %s param %zu", names[i], p), r, fmt("offset %zu size %zu", off, sz));
      if (r != CUDA_SUCCESS) break;
    }
  }
  CUfunction missing = nullptr;
  put("function missing", CU(cuModuleGetFunction, &missing, k->mod, "no_such_kernel"));
  CUdeviceptr g = 0;
  size_t gs = 0;
  put("global rgpu_global_counter", CU(cuModuleGetGlobal, &g, &gs, k->mod, "rgpu_global_counter"),
      fmt("%s size %zu", ptr_class(g).c_str(), gs));
  put("global missing", CU(cuModuleGetGlobal, &g, &gs, k->mod, "no_such_global"));
  if (k->fill) {
    int v = 0;
    put("func set max dynamic shared 100 KiB",
        CU(cuFuncSetAttribute, k->fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10));
    put("func max dynamic shared after set",
        CU(cuFuncGetAttribute, &v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k->fill), fmt("%d", v));
    put("func set max dynamic shared 300 KiB",
        CU(cuFuncSetAttribute, k->fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 300 << 10));
    put("func set max threads (read-only)", CU(cuFuncSetAttribute, k->fill, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 64));
    put("func set max dynamic shared 0",
        CU(cuFuncSetAttribute, k->fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0));
    for (int bs : {32, 128, 256, 512, 1024, 1025}) {
      int blocks = -1;
      put(fmt("occupancy fill block %d", bs), CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &blocks, k->fill, bs, 0),
          fmt("%d", blocks));
    }
    int blocks = -1;
    put("occupancy fill block 256 smem 100 KiB",
        CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &blocks, k->fill, 256, 100 << 10), fmt("%d", blocks));
    int min_grid = -1, block = -1;
    put("potential block size fill", CU(cuOccupancyMaxPotentialBlockSize, &min_grid, &block, k->fill, nullptr, 0, 0),
        fmt("min grid %d block %d", min_grid, block));
  }
  (void)affine;
  CUlibrary lib = nullptr;
  if (put("library load", CU(cuLibraryLoadData, &lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0))) {
    CUkernel kern = nullptr;
    if (put("library kernel rgpu_fill_u32", CU(cuLibraryGetKernel, &kern, lib, "rgpu_fill_u32"))) {
      for (const auto& e : rgpu::cuda_enum::kCUfunction_attribute) {
        int v = -1;
        put(fmt("kernel rgpu_fill_u32 %s", e.name),
            CU(cuKernelGetAttribute, &v, static_cast<CUfunction_attribute>(e.value), kern, g_dev), fmt("%d", v));
      }
    }
    CUkernel none = nullptr;
    put("library kernel missing", CU(cuLibraryGetKernel, &none, lib, "no_such_kernel"));
    put("library unload", CU(cuLibraryUnload, lib));
  }
}

// Fills n words of p with value through kernel f launched by launch; checks the result.
std::string check_fill(CUdeviceptr p, size_t n, unsigned value) {
  std::vector<unsigned> v(n);
  if (CU(cuCtxSynchronize) != CUDA_SUCCESS) return "sync failed";
  if (CU(cuMemcpyDtoH, v.data(), p, n * 4) != CUDA_SUCCESS) return "copy failed";
  for (size_t i = 0; i < n; ++i)
    if (v[i] != value) return fmt("word %zu is %#x", i, v[i]);
  return "filled";
}

void launches(const Kernels& k) {
  if (!k.fill) return;
  const size_t n = 1 << 16;
  CUdeviceptr p = 0;
  CU(cuMemAlloc, &p, n * 4);
  unsigned value = 0x5a5a0001;
  unsigned long long count = n;
  void* args[] = {&p, &value, &count};
  put("launch fill", CU(cuLaunchKernel, k.fill, 64, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr),
      check_fill(p, n, value));
  put("launch block 1025", CU(cuLaunchKernel, k.fill, 1, 1, 1, 1025, 1, 1, 0, nullptr, args, nullptr));
  put("launch block 1024x2", CU(cuLaunchKernel, k.fill, 1, 1, 1, 1024, 2, 1, 0, nullptr, args, nullptr));
  put("launch block z 65", CU(cuLaunchKernel, k.fill, 1, 1, 1, 1, 1, 65, 0, nullptr, args, nullptr));
  put("launch grid 0", CU(cuLaunchKernel, k.fill, 0, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  put("launch grid y 65536", CU(cuLaunchKernel, k.fill, 1, 65536, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  put("launch shared 48 KiB + 1", CU(cuLaunchKernel, k.fill, 1, 1, 1, 32, 1, 1, (48 << 10) + 1, nullptr, args, nullptr));
  put("launch no args", CU(cuLaunchKernel, k.fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  put("launch NULL function", CU(cuLaunchKernel, nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  CU(cuCtxSynchronize);

  // Cooperative: every block resident at once. The largest grid is blocks per SM x SMs.
  int per_sm = 0, sms = 0;
  CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, k.fill, 256, 0);
  CU(cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev);
  unsigned most = unsigned(per_sm * sms);
  value = 0x5a5a0002;
  put("cooperative launch 132 blocks", CU(cuLaunchCooperativeKernel, k.fill, 132, 1, 1, 256, 1, 1, 0, nullptr, args),
      check_fill(p, n, value));
  value = 0x5a5a0003;
  put("cooperative launch the most co-resident blocks",
      CU(cuLaunchCooperativeKernel, k.fill, most, 1, 1, 256, 1, 1, 0, nullptr, args), check_fill(p, n, value));
  put("cooperative launch one block too many",
      CU(cuLaunchCooperativeKernel, k.fill, most + 1, 1, 1, 256, 1, 1, 0, nullptr, args));
  put("cooperative launch block 1025", CU(cuLaunchCooperativeKernel, k.fill, 1, 1, 1, 1025, 1, 1, 0, nullptr, args));
  put("cooperative launch shared too large",
      CU(cuLaunchCooperativeKernel, k.fill, 1, 1, 1, 32, 1, 1, 300 << 10, nullptr, args));
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = 132;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  value = 0x5a5a0004;
  put("launch ex cooperative", CU(cuLaunchKernelEx, &cfg, k.fill, args, nullptr), check_fill(p, n, value));
  cfg.gridDimX = most + 1;
  put("launch ex cooperative one block too many", CU(cuLaunchKernelEx, &cfg, k.fill, args, nullptr));
  CU(cuCtxSynchronize);
  CU(cuMemFree, p);
}

void vmm() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  size_t gmin = 0, grec = 0;
  put("vmm granularity minimum", CU(cuMemGetAllocationGranularity, &gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      fmt("%zu", gmin));
  put("vmm granularity recommended",
      CU(cuMemGetAllocationGranularity, &grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), fmt("%zu", grec));
  CUmemAllocationProp bad = prop;
  bad.location.id = 7;
  size_t gb = 0;
  put("vmm granularity device 7", CU(cuMemGetAllocationGranularity, &gb, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      fmt("%zu", gb));
  bad = prop;
  bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  put("vmm granularity invalid type", CU(cuMemGetAllocationGranularity, &gb, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      fmt("%zu", gb));
  put("vmm granularity option 5", CU(cuMemGetAllocationGranularity, &gb, &prop, CUmemAllocationGranularity_flags(5)),
      fmt("%zu", gb));
  const size_t g = gmin ? gmin : (2 << 20);

  CUdeviceptr va = 0;
  put("vmm reserve 4 granules", CU(cuMemAddressReserve, &va, 4 * g, 0, 0, 0), ptr_class(va));
  CUdeviceptr va2 = 0;
  put("vmm reserve unaligned size", CU(cuMemAddressReserve, &va2, g + 1, 0, 0, 0), ptr_class(va2));
  if (va2) CU(cuMemAddressFree, va2, g + 1);
  va2 = 0;
  put("vmm reserve size 0", CU(cuMemAddressReserve, &va2, 0, 0, 0, 0), ptr_class(va2));
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  put("vmm create 1 granule", CU(cuMemCreate, &h, g, &prop, 0), h ? "nonnull" : "null");
  put("vmm create unaligned size", CU(cuMemCreate, &h2, g + 1, &prop, 0));
  put("vmm create flags 1", CU(cuMemCreate, &h2, g, &prop, 1));
  put("vmm create size 0", CU(cuMemCreate, &h2, 0, &prop, 0));
  CUmemAllocationProp got{};
  put("vmm properties from handle", CU(cuMemGetAllocationPropertiesFromHandle, &got, h),
      fmt("type %d location %d/%d handle types %d", int(got.type), int(got.location.type), got.location.id,
          int(got.requestedHandleTypes)));
  put("vmm map before access", CU(cuMemMap, va, g, 0, h, 0));
  put("vmm map again", CU(cuMemMap, va, g, 0, h, 0));
  put("vmm map unaligned offset", CU(cuMemMap, va + g, g, 1, h, 0));
  put("vmm map outside reservation", CU(cuMemMap, va + 8 * g, g, 0, h, 0));
  put("vmm map size 0", CU(cuMemMap, va + g, 0, 0, h, 0));
  unsigned long long flags = 99;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, g_dev};
  put("vmm access before set", CU(cuMemGetAccess, &flags, &loc, va), fmt("%llu", flags));
  uint32_t word = 0;
  put("vmm dtoh before set access", CU(cuMemcpyDtoH, &word, va, 4));
  CUmemAccessDesc acc{};
  acc.location = loc;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  put("vmm set access", CU(cuMemSetAccess, va, g, &acc, 1));
  put("vmm access after set", CU(cuMemGetAccess, &flags, &loc, va), fmt("%llu", flags));
  put("vmm set access unmapped range", CU(cuMemSetAccess, va + g, g, &acc, 1));
  std::vector<uint32_t> data(g / 4), back(g / 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint32_t(i ^ 0xabcdef);
  put("vmm htod", CU(cuMemcpyHtoD, va, data.data(), g));
  put("vmm dtoh", CU(cuMemcpyDtoH, back.data(), va, g), back == data ? "equal" : "DIFFERENT");
  put("vmm memset", CU(cuMemsetD32, va, 7, g / 4));
  put("vmm dtoh after memset", CU(cuMemcpyDtoH, &word, va + g - 4, 4), fmt("%u", word));
  pointer_attributes("vmm", va, va, g);
  CUmemGenericAllocationHandle rh = 0;
  put("vmm retain handle", CU(cuMemRetainAllocationHandle, &rh, reinterpret_cast<void*>(va + 64)),
      rh == h ? "=handle" : (rh ? "other" : "null"));
  if (rh) put("vmm release retained", CU(cuMemRelease, rh));
  int fd = -1;
  put("vmm export fd without requested type",
      CU(cuMemExportToShareableHandle, &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (fd >= 0) close(fd);
  CUmemAllocationProp sprop = prop;
  sprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle hs = 0, hi = 0;
  put("vmm create shareable", CU(cuMemCreate, &hs, g, &sprop, 0));
  fd = -1;
  put("vmm export fd", CU(cuMemExportToShareableHandle, &fd, hs, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      fd >= 0 ? "fd" : "no fd");
  if (fd >= 0) {
    put("vmm import fd", CU(cuMemImportFromShareableHandle, &hi, reinterpret_cast<void*>(intptr_t(fd)),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        hi ? "nonnull" : "null");
    if (hi) put("vmm release imported", CU(cuMemRelease, hi));
    close(fd);
  }
  put("vmm export fabric", CU(cuMemExportToShareableHandle, &fd, hs, CU_MEM_HANDLE_TYPE_FABRIC, 0));
  if (hs) put("vmm release shareable", CU(cuMemRelease, hs));
  put("vmm release while mapped", CU(cuMemRelease, h));
  put("vmm dtoh after release while mapped", CU(cuMemcpyDtoH, &word, va, 4), fmt("%u", word));
  put("vmm unmap part", CU(cuMemUnmap, va, g / 2));
  put("vmm unmap", CU(cuMemUnmap, va, g));
  put("vmm unmap again", CU(cuMemUnmap, va, g));
  put("vmm dtoh after unmap", CU(cuMemcpyDtoH, &word, va, 4));
  put("vmm free part", CU(cuMemAddressFree, va + g, g));
  put("vmm free", CU(cuMemAddressFree, va, 4 * g));
  put("vmm free again", CU(cuMemAddressFree, va, 4 * g));
  put("vmm release again", CU(cuMemRelease, h));
}

void graphs(const Kernels& k) {
  CUstream s = nullptr;
  CU(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  CUdeviceptr p = 0;
  CU(cuMemAlloc, &p, 4096);

  // Capture into the caller's graph, ended with a NULL graph out.
  CUgraph g = nullptr;
  put("graph create", CU(cuGraphCreate, &g, 0));
  put("capture to graph begin", CU(cuStreamBeginCaptureToGraph, s, g, nullptr, nullptr, 0,
                                   CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  put("capture to graph status", CU(cuStreamIsCapturing, s, &st), enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  put("capture to graph memset", CU(cuMemsetD8Async, p, 1, 4096, s));
  put("capture to graph end NULL", CU(cuStreamEndCapture, s, nullptr));
  put("capture to graph status after end", CU(cuStreamIsCapturing, s, &st),
      enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  if (st != CU_STREAM_CAPTURE_STATUS_NONE) {
    CUgraph out = nullptr;
    put("capture to graph end (cleanup)", CU(cuStreamEndCapture, s, &out), out == g ? "=graph" : ptr_class(uint64_t(out)));
  }
  size_t nodes = 0;
  put("capture to graph nodes", CU(cuGraphGetNodes, g, nullptr, &nodes), fmt("%zu", nodes));
  CU(cuGraphDestroy, g);

  g = nullptr;
  CU(cuGraphCreate, &g, 0);
  put("capture to graph begin 2", CU(cuStreamBeginCaptureToGraph, s, g, nullptr, nullptr, 0,
                                     CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async, p, 2, 4096, s);
  CUgraph out = nullptr;
  put("capture to graph end with out", CU(cuStreamEndCapture, s, &out), out == g ? "=graph" : ptr_class(uint64_t(out)));
  nodes = 0;
  put("capture to graph 2 nodes", CU(cuGraphGetNodes, g, nullptr, &nodes), fmt("%zu", nodes));
  CU(cuGraphDestroy, g);

  // Plain capture; ended with a NULL graph out.
  put("capture begin", CU(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async, p, 3, 4096, s);
  put("capture end NULL", CU(cuStreamEndCapture, s, nullptr));
  put("capture status after end NULL", CU(cuStreamIsCapturing, s, &st),
      enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  if (st != CU_STREAM_CAPTURE_STATUS_NONE) {
    out = nullptr;
    put("capture end (cleanup)", CU(cuStreamEndCapture, s, &out));
    if (out) CU(cuGraphDestroy, out);
  }
  put("capture end not capturing", CU(cuStreamEndCapture, s, &out));
  // A synchronize inside a capture invalidates it.
  put("capture begin 3", CU(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async, p, 3, 4096, s);
  put("capture stream synchronize", CU(cuStreamSynchronize, s));
  put("capture status after synchronize", CU(cuStreamIsCapturing, s, &st),
      enum_name(rgpu::cuda_enum::kCUstreamCaptureStatus, st));
  out = nullptr;
  put("capture end invalidated", CU(cuStreamEndCapture, s, &out), ptr_class(uint64_t(out)));
  if (out) CU(cuGraphDestroy, out);
  put("capture legacy stream", CU(cuStreamBeginCapture, nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));

  // A graph that allocates (and does not free) memory: launching it again while the memory is
  // live, then after freeing it outside the graph.
  g = nullptr;
  CU(cuGraphCreate, &g, 0);
  CUDA_MEM_ALLOC_NODE_PARAMS ap{};
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.poolProps.location.id = g_dev;
  ap.bytesize = 1 << 20;
  CUgraphNode an = nullptr, mn = nullptr;
  put("alloc node add", CU(cuGraphAddMemAllocNode, &an, g, nullptr, 0, &ap), ptr_class(ap.dptr));
  CUDA_MEMSET_NODE_PARAMS ms{};
  ms.dst = ap.dptr;
  ms.pitch = 0;
  ms.value = 9;
  ms.elementSize = 1;
  ms.width = 1 << 20;
  ms.height = 1;
  put("alloc node memset add", CU(cuGraphAddMemsetNode, &mn, g, &an, 1, &ms, g_ctx));
  CUgraphExec ex = nullptr;
  put("alloc graph instantiate", CU(cuGraphInstantiate, &ex, g, 0));
  put("alloc graph launch 1", CU(cuGraphLaunch, ex, s));
  put("alloc graph sync 1", CU(cuStreamSynchronize, s));
  put("alloc graph launch while allocated", CU(cuGraphLaunch, ex, s));
  put("alloc graph sync 2", CU(cuStreamSynchronize, s));
  unsigned char b = 0;
  put("alloc graph memory readable", CU(cuMemcpyDtoH, &b, ap.dptr, 1), fmt("%u", b));
  put("alloc graph free outside (cuMemFree)", CU(cuMemFree, ap.dptr));
  put("alloc graph launch after free", CU(cuGraphLaunch, ex, s));
  put("alloc graph sync 3", CU(cuStreamSynchronize, s));
  put("alloc graph free outside (cuMemFreeAsync)", CU(cuMemFreeAsync, ap.dptr, s));
  put("alloc graph sync 4", CU(cuStreamSynchronize, s));
  put("alloc graph launch after async free", CU(cuGraphLaunch, ex, s));
  put("alloc graph sync 5", CU(cuStreamSynchronize, s));
  CU(cuMemFreeAsync, ap.dptr, s);
  CU(cuStreamSynchronize, s);
  put("alloc graph exec destroy", CU(cuGraphExecDestroy, ex));
  put("alloc graph destroy", CU(cuGraphDestroy, g));
  (void)k;
  CU(cuMemFree, p);
  CU(cuStreamDestroy, s);
}

// cuMemFreeAsync (and others) from a thread with no current context.
void no_context_thread() {
  CUstream s = nullptr;
  CU(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  CUdeviceptr p = 0, q = 0;
  put("async alloc", CU(cuMemAllocAsync, &p, 1 << 20, s), ptr_class(p));
  put("async alloc 2", CU(cuMemAllocAsync, &q, 1 << 20, s), ptr_class(q));
  put("async alloc sync", CU(cuStreamSynchronize, s));
  pointer_attributes("async", p, p, 1 << 20);
  std::thread t([&] {
    CUcontext c = reinterpret_cast<CUcontext>(1);
    put("thread current", CU(cuCtxGetCurrent, &c), ptr_class(uint64_t(c)));
    put("thread free async on stream", CU(cuMemFreeAsync, p, s));
    put("thread free async on legacy stream", CU(cuMemFreeAsync, q, nullptr));
    put("thread stream synchronize", CU(cuStreamSynchronize, s));
    put("thread stream query", CU(cuStreamQuery, s));
    CUdeviceptr r = 0;
    put("thread alloc async on stream", CU(cuMemAllocAsync, &r, 4096, s), ptr_class(r));
    if (r) put("thread free async of it", CU(cuMemFreeAsync, r, s));
    CUdeviceptr a = 0;
    put("thread mem alloc", CU(cuMemAlloc, &a, 4096));
    put("thread ctx synchronize", CU(cuCtxSynchronize));
  });
  t.join();
  put("after thread stream synchronize", CU(cuStreamSynchronize, s));
  put("free async of q after thread", CU(cuMemFreeAsync, q, s));
  put("after thread stream synchronize 2", CU(cuStreamSynchronize, s));
  CU(cuStreamDestroy, s);
}

// ---------- NVML ----------
void nvml() {
  for (const auto& e : rgpu::nvml_enum::knvmlReturn_t) {
    const char* s = p_nvmlErrorString ? p_nvmlErrorString(static_cast<nvmlReturn_t>(e.value)) : nullptr;
    note(fmt("nvml error %d string", int(e.value)), p_nvmlErrorString ? (s ? fmt("\"%s\"", s) : "(null)") : "absent");
  }
  nvmlDevice_t dev = nullptr;
  put_nv("nvml handle before init", NV(nvmlDeviceGetHandleByIndex_v2, 0, &dev));
  put_nv("nvml init", NV(nvmlInit_v2));
  char buf[256];
  buf[0] = 0;
  put_nv("nvml driver version", NV(nvmlSystemGetDriverVersion, buf, sizeof buf), "<masked>");
  put_nv("nvml driver version short buffer", NV(nvmlSystemGetDriverVersion, buf, 2));
  put_nv("nvml nvml version", NV(nvmlSystemGetNVMLVersion, buf, sizeof buf), "<masked>");
  int cv = 0;
  put_nv("nvml cuda driver version", NV(nvmlSystemGetCudaDriverVersion, &cv), fmt("%d", cv));
  put_nv("nvml cuda driver version v2", NV(nvmlSystemGetCudaDriverVersion_v2, &cv), fmt("%d", cv));
  unsigned n = 0;
  put_nv("nvml device count", NV(nvmlDeviceGetCount_v2, &n), fmt("%u", n));
  put_nv("nvml handle 0", NV(nvmlDeviceGetHandleByIndex_v2, 0, &dev), ptr_class(uint64_t(dev)));
  nvmlDevice_t other = nullptr;
  put_nv("nvml handle 1", NV(nvmlDeviceGetHandleByIndex_v2, 1, &other));
  if (!dev) return;
  unsigned u = 0;
  put_nv("nvml index", NV(nvmlDeviceGetIndex, dev, &u), fmt("%u", u));
  put_nv("nvml minor", NV(nvmlDeviceGetMinorNumber, dev, &u), "<masked>");
  if (put_nv("nvml name", NV(nvmlDeviceGetName, dev, buf, sizeof buf))) {
    std::string s = buf;
    size_t at = s.find(" (rgpu fake)");
    if (at != std::string::npos) s.erase(at);
    note("nvml name text", s);
  }
  char uuid[96] = {};
  put_nv("nvml uuid", NV(nvmlDeviceGetUUID, dev, uuid, sizeof uuid), fmt("<masked> length %zu", strlen(uuid)));
  put_nv("nvml handle by uuid", NV(nvmlDeviceGetHandleByUUID, uuid, &other), other == dev ? "=device" : "other");
  put_nv("nvml handle by bad uuid", NV(nvmlDeviceGetHandleByUUID, "GPU-nope", &other));
  nvmlPciInfo_t pci{};
  put_nv("nvml pci info", NV(nvmlDeviceGetPciInfo_v3, dev, &pci),
         fmt("device id %#x subsystem %#x", pci.pciDeviceId, pci.pciSubSystemId));
  put_nv("nvml handle by pci bus id", NV(nvmlDeviceGetHandleByPciBusId_v2, pci.busId, &other),
         other == dev ? "=device" : "other");
  put_nv("nvml handle by bad pci bus id", NV(nvmlDeviceGetHandleByPciBusId_v2, "0000:ff:1f.7", &other));
  nvmlBrandType_t brand{};
  put_nv("nvml brand", NV(nvmlDeviceGetBrand, dev, &brand), fmt("%d", int(brand)));
  nvmlDeviceArchitecture_t arch{};
  put_nv("nvml architecture", NV(nvmlDeviceGetArchitecture, dev, &arch), fmt("%u", unsigned(arch)));
  int major = 0, minor = 0;
  put_nv("nvml compute capability", NV(nvmlDeviceGetCudaComputeCapability, dev, &major, &minor),
         fmt("%d.%d", major, minor));
  nvmlMemory_t mem{};
  put_nv("nvml memory", NV(nvmlDeviceGetMemoryInfo, dev, &mem), fmt("total %llu MiB", mem.total >> 20));
  nvmlMemory_v2_t mem2{};
  mem2.version = nvmlMemory_v2;
  put_nv("nvml memory v2", NV(nvmlDeviceGetMemoryInfo_v2, dev, &mem2), fmt("total %llu MiB", mem2.total >> 20));
  nvmlBAR1Memory_t bar1{};
  put_nv("nvml bar1", NV(nvmlDeviceGetBAR1MemoryInfo, dev, &bar1), fmt("total %llu MiB", bar1.bar1Total >> 20));
  // NCCL's topology search.
  for (int idx = 0; idx <= NVML_P2P_CAPS_INDEX_UNKNOWN; ++idx) {
    nvmlGpuP2PStatus_t p2p{};
    const char* cname = rgpu::nvml_enum::enum_name(rgpu::nvml_enum::knvmlGpuP2PCapsIndex_t, idx);
    put_nv(fmt("nvml p2p status self %s", cname ? cname : "?"),
           NV(nvmlDeviceGetP2PStatus, dev, dev, static_cast<nvmlGpuP2PCapsIndex_t>(idx), &p2p),
           rgpu::nvml_enum::enum_name(rgpu::nvml_enum::knvmlGpuP2PStatus_t, p2p)
               ?: fmt("%d", int(p2p)).c_str());
  }
  nvmlGpuTopologyLevel_t level{};
  put_nv("nvml topology common ancestor self", NV(nvmlDeviceGetTopologyCommonAncestor, dev, dev, &level),
         fmt("%d", int(level)));
  put_nv("nvml curr pcie link generation", NV(nvmlDeviceGetCurrPcieLinkGeneration, dev, &u), fmt("%u", u));
  put_nv("nvml max pcie link generation", NV(nvmlDeviceGetMaxPcieLinkGeneration, dev, &u), fmt("%u", u));
  put_nv("nvml gpu max pcie link generation", NV(nvmlDeviceGetGpuMaxPcieLinkGeneration, dev, &u), fmt("%u", u));
  put_nv("nvml curr pcie link width", NV(nvmlDeviceGetCurrPcieLinkWidth, dev, &u), fmt("%u", u));
  put_nv("nvml max pcie link width", NV(nvmlDeviceGetMaxPcieLinkWidth, dev, &u), fmt("%u", u));
  put_nv("nvml pcie speed", NV(nvmlDeviceGetPcieSpeed, dev, &u), fmt("%u", u));
  nvmlGpuFabricInfo_t fab{};
  put_nv("nvml fabric info", NV(nvmlDeviceGetGpuFabricInfo, dev, &fab),
         fmt("state %u status %s clique %u", unsigned(fab.state), nvml_name(fab.status).c_str(), fab.cliqueId));
  nvmlGpuFabricInfoV_t fabv{};
  fabv.version = nvmlGpuFabricInfo_v2;
  put_nv("nvml fabric info v", NV(nvmlDeviceGetGpuFabricInfoV, dev, &fabv),
         fmt("state %u status %s clique %u health mask %#x", unsigned(fabv.state), nvml_name(fabv.status).c_str(),
             fabv.cliqueId, fabv.healthMask));
  fabv = {};
  fabv.version = 12345;
  put_nv("nvml fabric info v bad version", NV(nvmlDeviceGetGpuFabricInfoV, dev, &fabv));
  for (unsigned link = 0; link < 2; ++link) {
    nvmlEnableState_t es{};
    put_nv(fmt("nvml nvlink %u state", link), NV(nvmlDeviceGetNvLinkState, dev, link, &es), fmt("%d", int(es)));
    put_nv(fmt("nvml nvlink %u version", link), NV(nvmlDeviceGetNvLinkVersion, dev, link, &u), fmt("%u", u));
    put_nv(fmt("nvml nvlink %u capability p2p", link),
           NV(nvmlDeviceGetNvLinkCapability, dev, link, NVML_NVLINK_CAP_P2P_SUPPORTED, &u), fmt("%u", u));
    nvmlPciInfo_t rp{};
    put_nv(fmt("nvml nvlink %u remote pci", link), NV(nvmlDeviceGetNvLinkRemotePciInfo_v2, dev, link, &rp),
           "<masked>");
    nvmlIntNvLinkDeviceType_t rt{};
    put_nv(fmt("nvml nvlink %u remote type", link), NV(nvmlDeviceGetNvLinkRemoteDeviceType, dev, link, &rt),
           fmt("%d", int(rt)));
  }
  unsigned long aff[4] = {};
  put_nv("nvml cpu affinity", NV(nvmlDeviceGetCpuAffinity, dev, 4, aff), aff[0] ? "nonzero" : "zero");
  put_nv("nvml numa node", NV(nvmlDeviceGetNumaNodeId, dev, &u), "<masked>");
  nvmlComputeMode_t cm{};
  put_nv("nvml compute mode", NV(nvmlDeviceGetComputeMode, dev, &cm), fmt("%d", int(cm)));
  nvmlEnableState_t es{}, pend{};
  put_nv("nvml persistence mode", NV(nvmlDeviceGetPersistenceMode, dev, &es), "<masked>");
  unsigned cur = 0, pending = 0;
  put_nv("nvml mig mode", NV(nvmlDeviceGetMigMode, dev, &cur, &pending), fmt("%u %u", cur, pending));
  put_nv("nvml ecc mode", NV(nvmlDeviceGetEccMode, dev, &es, &pend), fmt("%d %d", int(es), int(pend)));
  put_nv("nvml display mode", NV(nvmlDeviceGetDisplayMode, dev, &es), fmt("%d", int(es)));
  put_nv("nvml display active", NV(nvmlDeviceGetDisplayActive, dev, &es), fmt("%d", int(es)));
  nvmlPstates_t ps{};
  put_nv("nvml performance state", NV(nvmlDeviceGetPerformanceState, dev, &ps), "<masked>");
  put_nv("nvml fan speed", NV(nvmlDeviceGetFanSpeed, dev, &u), fmt("%u", u));
  put_nv("nvml temperature", NV(nvmlDeviceGetTemperature, dev, NVML_TEMPERATURE_GPU, &u), "<masked>");
  put_nv("nvml power usage", NV(nvmlDeviceGetPowerUsage, dev, &u), "<masked>");
  put_nv("nvml enforced power limit", NV(nvmlDeviceGetEnforcedPowerLimit, dev, &u), "<masked>");
  put_nv("nvml power management limit", NV(nvmlDeviceGetPowerManagementLimit, dev, &u), "<masked>");
  unsigned long long energy = 0;
  put_nv("nvml total energy", NV(nvmlDeviceGetTotalEnergyConsumption, dev, &energy), "<masked>");
  nvmlUtilization_t ut{};
  put_nv("nvml utilization", NV(nvmlDeviceGetUtilizationRates, dev, &ut), "<masked>");
  for (int c = 0; c < NVML_CLOCK_COUNT; ++c) {
    put_nv(fmt("nvml clock %d", c), NV(nvmlDeviceGetClockInfo, dev, static_cast<nvmlClockType_t>(c), &u), "<masked>");
    put_nv(fmt("nvml max clock %d", c), NV(nvmlDeviceGetMaxClockInfo, dev, static_cast<nvmlClockType_t>(c), &u),
           "<masked>");
  }
  unsigned long long reasons = 0;
  put_nv("nvml clocks event reasons", NV(nvmlDeviceGetCurrentClocksEventReasons, dev, &reasons), "<masked>");
  unsigned count = 0;
  put_nv("nvml compute processes count", NV(nvmlDeviceGetComputeRunningProcesses_v3, dev, &count, nullptr),
         fmt("%u", count));
  count = 0;
  put_nv("nvml graphics processes count", NV(nvmlDeviceGetGraphicsRunningProcesses_v3, dev, &count, nullptr),
         fmt("%u", count));
  // NCCL asks for the NVLink and C2C link counts.
  nvmlFieldValue_t fv[4] = {};
  fv[0].fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
  fv[1].fieldId = NVML_FI_DEV_C2C_LINK_COUNT;
  fv[2].fieldId = NVML_FI_DEV_ECC_CURRENT;
  fv[3].fieldId = 0xfffff;
  if (put_nv("nvml field values", NV(nvmlDeviceGetFieldValues, dev, 4, fv))) {
    for (int i = 0; i < 4; ++i)
      note(fmt("nvml field %u", fv[i].fieldId),
           fmt("%s type %d value %llu", nvml_name(fv[i].nvmlReturn).c_str(), int(fv[i].valueType),
               fv[i].nvmlReturn == NVML_SUCCESS ? fv[i].value.ullVal : 0ull));
  }
  nvmlGpuVirtualizationMode_t vm{};
  put_nv("nvml virtualization mode", NV(nvmlDeviceGetVirtualizationMode, dev, &vm), fmt("%d", int(vm)));
  put_nv("nvml serial", NV(nvmlDeviceGetSerial, dev, buf, sizeof buf), "<masked>");
  put_nv("nvml vbios", NV(nvmlDeviceGetVbiosVersion, dev, buf, sizeof buf), "<masked>");
  put_nv("nvml board part number", NV(nvmlDeviceGetBoardPartNumber, dev, buf, sizeof buf), "<masked>");
  put_nv("nvml inforom image", NV(nvmlDeviceGetInforomImageVersion, dev, buf, sizeof buf), "<masked>");
  nvmlConfComputeSystemState_t ccs{};
  put_nv("nvml conf compute state", NV(nvmlSystemGetConfComputeState, &ccs),
         fmt("env %u cc %u dev tools %u", ccs.environment, ccs.ccFeature, ccs.devToolsMode));
  nvmlMemory_t ccm{};
  put_nv("nvml conf compute mem size", NV(nvmlDeviceGetConfComputeMemSizeInfo, dev, reinterpret_cast<nvmlConfComputeMemSizeInfo_t*>(&ccm)));
  nvmlDeviceAttributes_t da{};
  put_nv("nvml attributes", NV(nvmlDeviceGetAttributes_v2, dev, &da),
         fmt("sms %u", da.multiprocessorCount));
  nvmlEnableState_t retired{};
  put_nv("nvml retired pages pending", NV(nvmlDeviceGetRetiredPagesPendingStatus, dev, &retired), fmt("%d", int(retired)));
  unsigned corr = 0, unc = 0, pend_r = 0, fail = 0;
  put_nv("nvml remapped rows", NV(nvmlDeviceGetRemappedRows, dev, &corr, &unc, &pend_r, &fail),
         fmt("pending %u failure %u", pend_r, fail));
  put_nv("nvml gpu instance id", NV(nvmlDeviceGetGpuInstanceId, dev, &u), fmt("%u", u));
  put_nv("nvml compute instance id", NV(nvmlDeviceGetComputeInstanceId, dev, &u), fmt("%u", u));
  put_nv("nvml is mig device handle", NV(nvmlDeviceIsMigDeviceHandle, dev, &u), fmt("%u", u));
  put_nv("nvml max mig device count", NV(nvmlDeviceGetMaxMigDeviceCount, dev, &u), fmt("%u", u));
  put_nv("nvml shutdown", NV(nvmlShutdown));
  put_nv("nvml shutdown again", NV(nvmlShutdown));
}

// NULL out-pointers, one probe per process (--section null:N): the real driver does not check
// every one and crashes on some (cuGetErrorName's, seen on driver 580), so a crash costs only its
// own line. Returns false past the last probe.
bool null_probe(int n) {
  CUevent a = nullptr, b = nullptr;
  switch (n) {
    case 0: put("null error name out", CU(cuGetErrorName, CUDA_SUCCESS, nullptr)); return true;
    case 1: put("null error string out", CU(cuGetErrorString, CUDA_SUCCESS, nullptr)); return true;
    case 2: put("null attribute out", CU(cuDeviceGetAttribute, nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, g_dev)); return true;
    case 3: put("null alloc out", CU(cuMemAlloc, nullptr, 16)); return true;
    case 4:
      CU(cuEventCreate, &a, 0);
      CU(cuEventCreate, &b, 0);
      CU(cuEventRecord, a, nullptr);
      CU(cuEventRecord, b, nullptr);
      CU(cuEventSynchronize, b);
      put("null elapsed out", CU(cuEventElapsedTime, nullptr, a, b));
      return true;
    case 5: put("null device count out", CU(cuDeviceGetCount, nullptr)); return true;
    case 6: put("null ctx current out", CU(cuCtxGetCurrent, nullptr)); return true;
    case 7: put("null stream create out", CU(cuStreamCreate, nullptr, 0)); return true;
    default: return false;
  }
}

// Quiet set-up for a section run on its own: the primary context current, the test kernels loaded.
void ensure_context() {
  if (g_ctx) return;
  CU(cuDeviceGet, &g_dev, 0);
  CU(cuDevicePrimaryCtxRetain, &g_ctx, g_dev);
  CU(cuCtxSetCurrent, g_ctx);
}
void load_kernels(const std::vector<char>& image, Kernels* k) {
  if (image.empty() || k->mod || CU(cuModuleLoadData, &k->mod, image.data()) != CUDA_SUCCESS) return;
  CU(cuModuleGetFunction, &k->fill, k->mod, "rgpu_fill_u32");
  CU(cuModuleGetFunction, &k->spin, k->mod, "rgpu_spin");
  CU(cuModuleGetFunction, &k->empty, k->mod, "rgpu_empty");
  CU(cuModuleGetFunction, &k->vec_add, k->mod, "rgpu_vec_add");
}

constexpr const char* kSections[] = {"init",     "device", "context", "memory", "functions", "streams",
                                     "launches", "vmm",    "graphs",  "thread", "nvml"};

}  // namespace

int main(int argc, char** argv) {
  const char* cuda = nullptr;
  const char* nvml_lib = nullptr;
  const char* image_path = nullptr;
  std::string section;
  bool usage = false;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage = true;
    else if (!strcmp(argv[i], "--cuda")) cuda = argv[i + 1];
    else if (!strcmp(argv[i], "--nvml")) nvml_lib = argv[i + 1];
    else if (!strcmp(argv[i], "--image")) image_path = argv[i + 1];
    else if (!strcmp(argv[i], "--section")) section = argv[i + 1];
    else usage = true;
  }
  if (usage || (!cuda && !nvml_lib)) {
    fprintf(stderr,
            "usage: %s --cuda LIBCUDA [--nvml LIBNVML] [--image FATBIN] [--section NAME]\n"
            "  prints every answer of the same calls, for diffing against another driver; one\n"
            "  section only with --section (init device context memory functions streams launches\n"
            "  vmm graphs thread nvml, or null:N for the N-th NULL-pointer probe)\n",
            argv[0]);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  alarm(300);  // a hang in the driver under test fails the run instead of stalling it
  auto want = [&](const char* name) { return section.empty() || section == name; };
  bool known = section.empty() || section.rfind("null:", 0) == 0;
  for (const char* n : kSections) known |= section == n;
  if (!known) {
    fprintf(stderr, "rgpu_conformance: no section %s\n", section.c_str());
    return 2;
  }
  std::vector<char> image = image_path ? read_file(image_path) : std::vector<char>();
  if (image_path && image.empty()) {
    fprintf(stderr, "rgpu_conformance: cannot read %s\n", image_path);
    return 2;
  }
  if (cuda && section != "nvml") {
    load_cuda(open_lib(cuda));
    if (want("init")) {
      int v = 0;
      put("driver version before init", CU(cuDriverGetVersion, &v), fmt("%d", v));
      int n = 0;
      put("device count before init", CU(cuDeviceGetCount, &n), fmt("%d", n));
      put("init flags 1", CU(cuInit, 1));
      put("init", CU(cuInit, 0));
      errors();
    } else {
      CU(cuInit, 0);
    }
    if (want("device")) device();
    if (want("context")) context();
    if (section.rfind("null:", 0) == 0) {
      ensure_context();
      if (!null_probe(atoi(section.c_str() + 5))) {
        printf("no such probe\n");
        return 3;
      }
    }
    Kernels k;
    if (want("memory")) ensure_context(), memory();
    if (want("functions")) ensure_context(), functions(image, &k);
    if (want("streams")) ensure_context(), load_kernels(image, &k), streams_and_events(k.spin);
    if (want("launches")) ensure_context(), load_kernels(image, &k), launches(k);
    if (want("vmm")) ensure_context(), vmm();
    if (want("graphs")) ensure_context(), load_kernels(image, &k), graphs(k);
    if (want("thread")) ensure_context(), no_context_thread();
    if (g_ctx) {
      if (k.mod) put("module unload", CU(cuModuleUnload, k.mod));
      put("ctx synchronize at end", CU(cuCtxSynchronize));
      put("primary release", CU(cuDevicePrimaryCtxRelease, g_dev));
    }
  }
  if (nvml_lib && want("nvml")) {
    load_nvml(open_lib(nvml_lib));
    nvml();
  }
  printf("end\n");
  return 0;
}
