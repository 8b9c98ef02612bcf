// Pinned host memory, pointer attributes, and the calls refused because they cannot work across
// a network. Pinned memory is allocated or registered in the client process (page-aligned,
// tracked in client/driver/host_memory.h); the server is not told. What the real driver adds to
// pinned memory is a device mapping (a kernel reading host memory through a pointer): that cannot
// reach the client's memory across the network, so DEVICEMAP memory gets a copy on the server that
// the two ends keep in step at call boundaries (client/mapped_memory.h). Managed memory is mirrored
// the same way, at the address the server's driver picked (mapped::map_managed). IPC is refused
// with one line naming the call and the reason.
//
// cuPointerGetAttribute(s) ask the server only for pointers outside the client's pinned ranges
// (wire layout in protocol/wire/memory.h).
#include "client/driver/host_memory.h"

#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "client/call.h"
#include "client/contexts.h"
#include "client/mapped_memory.h"
#include "client/modules.h"
#include "client/runtime.h"
#include "common/log.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/pointer_attributes.h"
#include "protocol/wire/memory.h"

namespace rgpu::client {
namespace {

std::mutex g_mu;
// Leaked on purpose: programs call the driver from exit handlers, after static destructors.
auto& g_ranges = *new std::map<uintptr_t, HostRange>();  // by base
std::atomic<size_t> g_range_count{0};  // g_ranges.size(), read without g_mu on every launch

// The last launches' arguments while pinned memory exists (note_launch).
struct LaunchRecord {
  uint64_t function = 0;
  size_t n = 0;
  uint8_t params[256];
};
std::mutex g_launch_mu;
auto& g_launches = *new std::array<LaunchRecord, 32>();
size_t g_next_launch = 0;
std::atomic<uint64_t> g_next_id{1};

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

}  // namespace

bool pinned_memory_exists() { return g_range_count.load(std::memory_order_relaxed) != 0; }

void note_launch(uint64_t function_id, const uint8_t* params, size_t n) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  LaunchRecord& r = g_launches[g_next_launch++ % g_launches.size()];
  r.function = function_id;
  r.n = std::min(n, sizeof r.params);
  std::memcpy(r.params, params, r.n);
}

void explain_illegal_address() {
  if (!pinned_memory_exists()) return;
  static std::atomic<bool> explained{false};
  std::vector<LaunchRecord> launches;
  {
    std::lock_guard<std::mutex> lock(g_launch_mu);
    launches.assign(g_launches.begin(), g_launches.end());
  }
  for (const LaunchRecord& r : launches) {
    for (size_t at = 0; at + sizeof(uint64_t) <= r.n; at += sizeof(uint64_t)) {
      uint64_t v;
      std::memcpy(&v, r.params + at, sizeof v);
      const void* p = reinterpret_cast<const void*>(v);
      if (!v || !find_host_range(p, 0, nullptr) || mapped::contains(p, 1)) continue;
      if (explained.exchange(true)) return;
      auto k = ModuleRegistry::get().function(r.function);
      log::error("CUDA_ERROR_ILLEGAL_ADDRESS: kernel %s was launched with 0x%llx, an address in pinned host memory "
                 "allocated or registered without CU_MEMHOSTALLOC_DEVICEMAP; a kernel cannot read this process's "
                 "memory by its host address across the network: allocate it mapped (cudaHostAllocMapped) or copy "
                 "it to device memory",
                 k ? k->name.c_str() : "(unknown)", static_cast<unsigned long long>(v));
      return;
    }
  }
}

bool find_host_range(const void* p, size_t n, HostRange* out) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_ranges.upper_bound(u);
  if (it == g_ranges.begin()) return false;
  --it;
  const HostRange& r = it->second;
  if (u < r.base || u - r.base >= r.size || n > r.size - (u - r.base)) return false;
  if (out) *out = r;
  return true;
}

bool is_device(CUdeviceptr p) {
  if (find_host_range(reinterpret_cast<void*>(p), 0, nullptr)) return false;
  unsigned type = 0;
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void* data[1] = {&type};
  if (cuPointerGetAttributes(1, &attr, data, p) != CUDA_SUCCESS) return false;
  return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY || type == CU_MEMORYTYPE_UNIFIED;
}

}  // namespace rgpu::client

