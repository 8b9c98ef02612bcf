// fakecuda's shared state: the objects behind the driver handles, the device memory table and
// the stream machinery. Private to fakecuda/ (nothing here is exported).
//
// Locking: g_mu guards every object table, every stream queue and every event; g_cv is notified
// whenever a stream finishes an operation (waiters re-check their condition). g_mem_mu guards
// the device allocation table and the pinned host ranges; it is never held while taking g_mu.
// Operations run on stream workers with no lock held.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cuda_image.h"

// Exported entry points carry this; everything else is hidden (see exports.map).
#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace fake {

// ---------- the one device ----------
inline constexpr int kDriverVersion = 13000;
inline constexpr size_t kTotalMem = 143155ull << 20;  // cuDeviceTotalMem on the H200 (NVML says 143771 MiB)
inline constexpr int kMaxThreadsPerBlock = 1024;
int device_attribute(int attr);  // H200 value, 0 for attributes it has none for

// ---------- devices (device.cpp) ----------
int device_count();  // RGPU_FAKE_DEVICES, 1 by default
bool valid_device(CUdevice dev);
void device_uuid(CUdevice dev, unsigned char out[16]);  // GPU 0's is the one-GPU fake's UUID
int device_pci_bus(CUdevice dev);                       // 0x1b for GPU 0, 0x10 apart

// ---------- init and errors ----------
bool initialized();
// CUDA_ERROR_NOT_INITIALIZED before cuInit. Waits while another process has this one locked or
// checkpointed (checkpoint_gate), as the real driver's calls do.
CUresult check_init();

// ---------- checkpoints (checkpoint.cpp) ----------
void checkpoint_listen();      // cuInit: from now on other processes can lock this one
void checkpoint_gate();        // returns at once unless locked or checkpointed; then waits for Unlock
void checkpoint_never_wait();  // the calling thread (a stream worker) never waits in the gate

// ---------- streams ----------
struct Op {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> deps;  // wait for completed >= seq
  std::function<void()> fn;
};

}  // namespace fake

struct CUstream_st {
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool is_null = false;  // the context's legacy default stream
  std::deque<fake::Op> queue;
  uint64_t submitted = 0, completed = 0;
  bool stop = false;
  std::thread worker;
};

struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  std::shared_ptr<CUstream_st> stream;  // where the last record went
  uint64_t seq = 0;                     // ... and its position there
  uint64_t generation = 0;              // bumped per record: a stale record op does not stamp
  int64_t time_ns = 0;
};

struct CUctx_st {
  CUdevice device = 0;
  unsigned flags = 0;
  bool primary = false;
  int primary_refs = 0;  // primary context only: active while > 0
  CUresult sticky = CUDA_SUCCESS;  // a fault on a stream poisons the context, as on the real driver
  std::shared_ptr<CUstream_st> null_stream;
  std::map<CUlimit, size_t> limits;
  // Contexts whose memory this one may reach (cuCtxEnablePeerAccess); a destroyed or torn-down
  // context leaves every such set.
  std::vector<CUctx_st*> peers;
};

struct CUfunc_st {
  CUmod_st* mod = nullptr;
  const rgpu::image::Kernel* kernel = nullptr;
  // Set by cuFuncSetAttribute / cuKernelSetAttribute, so tests can see whether a changed
  // attribute reaches the reader.
  int max_dynamic_shared = 49152;
  // The kernel's own value (cuKernelSetAttribute sets both; cuFuncSetAttribute on the function
  // from cuKernelGetFunction sets only max_dynamic_shared, which launches use): cuKernelGetAttribute
  // answers this one, as driver 580 does.
  int kernel_max_dynamic_shared = 49152;
  // How the handle was handed out. Driver 580 keeps CUkernel and CUfunction apart for
  // cuFuncGetParamInfo: a CUkernel there is an invalid handle (the fake uses one object for both).
  bool as_kernel = false, as_function = false;
};