namespace {

using rgpu::client::Call;
using rgpu::client::HostRange;

// One line naming the call and why it cannot work through rgpu.
CUresult refuse(const char* call, const char* why) {
  rgpu::client::trace_call(call);
  rgpu::log::error("%s is not supported by rgpu: %s", call, why);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A host pointer the server's driver reports (for managed memory: the address itself) is usable
// here where this process has a copy (rgpu's mirrors of managed and mapped memory), and where it
// is the queried address itself and this process has memory there: the driver answers the
// address itself for host memory it does not know, and a client's pageable buffer is such memory
// (PyTorch asks about its CPU tensors; refusing those printed an error in every CUDA-graph run).
bool mapped_here(const void* p) {
  const uintptr_t page = rgpu::client::page_size();
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / page * page);
  return msync(start, 1, MS_ASYNC) == 0;  // ENOMEM: nothing mapped at that page
}
bool host_pointer_usable(void* p, CUdeviceptr asked) {
  if (!p || rgpu::client::mapped::contains(p, 1)) return true;
  return reinterpret_cast<CUdeviceptr>(p) == asked && mapped_here(p);
}
constexpr const char* kUnmirroredWhy =
    "the server's driver gave a host address that exists only in the server's process (for example a module's "
    "__managed__ variable; rgpu mirrors only cuMemAllocManaged and mapped allocations), and dereferencing it here "
    "would crash; reported as NULL. Copy such memory with cuMemcpyDtoH/HtoD";
constexpr const char* kMappedWhy =
    "mapped host memory lets a kernel read host memory through a pointer, and the GPU cannot reach this "
    "process's memory across the network; copy the data with cuMemcpyHtoD(Async) instead";
constexpr const char* kIpcWhy =
    "IPC handles share GPU memory between processes of one machine, and this process's GPU is on "
    "another machine";

// Mapped buffers are placed where the server can usually map its copy at the same address (away
// from where heaps and libraries go), so a kernel given the host pointer itself finds it there.
void* mapped_address(size_t size) {
  static std::atomic<uintptr_t> next{uintptr_t(0x5a0000000000)};
  for (int attempt = 0; attempt < 4; ++attempt) {
    uintptr_t want = next.fetch_add((size + (uintptr_t(1) << 21)) & ~((uintptr_t(1) << 21) - 1));
    void* p = mmap(reinterpret_cast<void*>(want), size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == reinterpret_cast<void*>(want)) return p;
    if (p != MAP_FAILED) munmap(p, size);
  }
  return MAP_FAILED;
}

CUresult check_init() { return rgpu::client::connection() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult host_alloc(const char* call, void** pp, size_t bytesize, unsigned flags) {
  rgpu::client::trace_call(call);
  if (CUresult rc = check_init()) return rc;
  if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~unsigned(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  size_t page = rgpu::client::page_size();
  if (bytesize > SIZE_MAX - page) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t size = (bytesize + page - 1) / page * page;
  void* p = MAP_FAILED;
  if (flags & CU_MEMHOSTALLOC_DEVICEMAP) p = mapped_address(size);
  if (p == MAP_FAILED) p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (flags & CU_MEMHOSTALLOC_DEVICEMAP) {
    CUdeviceptr dptr = 0;
    if (CUresult rc = rgpu::client::mapped::map(p, size, flags, &dptr)) {
      munmap(p, size);
      return rc;
    }
  }
  HostRange r{reinterpret_cast<uintptr_t>(p), size, flags, false, rgpu::client::g_next_id.fetch_add(1)};
  {
    std::lock_guard<std::mutex> lock(rgpu::client::g_mu);
    rgpu::client::g_ranges[r.base] = r;
    rgpu::client::g_range_count.store(rgpu::client::g_ranges.size(), std::memory_order_relaxed);
  }
  *pp = p;
  return CUDA_SUCCESS;
}

// A client pinned range answers locally. Returns NOT_SUPPORTED (without logging) for the device
// pointer of host memory: the caller decides whether that is an error.
CUresult host_attribute(const HostRange& r, CUdeviceptr ptr, CUpointer_attribute attr, void* data) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = rgpu::client::contexts::current(); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
      CUdeviceptr d = 0;
      if (!rgpu::client::mapped::device_pointer(reinterpret_cast<const void*>(ptr), &d)) return CUDA_ERROR_NOT_SUPPORTED;
      *static_cast<CUdeviceptr*>(data) = d;
      break;
    }
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = reinterpret_cast<void*>(ptr); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = r.id; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      CUdevice dev = 0;
      CUcontext ctx = rgpu::client::contexts::current();
      if (ctx) rgpu::client::contexts::device_of(ctx, &dev);
      *static_cast<int*>(data) = dev;
      break;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = r.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = r.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; break;
    // As driver 580 answers for cuMemHostAlloc's memory (tests/conformance "pointer pinned", H200):
    // no P2P tokens for host memory, read-write access, and the 2 MiB granules holding it (the
    // client's own allocation is 2 MiB aligned). Registered memory keeps the answers below.
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<unsigned*>(data) = r.registered ? 0 : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: {
      constexpr uintptr_t kGranule = 2u << 20;
      const uintptr_t base = r.registered ? 0 : r.base & ~(kGranule - 1);
      const uintptr_t end = r.registered ? 0 : (r.base + r.size + kGranule - 1) & ~(kGranule - 1);
      if (attr == CU_POINTER_ATTRIBUTE_MAPPING_SIZE) *static_cast<size_t*>(data) = end - base;
      else *static_cast<void**>(data) = reinterpret_cast<void*>(base);
      break;
    }
    default: {
      uint32_t n = rgpu::proto::pointer_attribute_size(attr);
      if (n == 0) return CUDA_ERROR_INVALID_VALUE;
      std::memset(data, 0, n);  // managed, IPC, RDMA, pools...: none of these apply
    }
  }
  return CUDA_SUCCESS;
}

// Asks the server for attributes of a pointer outside the client's ranges. results[i] gets each
// attribute's own CUresult; the return value is the call's.
CUresult server_attributes(uint16_t op, CUdeviceptr ptr, unsigned n, const CUpointer_attribute* attrs, void** data,
                           CUresult* results) {
  Call c(op, rgpu::client::kWaits);
  rgpu::proto::wire::put_pointer_attributes(c.args(), ptr, attrs, n);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  for (unsigned i = 0; i < n; ++i) {
    int32_t r;
    uint32_t size;
    const uint8_t* bytes;
    if (!rgpu::proto::wire::read_pointer_attribute_value(c.reply(), attrs[i], &r, &bytes, &size))
      return CUDA_ERROR_UNKNOWN;
    results[i] = static_cast<CUresult>(r);
    if (r == CUDA_SUCCESS && data[i]) std::memcpy(data[i], bytes, size);  // handles arrive as client ids
    // The server numbers its devices; the program sees client ordinals (CUDA_VISIBLE_DEVICES).
    if (r == CUDA_SUCCESS && data[i] && attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
      int* ordinal = static_cast<int*>(data[i]);
      if (*ordinal >= 0) *ordinal = rgpu::client::client_device(*ordinal);
    }
  }
  return CUDA_SUCCESS;
}

// Managed memory's range is the size the program asked for, as the driver reports it; the server's
// driver holds whole 2 MiB granules for it (server/mapped_memory.cpp), which it would report.
void managed_range_as_asked(CUdeviceptr ptr, CUpointer_attribute attr, void* data) {
  uintptr_t base = 0;
  size_t size = 0;
  if (!data || !rgpu::client::mapped::active() || !rgpu::client::mapped::managed_range(ptr, &base, &size)) return;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<size_t*>(data) = size;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *static_cast<CUdeviceptr*>(data) = base;
}

}  // namespace

extern "C" {

// A pinned allocation's range is the client's own (the server never sees it: NOT_FOUND there);
// managed memory's is what the program asked for, as the driver answers ("pointer pinned address
// range" and "pointer managed address range", tests/conformance on the H200).
RGPU_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  HostRange r;
  if (rgpu::client::find_host_range(reinterpret_cast<const void*>(dptr), 0, &r) && !r.registered) {
    rgpu::client::trace_call("cuMemGetAddressRange_v2");
    if (pbase) *pbase = r.base;
    if (psize) *psize = r.size;
    return CUDA_SUCCESS;
  }
  CUresult rc = rgpu_fwd_cuMemGetAddressRange_v2(pbase, psize, dptr);
  if (rc == CUDA_SUCCESS) {
    managed_range_as_asked(dptr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, pbase);
    managed_range_as_asked(dptr, CU_POINTER_ATTRIBUTE_RANGE_SIZE, psize);
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return host_alloc("cuMemHostAlloc", pp, bytesize, Flags);
}
RGPU_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return host_alloc("cuMemAllocHost_v2", pp, bytesize, 0);
}
RGPU_EXPORT CUresult CUDAAPI cuMemAllocHost(void** pp, unsigned int bytesize) {
  return host_alloc("cuMemAllocHost", pp, bytesize, 0);
}