struct CUmod_st {
  CUctx_st* ctx = nullptr;
  rgpu::image::Image image;
  std::vector<std::unique_ptr<CUfunc_st>> funcs;
  // The image's globals, placed (zeroed) in device memory the first time they are asked for
  // (cuModuleGetGlobal_v2); they live as long as the context.
  std::map<std::string, CUdeviceptr> globals;
};

namespace fake {

// ---------- handles ----------
// An object whose address a program sees as a handle (a context, a stream, a memory pool) sits
// where the real driver's would: on the heap, 16-byte aligned and never 256-byte aligned
// (tests/conformance/h200.txt: "primary retain", "stream create" and "default mem pool" are
// nonnull, not nonnull,aligned256). Plain new gives whatever the allocator happens to return, so
// the conformance keys flapped from machine to machine.
void* handle_storage_alloc(size_t size);
void handle_storage_free(void* p);
template <class T>
struct HandleDelete {
  void operator()(T* p) const {
    p->~T();
    handle_storage_free(p);
  }
};
template <class T>
using HandlePtr = std::unique_ptr<T, HandleDelete<T>>;
template <class T>
HandlePtr<T> make_handle() {
  static_assert(alignof(T) <= 16);
  return HandlePtr<T>(new (handle_storage_alloc(sizeof(T))) T());
}

// Never destroyed: stream workers may still be waiting on them while the process exits.
extern std::mutex& g_mu;
extern std::condition_variable& g_cv;
extern std::unordered_map<CUctx_st*, HandlePtr<CUctx_st>>& g_ctxs;
extern std::unordered_map<CUstream_st*, std::shared_ptr<CUstream_st>>& g_streams;
extern std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>& g_events;
extern std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>>& g_modules;
extern std::unordered_map<CUfunc_st*, CUmod_st*>& g_funcs;

// ---------- contexts (context.cpp) ----------
// The calling thread's current context, checked live and usable: CUDA_ERROR_INVALID_CONTEXT
// when there is none, the context's sticky error when it is poisoned. Takes g_mu.
CUresult current_ctx(CUctx_st** out);
// Same, with g_mu held and without the sticky check.
CUctx_st* current_ctx_locked();
bool ctx_alive_locked(CUctx_st* c);
CUctx_st* new_ctx_locked(unsigned flags, bool primary);
// Drains the context's streams and frees everything it owns; the object itself stays.
void teardown_ctx(std::unique_lock<std::mutex>& lk, CUctx_st* c);

// ---------- occupancy (library.cpp) ----------
// Blocks of block_size threads and smem bytes of dynamic shared memory resident on one SM at once
// (cuOccupancyMaxActiveBlocksPerMultiprocessor; cooperative launches are held to it times the SMs).
int blocks_per_sm(int block_size, size_t smem);

// ---------- functions (module.cpp) ----------
// cuFuncGetParamInfo without the handle-kind check (cuKernelGetParamInfo shares it).
CUresult param_info_locked(CUfunction func, size_t index, size_t* offset, size_t* size);

// ---------- streams (stream.cpp) ----------
std::shared_ptr<CUstream_st> new_stream_locked(CUctx_st* c, unsigned flags, int priority, bool is_null);
// Resolves a stream handle (0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name the current
// context's default stream) and checks the stream's context is usable.
CUresult get_stream_locked(CUstream h, std::shared_ptr<CUstream_st>* out);
// Queues fn on s behind the legacy-stream dependencies; returns its sequence number.
uint64_t submit_locked(const std::shared_ptr<CUstream_st>& s, std::function<void()> fn,
                       std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> extra_deps = {});
void wait_seq(std::unique_lock<std::mutex>& lk, const std::shared_ptr<CUstream_st>& s, uint64_t seq);
void stop_stream(std::unique_lock<std::mutex>& lk, const std::shared_ptr<CUstream_st>& s);
void poison(CUctx_st* c, CUresult err);  // takes g_mu

// ---------- memory (memory.cpp) ----------
inline constexpr CUdeviceptr kDeviceBase = 0x7e0000000000ull;
inline constexpr CUdeviceptr kDeviceEnd = 0x7f0000000000ull;
inline bool in_device_window(CUdeviceptr p) { return p >= kDeviceBase && p < kDeviceEnd; }
struct Alloc {
  CUdeviceptr base;
  size_t size;
  CUctx_st* ctx;
  std::shared_ptr<uint8_t[]> data;     // the bytes at base (for a VMM mapping: its physical memory's)
  CUmemPoolHandle_st* pool = nullptr;  // stream-ordered allocations (memory.cpp)
  // A VMM mapping (vmm.cpp): not freed by cuMemFree or with a context; reachable from the device
  // only after cuMemSetAccess (access: CUmemAccess_flags).
  bool vmm = false;
  int access = 0;         // what any device may do (the fake's kernels do not tell devices apart)
  int access_of[8] = {};  // ... and each device (cuMemGetAccess)
  // The mapping holding it when that is more than the allocation (a pool's chunk), else 0.
  CUdeviceptr map_base = 0;
  size_t map_size = 0;
};
// Device bytes [p, p + n), all inside one live allocation. hold keeps them alive while used.
struct Span {
  std::shared_ptr<Alloc> hold;
  uint8_t* host = nullptr;
};
bool device_span(CUdeviceptr p, size_t n, Span* out);
// Where this process's device addresses start: slot RGPU_FAKE_ADDRESS_SLOT of eight equal parts of
// the window, so that two fake servers under one client hand out addresses apart.
CUdeviceptr device_window_start();
// cuMemFree_v2 without the graph-allocation check (graph.cpp frees its nodes' memory with it).
CUresult free_device(CUdeviceptr p);
// cuMemAlloc_v2 at an address aligned to align (a power of two, at least 256): graph memory
// (graph.cpp), placed in 2 MiB granules as the driver's graph pool does.
CUresult alloc_device_aligned(CUdeviceptr* p, size_t bytesize, size_t align);
// A stream-ordered allocation's place in its pool's chunk is free again (memory.cpp, lock held).
void pool_forget_locked(const Alloc& a);
// cuMemFree / cuMemFreeAsync of a graph allocation's address (graph.cpp, takes g_graph_mu):
// CUDA_ERROR_NOT_FOUND when p is none; else its launch's allocation is freed (SUCCESS), or
// INVALID_VALUE when none is outstanding. The memory itself stays with the graph.
CUresult free_graph_alloc(CUdeviceptr p);
// For vmm.cpp: the allocation table's lock, and (with it held) address space and accounting.
std::mutex& mem_mutex();
// The VMM reservation holding p (mem_mutex held): its base and size; false when none (vmm.cpp).
bool vmm_reservation_locked(CUdeviceptr p, CUdeviceptr* base, size_t* size);
CUdeviceptr reserve_va_locked(size_t size, size_t align);  // fresh addresses, never handed out again; 0: none left
bool charge_locked(size_t n);                              // counts n bytes used; false: out of memory
void uncharge_locked(size_t n);
std::map<CUdeviceptr, std::shared_ptr<Alloc>>& allocs_locked();
bool host_is_pinned(const void* p, size_t n);
void free_ctx_allocations(CUctx_st* c);

// ---------- kernels (kernels.cpp) ----------
struct LaunchDims {
  unsigned grid[3], block[3];
};
// A host implementation reads its arguments from the packed parameter buffer and returns
// CUDA_ERROR_ILLEGAL_ADDRESS (writing nothing) when a pointer argument is not device memory.
using HostKernel = CUresult (*)(const LaunchDims& d, const uint8_t* params);
HostKernel find_host_kernel(const std::string& name);

}  // namespace fake