RGPU_EXPORT CUresult CUDAAPI cuMemFreeHost(void* p) {
  rgpu::client::trace_call("cuMemFreeHost");
  if (CUresult rc = check_init()) return rc;
  HostRange r;
  {
    std::lock_guard<std::mutex> lock(rgpu::client::g_mu);
    auto it = rgpu::client::g_ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == rgpu::client::g_ranges.end() || it->second.registered) return CUDA_ERROR_INVALID_VALUE;
    r = it->second;
    rgpu::client::g_ranges.erase(it);
    rgpu::client::g_range_count.store(rgpu::client::g_ranges.size(), std::memory_order_relaxed);
  }
  // Copies from this memory were consumed when they were issued, and copies into it landed
  // before their call returned (client/driver/memory.cpp), so nothing in flight still uses it.
  if (r.flags & CU_MEMHOSTALLOC_DEVICEMAP) rgpu::client::mapped::unmap(reinterpret_cast<void*>(r.base));
  munmap(reinterpret_cast<void*>(r.base), r.size);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  rgpu::client::trace_call("cuMemHostRegister_v2");
  if (CUresult rc = check_init()) return rc;
  if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~unsigned(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                        CU_MEMHOSTREGISTER_READ_ONLY))
    return CUDA_ERROR_INVALID_VALUE;
  if (Flags & CU_MEMHOSTREGISTER_IOMEMORY)
    return refuse("cuMemHostRegister (CU_MEMHOSTREGISTER_IOMEMORY)",
                  "I/O memory of this machine cannot be mapped for a GPU on another machine");
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  if (bytesize > UINTPTR_MAX - base) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(rgpu::client::g_mu);
  auto it = rgpu::client::g_ranges.lower_bound(base);
  if (it != rgpu::client::g_ranges.end() && it->first < base + bytesize)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (it != rgpu::client::g_ranges.begin()) {
    --it;
    if (it->second.base + it->second.size > base) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (Flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
    // The server's copy covers whole pages around the range.
    size_t page = rgpu::client::page_size();
    uintptr_t first = base / page * page, last = (base + bytesize + page - 1) / page * page;
    CUdeviceptr dptr = 0;
    if (CUresult rc = rgpu::client::mapped::map(reinterpret_cast<void*>(first), last - first, Flags, &dptr)) return rc;
  }
  rgpu::client::g_ranges[base] = HostRange{base, bytesize, Flags, true, rgpu::client::g_next_id.fetch_add(1)};
  rgpu::client::g_range_count.store(rgpu::client::g_ranges.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
RGPU_EXPORT CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuMemHostUnregister(void* p) {
  rgpu::client::trace_call("cuMemHostUnregister");
  if (CUresult rc = check_init()) return rc;
  std::lock_guard<std::mutex> lock(rgpu::client::g_mu);
  auto it = rgpu::client::g_ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == rgpu::client::g_ranges.end() || !it->second.registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  if (it->second.flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
    size_t page = rgpu::client::page_size();
    rgpu::client::mapped::unmap(reinterpret_cast<void*>(it->second.base / page * page));
  }
  rgpu::client::g_ranges.erase(it);
  rgpu::client::g_range_count.store(rgpu::client::g_ranges.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  rgpu::client::trace_call("cuMemHostGetFlags");
  if (CUresult rc = check_init()) return rc;
  if (!pFlags) return CUDA_ERROR_INVALID_VALUE;
  HostRange r;
  if (!rgpu::client::find_host_range(p, 0, &r)) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = r.flags;
  return CUDA_SUCCESS;
}

// Mapped memory (DEVICEMAP) has a device pointer: its server copy's (client/mapped_memory.h).
RGPU_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  rgpu::client::trace_call("cuMemHostGetDevicePointer_v2");
  if (CUresult rc = check_init()) return rc;
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (rgpu::client::mapped::device_pointer(p, pdptr)) return CUDA_SUCCESS;
  if (rgpu::client::find_host_range(p, 0, nullptr))
    return refuse("cuMemHostGetDevicePointer (pinned memory allocated without DEVICEMAP)", kMappedWhy);
  return CUDA_ERROR_INVALID_VALUE;
}
RGPU_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr_v1* pdptr, void* p, unsigned int Flags) {
  CUdeviceptr d = 0;
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = cuMemHostGetDevicePointer_v2(&d, p, Flags);
  if (rc == CUDA_SUCCESS) *pdptr = static_cast<CUdeviceptr_v1>(d);
  return rc;
}

// The program reads and writes managed memory from the host only when no GPU work on it is in
// flight (the device reports no concurrent managed access: client/driver/device.cpp), so the
// two copies meeting at call boundaries is enough. cuMemFree_v2 (generated, one-way) ends it:
// the server drops its record first and tells this process to unmap its copy.
RGPU_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  rgpu::client::trace_call("cuMemAllocManaged");
  if (CUresult rc = check_init()) return rc;
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return rgpu::client::mapped::map_managed(bytesize, flags, dptr);
}

RGPU_EXPORT CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle*, CUevent) { return refuse("cuIpcGetEventHandle", kIpcWhy); }
RGPU_EXPORT CUresult CUDAAPI cuIpcOpenEventHandle(CUevent*, CUipcEventHandle) {
  return refuse("cuIpcOpenEventHandle", kIpcWhy);
}
RGPU_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle*, CUdeviceptr) { return refuse("cuIpcGetMemHandle", kIpcWhy); }
RGPU_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr*, CUipcMemHandle, unsigned int) {
  return refuse("cuIpcOpenMemHandle", kIpcWhy);
}
RGPU_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr*, CUipcMemHandle, unsigned int) {
  return refuse("cuIpcOpenMemHandle", kIpcWhy);
}
RGPU_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr) { return refuse("cuIpcCloseMemHandle", kIpcWhy); }

RGPU_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  rgpu::client::trace_call("cuPointerGetAttribute");
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (rgpu::proto::pointer_attribute_size(attribute) == 0) return CUDA_ERROR_INVALID_VALUE;
  HostRange r;
  if (rgpu::client::find_host_range(reinterpret_cast<void*>(ptr), 0, &r)) {
    CUresult rc = host_attribute(r, ptr, attribute, data);
    if (rc == CUDA_ERROR_NOT_SUPPORTED) return refuse("cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_POINTER)", kMappedWhy);
    return rc;
  }
  CUresult result = CUDA_SUCCESS;
  void* out[1] = {data};
  CUresult rc = server_attributes(rgpu::op::cuPointerGetAttribute, ptr, 1, &attribute, out, &result);
  if (rc != CUDA_SUCCESS) return rc;
  if (result == CUDA_SUCCESS) managed_range_as_asked(ptr, attribute, data);
  if (result == CUDA_SUCCESS && attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER &&
      !host_pointer_usable(*static_cast<void**>(data), ptr)) {
    *static_cast<void**>(data) = nullptr;
    return refuse("cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_HOST_POINTER)", kUnmirroredWhy);
  }
  return result;
}

RGPU_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                                    void** data, CUdeviceptr ptr) {
  rgpu::client::trace_call("cuPointerGetAttributes");
  if (!attributes || !data || numAttributes == 0 || numAttributes > rgpu::proto::kMaxPointerAttributes)
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; ++i)
    if (rgpu::proto::pointer_attribute_size(attributes[i]) == 0) return CUDA_ERROR_INVALID_VALUE;
  HostRange r;
  if (rgpu::client::find_host_range(reinterpret_cast<void*>(ptr), 0, &r)) {
    for (unsigned i = 0; i < numAttributes; ++i) {
      if (!data[i]) continue;
      // No device pointer for host memory: reported as 0, as the driver does for an attribute
      // that does not apply (cuPointerGetAttributes never fails for one).
      if (host_attribute(r, ptr, attributes[i], data[i]) != CUDA_SUCCESS)
        std::memset(data[i], 0, rgpu::proto::pointer_attribute_size(attributes[i]));
    }
    return CUDA_SUCCESS;
  }
  CUresult results[rgpu::proto::kMaxPointerAttributes];
  CUresult rc = server_attributes(rgpu::op::cuPointerGetAttributes, ptr, numAttributes, attributes, data, results);
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < numAttributes; ++i)
    if (results[i] == CUDA_SUCCESS) managed_range_as_asked(ptr, attributes[i], data[i]);
  // A host pointer this process cannot use is reported as none (cuPointerGetAttributes never fails
  // for one attribute), with the reason logged.
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < numAttributes; ++i) {
    if (attributes[i] != CU_POINTER_ATTRIBUTE_HOST_POINTER || !data[i] || host_pointer_usable(*static_cast<void**>(data[i]), ptr))
      continue;
    *static_cast<void**>(data[i]) = nullptr;
    refuse("cuPointerGetAttributes(CU_POINTER_ATTRIBUTE_HOST_POINTER)", kUnmirroredWhy);
  }
  return rc;
}

}  // extern "C"
