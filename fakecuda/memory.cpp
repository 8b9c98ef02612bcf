// Device memory backed by host buffers, pinned host memory, copies and memsets.
//
// Device pointers live in [kDeviceBase, kDeviceEnd), a window no host buffer is handed out from
// here, 256-byte aligned, with a 256-byte gap after each allocation so that running off the end
// of one never lands in the next (stream-ordered ones: back to back in their pool's chunks, see
// below); addresses are not reused. Any device range that is not wholly
// inside one live allocation is refused with CUDA_ERROR_INVALID_VALUE before anything is written.
//
// Copy timing follows the real driver's rules for pageable and pinned host memory, so the
// server's buffer lifetimes are exercised honestly:
// - synchronous copies and memsets run on the legacy stream and return when done;
// - async host-to-device from pageable memory copies the source at the call (the caller may
//   reuse it at once); from pinned memory (cuMemAllocHost/cuMemHostAlloc/cuMemHostRegister) it
//   reads the source when the copy runs;
// - async device-to-host into pageable memory returns only when the copy is done; into pinned
//   memory it returns at once.
// cuMemFree waits for the owning context's queued work first, as cudaFree's implicit
// synchronization does, so freeing right after a launch is safe.
//
// Managed memory (cuMemAllocManaged) is host memory mapped at [kManagedBase, ...), outside the
// device window, readable by the CPU at the address returned, as on a real GPU with HMM: it is
// kept with the pinned ranges as mapped memory whose device pointer is its address, zeroed.
// The advice, prefetch and attach calls are accepted and change nothing.
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/env.h"
#include "fakecuda/internal.h"

namespace fake {
namespace {

std::mutex& g_mem_mu = *new std::mutex;
std::map<CUdeviceptr, std::shared_ptr<Alloc>>& g_allocs = *new std::map<CUdeviceptr, std::shared_ptr<Alloc>>;
struct Pinned {
  size_t size;
  bool owned;           // allocated by us (cuMemAllocHost / cuMemHostAlloc), freed by cuMemFreeHost
  bool mapped = false;  // DEVICEMAP: kernels reach it; its device pointer is its host address
  CUctx_st* managed = nullptr;  // cuMemAllocManaged: the context it was allocated in (owned, mapped)
};
std::map<uintptr_t, Pinned>& g_pinned = *new std::map<uintptr_t, Pinned>;
size_t g_used = 0;
CUdeviceptr g_next = 0;  // the next free address; 0 until first used (device_window_start)

constexpr size_t kAlign = 256;

// Managed allocations, placed away from the device window, from heaps and libraries, and from the
// addresses rgpu gives mapped host memory (0x5a0000000000...). Another fake host's
// (RGPU_FAKE_ADDRESS_SLOT) start 128 GiB further on a slot, as its device addresses differ.
constexpr uintptr_t kManagedBase = 0x5c0000000000, kManagedSlot = uintptr_t(1) << 37;
uintptr_t g_next_managed = 0;  // 0 until first used

// The managed range holding p (g_mem_mu held), or null.
const std::pair<const uintptr_t, Pinned>* find_managed_locked(uintptr_t p) {
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return nullptr;
  --it;
  return it->second.managed && p - it->first < it->second.size ? &*it : nullptr;
}

// Waits for everything queued in the context (used before a free).
void drain_ctx(CUctx_st* c) {
  std::unique_lock lk(g_mu);
  if (!ctx_alive_locked(c)) return;
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> targets{{c->null_stream, c->null_stream->submitted}};
  for (auto& [raw, s] : g_streams)
    if (s->ctx == c) targets.emplace_back(s, s->submitted);
  for (auto& [s, seq] : targets) wait_seq(lk, s, seq);
}

struct Endpoint {
  bool device;
  CUdeviceptr d;
  void* h;
};
Endpoint dev(CUdeviceptr d) { return {true, d, nullptr}; }
Endpoint host(const void* h) { return {false, 0, const_cast<void*>(h)}; }
Endpoint unified(CUdeviceptr p) { return in_device_window(p) ? dev(p) : host(reinterpret_cast<void*>(p)); }

CUresult copy(Endpoint dst, Endpoint src, size_t n, CUstream h, bool async) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Span ds, ss;
  if (dst.device ? !device_span(dst.d, n, &ds) : !dst.h) return CUDA_ERROR_INVALID_VALUE;
  if (src.device ? !device_span(src.d, n, &ss) : !src.h) return CUDA_ERROR_INVALID_VALUE;
  uint8_t* to = dst.device ? ds.host : static_cast<uint8_t*>(dst.h);
  const uint8_t* from = src.device ? ss.host : static_cast<const uint8_t*>(src.h);
  bool wait = !async || (!dst.device && !host_is_pinned(dst.h, n));
  std::shared_ptr<std::vector<uint8_t>> staged;
  if (async && !src.device && !host_is_pinned(src.h, n)) {
    staged = std::make_shared<std::vector<uint8_t>>(from, from + n);
    from = staged->data();
  }
  std::unique_lock lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(async ? h : nullptr, &s)) return r;
  uint64_t seq = submit_locked(s, [to, from, n, ds, ss, staged] { std::memmove(to, from, n); });
  if (!wait) return CUDA_SUCCESS;
  wait_seq(lk, s, seq);
  return ctx_alive_locked(s->ctx) ? s->ctx->sticky : CUDA_ERROR_INVALID_CONTEXT;
}

// A memset of height rows of width elements, pitch bytes apart (one row: a plain memset). The
// rows' footprint must lie in one allocation.
CUresult memset2d(CUdeviceptr d, size_t pitch, uint32_t value, size_t elem, size_t width, size_t height, CUstream h,
                  bool async) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (width > SIZE_MAX / elem || (d % elem) != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t row = width * elem;
  if (height > 1 && pitch < row) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && (height - 1 > (SIZE_MAX - row) / pitch)) return CUDA_ERROR_INVALID_VALUE;
  size_t extent = (height - 1) * pitch + row;
  Span ds;
  if (!device_span(d, extent, &ds)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(async ? h : nullptr, &s)) return r;
  uint64_t seq = submit_locked(s, [ds, pitch, value, elem, width, height, row] {
    for (size_t y = 0; y < height; ++y) {
      uint8_t* p = ds.host + y * pitch;
      if (elem == 1) {
        std::memset(p, int(value & 0xff), row);
        continue;
      }
      for (size_t i = 0; i < width; ++i, p += elem) std::memcpy(p, &value, elem);  // little-endian low bytes
    }
  });
  if (async) return CUDA_SUCCESS;
  wait_seq(lk, s, seq);
  return ctx_alive_locked(s->ctx) ? s->ctx->sticky : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult memset(CUdeviceptr d, uint32_t value, size_t elem, size_t count, CUstream h, bool async) {
  return memset2d(d, 0, value, elem, count, 1, h, async);
}

}  // namespace

bool device_span(CUdeviceptr p, size_t n, Span* out) {
  std::lock_guard lk(g_mem_mu);
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin() || p < std::prev(it)->second->base ||
      p - std::prev(it)->second->base >= std::prev(it)->second->size) {
    // Mapped host memory (DEVICEMAP): the device pointer is the host address.
    auto pin = g_pinned.upper_bound(p);
    if (pin == g_pinned.begin()) return false;
    --pin;
    uint64_t off = p - pin->first;
    if (!pin->second.mapped || p < pin->first || off >= pin->second.size || n > pin->second.size - off) return false;
    out->hold = nullptr;
    out->host = reinterpret_cast<uint8_t*>(p);
    return true;
  }
  --it;
  const Alloc& a = *it->second;
  uint64_t off = p - a.base;
  if (p < a.base || off >= a.size || n > a.size - off) return false;
  if (a.vmm && !(a.access & CU_MEM_ACCESS_FLAGS_PROT_READ)) return false;  // mapped, no access set yet
  out->hold = it->second;
  out->host = a.data.get() + off;
  return true;
}

bool host_is_pinned(const void* p, size_t n) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.upper_bound(u);
  if (it == g_pinned.begin()) return false;
  --it;
  return u >= it->first && u - it->first < it->second.size && n <= it->second.size - (u - it->first);
}

std::mutex& mem_mutex() { return g_mem_mu; }
std::map<CUdeviceptr, std::shared_ptr<Alloc>>& allocs_locked() { return g_allocs; }

CUdeviceptr device_window_start() {
  return kDeviceBase + CUdeviceptr(rgpu::env::get().fake_address_slot) * ((kDeviceEnd - kDeviceBase) / 8);
}

CUdeviceptr reserve_va_locked(size_t size, size_t align) {
  if (!align || align & (align - 1)) return 0;
  if (!g_next) g_next = device_window_start();
  CUdeviceptr base = (g_next + align - 1) & ~CUdeviceptr(align - 1);
  if (base < g_next || size > kDeviceEnd - base || size + kAlign > kDeviceEnd - base - size) return 0;
  g_next = base + size + kAlign;  // the gap after each range, as for allocations
  return base;
}

bool charge_locked(size_t n) {
  if (n > kTotalMem - g_used) return false;
  g_used += n;
  return true;
}
void uncharge_locked(size_t n) { g_used -= n; }

void free_ctx_allocations(CUctx_st* c) {
  std::lock_guard lk(g_mem_mu);
  for (auto it = g_allocs.begin(); it != g_allocs.end();) {
    if (it->second->ctx != c || it->second->vmm) {
      ++it;
      continue;
    }
    g_used -= it->second->size;
    pool_forget_locked(*it->second);
    it = g_allocs.erase(it);
  }
}

}  // namespace fake

using namespace fake;

namespace {

// An allocation of bytesize at base in context c, entered in the table (g_mem_mu held).
Alloc* place_locked(CUctx_st* c, CUdeviceptr base, size_t bytesize) {
  auto a = std::make_shared<Alloc>();
  a->base = base;
  a->size = bytesize;
  a->ctx = c;
  a->data.reset(new (std::nothrow) uint8_t[bytesize]);
  if (!a->data) return nullptr;
  g_used += bytesize;
  g_allocs.emplace(a->base, a);
  return a.get();
}

// cuMemAlloc_v2 in context c, at an address aligned to align.
CUresult alloc_in(CUctx_st* c, CUdeviceptr* dptr, size_t bytesize, size_t align = kAlign) {
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mem_mu);
  if (bytesize > kTotalMem - g_used) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!g_next) g_next = device_window_start();
  CUdeviceptr base = (g_next + align - 1) & ~CUdeviceptr(align - 1);
  size_t span = (bytesize + kAlign - 1) / kAlign * kAlign + kAlign;
  if (base < g_next || span > kDeviceEnd - base) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!place_locked(c, base, bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
  g_next = base + span;
  *dptr = base;
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  return alloc_in(c, dptr, bytesize);
}

// Pitched memory: each row padded to a multiple of the device's texture alignment (512 bytes,
// CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT); the element size may be 4, 8 or 16 bytes, as the
// driver documents.
FAKE_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                             unsigned int element_bytes) {
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  constexpr size_t kPitchAlign = 512;
  if (width > kTotalMem) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t p = (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  if (height > kTotalMem / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = alloc_in(c, dptr, p * height);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult fake::alloc_device_aligned(CUdeviceptr* dptr, size_t bytesize, size_t align) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  return alloc_in(c, dptr, bytesize, align);
}

FAKE_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mem_mu);
  if (bytesize > kTotalMem - g_used) return CUDA_ERROR_OUT_OF_MEMORY;
  // Small allocations are packed into shared 2 MiB chunks at 256-byte alignment, as the real
  // driver packs them (an H200 run handed rgpu a managed address off a page boundary).
  constexpr size_t kChunk = size_t(1) << 21;
  if (!g_next_managed) g_next_managed = kManagedBase + uintptr_t(rgpu::env::get().fake_address_slot) * kManagedSlot;
  static uintptr_t chunk = 0;
  static size_t chunk_used = kChunk;
  if (bytesize < kChunk / 4) {
    size_t at = (chunk_used + kAlign - 1) / kAlign * kAlign;
    if (at + bytesize > kChunk) {
      void* want = reinterpret_cast<void*>(g_next_managed);
      void* q = mmap(want, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (q != want) {
        if (q != MAP_FAILED) munmap(q, kChunk);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      g_next_managed += 2 * kChunk;  // a gap after each
      chunk = reinterpret_cast<uintptr_t>(q);
      at = 0;
    }
    chunk_used = at + bytesize;
    g_used += bytesize;
    g_pinned[chunk + at] = Pinned{bytesize, false, true, c};  // the chunk stays mapped after a free
    *dptr = static_cast<CUdeviceptr>(chunk + at);
    return CUDA_SUCCESS;
  }
  size_t len = (bytesize + 4095) / 4096 * 4096;
  void* p = MAP_FAILED;
  for (int attempt = 0; attempt < 16 && p == MAP_FAILED; ++attempt) {
    void* want = reinterpret_cast<void*>(g_next_managed);
    g_next_managed += (len + (uintptr_t(1) << 21)) & ~((uintptr_t(1) << 21) - 1);  // a gap after each
    p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != want) {
      munmap(p, len);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  g_used += bytesize;
  g_pinned[reinterpret_cast<uintptr_t>(p)] = Pinned{bytesize, true, true, c};
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

namespace {

// cuMemFree_v2 of a managed allocation: CUDA_ERROR_NOT_FOUND when dptr is none.
CUresult free_managed(CUdeviceptr dptr) {
  CUctx_st* owner;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_pinned.find(dptr);
    if (it == g_pinned.end() || !it->second.managed) return CUDA_ERROR_NOT_FOUND;
    owner = it->second.managed;
  }
  drain_ctx(owner);
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.find(dptr);
  if (it == g_pinned.end() || !it->second.managed) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
  g_used -= it->second.size;
  if (it->second.owned) munmap(reinterpret_cast<void*>(dptr), (it->second.size + 4095) / 4096 * 4096);  // not a packed one
  g_pinned.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr) {
    CUctx_st* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (CUresult r = free_graph_alloc(dptr); r != CUDA_ERROR_NOT_FOUND) return r;
  }
  return free_device(dptr);
}

CUresult fake::free_device(CUdeviceptr dptr) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  if (CUresult r = free_managed(dptr); r != CUDA_ERROR_NOT_FOUND) return r;
  CUctx_st* owner;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs.find(dptr);
    if (it == g_allocs.end() || it->second->vmm) return CUDA_ERROR_INVALID_VALUE;
    owner = it->second->ctx;
  }
  drain_ctx(owner);
  std::lock_guard lk(g_mem_mu);
  auto it = g_allocs.find(dptr);
  if (it == g_allocs.end()) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile by another thread
  g_used -= it->second->size;
  pool_forget_locked(*it->second);
  g_allocs.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard lk(g_mem_mu);
  *free = kTotalMem - g_used;
  *total = kTotalMem;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  {
    std::lock_guard lk(g_mem_mu);
    if (auto* m = find_managed_locked(dptr)) {
      if (pbase) *pbase = m->first;
      if (psize) *psize = m->second.size;
      return CUDA_SUCCESS;
    }
  }
  Span s;
  if (!device_span(dptr, 1, &s) || !s.hold) {
    // Pinned host memory is a range too (driver 580: its base and size, as for device memory).
    std::lock_guard lk(g_mem_mu);
    auto it = g_pinned.upper_bound(dptr);
    if (it == g_pinned.begin() || dptr - std::prev(it)->first >= std::prev(it)->second.size) return CUDA_ERROR_NOT_FOUND;
    --it;
    if (pbase) *pbase = it->first;
    if (psize) *psize = it->second.size;
    return CUDA_SUCCESS;
  }
  if (pbase) *pbase = s.hold->base;
  if (psize) *psize = s.hold->size;
  return CUDA_SUCCESS;
}

// ---------- pinned host memory ----------

// What the driver reports of a pinned allocation: CU_MEMHOSTALLOC_DEVICEMAP when mapped (seen on
// the H200 for a DEVICEMAP allocation); pageable memory is INVALID_VALUE.
FAKE_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == g_pinned.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (reinterpret_cast<uintptr_t>(p) - it->first >= it->second.size || it->second.managed) return CUDA_ERROR_INVALID_VALUE;
  *flags = it->second.mapped ? CU_MEMHOSTALLOC_DEVICEMAP : 0;
  return CUDA_SUCCESS;
}

namespace {

constexpr size_t kHostGranule = size_t(2) << 20;

// Pinned host memory as driver 580 hands it out: whole 2 MiB granules at a 2 MiB-aligned address
// (H200: cuMemHostAlloc of 64 KiB is 2 MiB-aligned), zeroed, pages taken when touched.
void* map_host(size_t bytesize) {
  size_t len = (bytesize + kHostGranule - 1) / kHostGranule * kHostGranule;
  if (len < bytesize || len > SIZE_MAX - kHostGranule) return nullptr;
  void* raw = mmap(nullptr, len + kHostGranule, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t r = reinterpret_cast<uintptr_t>(raw), p = (r + kHostGranule - 1) & ~uintptr_t(kHostGranule - 1);
  if (p > r) munmap(raw, p - r);
  if (r + len + kHostGranule > p + len) munmap(reinterpret_cast<void*>(p + len), r + len + kHostGranule - (p + len));
  return reinterpret_cast<void*>(p);
}

void unmap_host(void* p, size_t bytesize) {
  munmap(p, (bytesize + kHostGranule - 1) / kHostGranule * kHostGranule);
}

}  // namespace

FAKE_API CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  void* p = map_host(bytesize);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lk(g_mem_mu);
  g_pinned[reinterpret_cast<uintptr_t>(p)] = Pinned{bytesize, true, (Flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0};
  *pp = p;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

FAKE_API CUresult CUDAAPI cuMemFreeHost(void* p) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_pinned.end() || !it->second.owned || it->second.managed) return CUDA_ERROR_INVALID_VALUE;
  unmap_host(p, it->second.size);
  g_pinned.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (bytesize > UINTPTR_MAX - u) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.lower_bound(u);
  if (it != g_pinned.end() && it->first < u + bytesize) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (it != g_pinned.begin() && std::prev(it)->first + std::prev(it)->second.size > u)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  g_pinned[u] = Pinned{bytesize, false, (Flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0};
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (!pdptr || Flags) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.upper_bound(u);
  if (it == g_pinned.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (!it->second.mapped || it->second.managed || u - it->first >= it->second.size) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = u;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemHostUnregister(void* p) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_pinned.end() || it->second.owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_pinned.erase(it);
  return CUDA_SUCCESS;
}

// ---------- copies ----------

FAKE_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return copy(dev(dst), host(src), n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  // RGPU_FAKE_DTOH_DELAY_MS: each such copy takes this long, so tests can act while a copy
  // between servers (server/handlers/peer_copy.cpp, which reads its chunks with it) is under way.
  if (const int delay_ms = rgpu::env::get().fake_dtoh_delay_ms; delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  return copy(host(dst), dev(src), n, nullptr, false);
}
FAKE_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dev(dst), dev(src), n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(unified(dst), unified(src), n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return copy(dev(dst), host(src), n, h, true);
}
FAKE_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(host(dst), dev(src), n, h, true);
}
FAKE_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dev(dst), dev(src), n, h, true);
}
FAKE_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(unified(dst), unified(src), n, h, true);
}

// Between devices: the fake's device memory is one address space, so a peer copy is a copy that
// first checks both contexts (a dead one is INVALID_CONTEXT, as on the driver). It runs on the
// current context's stream, as cuMemcpyDtoD does.
namespace {
CUresult peer_copy(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream h,
                   bool async) {
  if (CUresult r = check_init()) return r;
  {
    std::lock_guard lk(g_mu);
    if (!ctx_alive_locked(dst_ctx) || !ctx_alive_locked(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return copy(dev(dst), dev(src), n, h, async);
}
}  // namespace

FAKE_API CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  return peer_copy(dst, dst_ctx, src, src_ctx, n, nullptr, false);
}
FAKE_API CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                            size_t n, CUstream h) {
  return peer_copy(dst, dst_ctx, src, src_ctx, n, h, true);
}
FAKE_API CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                            size_t n) {
  return cuMemcpyPeer(dst, dst_ctx, src, src_ctx, n);
}
FAKE_API CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                                 CUcontext src_ctx, size_t n, CUstream h) {
  return cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, h);
}

// ---------- memsets ----------

FAKE_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset(d, v, 1, n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset(d, v, 2, n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset(d, v, 4, n, nullptr, false); }
FAKE_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset(d, v, 1, n, h, true); }
FAKE_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return memset(d, v, 2, n, h, true); }
FAKE_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return memset(d, v, 4, n, h, true); }

// 2-D memsets: Width elements in each of Height rows, dstPitch bytes apart (driver 580 exports
// these; cuda.h maps cuMemsetD2D8/16/32 to the _v2 names).
FAKE_API CUresult CUDAAPI cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
  return memset2d(d, pitch, v, 1, w, h, nullptr, false);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h) {
  return memset2d(d, pitch, v, 2, w, h, nullptr, false);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h) {
  return memset2d(d, pitch, v, 4, w, h, nullptr, false);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
  return memset2d(d, pitch, v, 1, w, h, s, true);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) {
  return memset2d(d, pitch, v, 2, w, h, s, true);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  return memset2d(d, pitch, v, 4, w, h, s, true);
}

// ---------- per-thread-default-stream variants: the legacy stream stands in ----------

FAKE_API CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void* s, size_t n) { return cuMemcpyHtoD_v2(d, s, n); }
FAKE_API CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* d, CUdeviceptr s, size_t n) { return cuMemcpyDtoH_v2(d, s, n); }
FAKE_API CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
FAKE_API CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpy(d, s, n); }
FAKE_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void* s, size_t n, CUstream h) {
  return cuMemcpyHtoDAsync_v2(d, s, n, h);
}
FAKE_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* d, CUdeviceptr s, size_t n, CUstream h) {
  return cuMemcpyDtoHAsync_v2(d, s, n, h);
}
FAKE_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) {
  return cuMemcpyDtoDAsync_v2(d, s, n, h);
}
FAKE_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return cuMemcpyAsync(d, s, n, h); }
FAKE_API CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8_v2(d, v, n); }
FAKE_API CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return cuMemsetD16_v2(d, v, n); }
FAKE_API CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return cuMemsetD32_v2(d, v, n); }
FAKE_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return cuMemsetD8Async(d, v, n, h); }
FAKE_API CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return cuMemsetD16Async(d, v, n, h); }
FAKE_API CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return cuMemsetD32Async(d, v, n, h); }

FAKE_API CUresult CUDAAPI cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {
  return cuMemsetD2D8_v2(d, p, v, w, h);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {
  return cuMemsetD2D16_v2(d, p, v, w, h);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {
  return cuMemsetD2D32_v2(d, p, v, w, h);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) {
  return cuMemsetD2D8Async(d, p, v, w, h, s);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h,
                                                  CUstream s) {
  return cuMemsetD2D16Async(d, p, v, w, h, s);
}
FAKE_API CUresult CUDAAPI cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h,
                                                  CUstream s) {
  return cuMemsetD2D32Async(d, p, v, w, h, s);
}

// ---------- stream-ordered allocation and pools ----------
// An async allocation is made at the call (earlier than the stream would, never later); an async
// free runs in stream order. A pool's memory comes in chunks of 32 MiB of device addresses (one
// allocation larger than that: a chunk of its own, in whole 2 MiB granules), which it keeps; an
// allocation goes first fit into them at 256-byte alignment, back to back, as driver 580 places
// them (on the H200: two 1 MiB allocations at a chunk's start and 1 MiB in, a later 4 KiB one at
// the start again once they are freed; CU_POINTER_ATTRIBUTE_MAPPING_SIZE 32 MiB).

struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;
  int reuse[3] = {1, 1, 1};
  uint64_t used = 0, used_high = 0;
  std::map<CUdeviceptr, size_t> chunks;  // base → size
  std::map<CUdeviceptr, size_t> placed;  // a live allocation's base → its size, rounded to 256
};

namespace {

CUmemPoolHandle_st& g_default_pool = *make_handle<CUmemPoolHandle_st>().release();
std::unordered_map<CUmemPoolHandle_st*, HandlePtr<CUmemPoolHandle_st>>& g_pools =
    *new std::unordered_map<CUmemPoolHandle_st*, HandlePtr<CUmemPoolHandle_st>>;

bool pool_alive(CUmemoryPool p) { return p == &g_default_pool || g_pools.count(p); }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Where in pool an allocation of n bytes goes (g_mem_mu held): the first gap that fits in its
// chunks, else the start of a new chunk. Its chunk's base and size come back too.
bool pool_place_locked(CUmemPoolHandle_st* pool, size_t n, CUdeviceptr* at, CUdeviceptr* chunk, size_t* chunk_size) {
  constexpr size_t kChunk = size_t(32) << 20, kGranule = size_t(2) << 20;
  const size_t need = round_up(n, kAlign);
  if (need < n) return false;
  for (auto& [base, size] : pool->chunks) {
    CUdeviceptr cur = base;
    for (auto it = pool->placed.lower_bound(base); it != pool->placed.end() && it->first < base + size; ++it) {
      if (it->first - cur >= need) break;
      cur = it->first + it->second;
    }
    if (base + size - cur >= need) {
      *at = cur, *chunk = base, *chunk_size = size;
      return true;
    }
  }
  const size_t size = need > kChunk ? round_up(need, kGranule) : kChunk;
  if (size < need) return false;
  CUdeviceptr base = reserve_va_locked(size, kGranule);
  if (!base) return false;
  pool->chunks[base] = size;
  *at = base, *chunk = base, *chunk_size = size;
  return true;
}

}  // namespace

// An allocation leaves its pool's chunk (g_mem_mu held).
void fake::pool_forget_locked(const Alloc& a) {
  if (a.pool) a.pool->placed.erase(a.base);
}

namespace {

// The stream names the context: a thread with none current may allocate and free on an explicit
// stream; on the legacy stream it needs one (CUDA_ERROR_INVALID_CONTEXT), as driver 580 answers
// (tests/conformance, section thread, on the H200).
CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream h) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  CUctx_st* ctx;
  {
    std::lock_guard lk(g_mu);
    std::shared_ptr<CUstream_st> s;
    if (CUresult r = get_stream_locked(h, &s)) return r;
    ctx = s->ctx;
  }
  {
    std::lock_guard lk(g_mem_mu);
    if (!pool_alive(pool)) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mem_mu);
  if (!pool_alive(pool)) return CUDA_ERROR_INVALID_HANDLE;
  if (bytesize > kTotalMem - g_used) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr at = 0, chunk = 0;
  size_t chunk_size = 0;
  if (!pool_place_locked(pool, bytesize, &at, &chunk, &chunk_size)) return CUDA_ERROR_OUT_OF_MEMORY;
  Alloc* a = place_locked(ctx, at, bytesize);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  pool->placed[at] = round_up(bytesize, kAlign);
  a->pool = pool;
  a->map_base = chunk;
  a->map_size = chunk_size;
  pool->used += bytesize;
  pool->used_high = std::max(pool->used_high, pool->used);
  *dptr = at;
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, &g_default_pool, hStream);
}
FAKE_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, &g_default_pool, hStream);
}
FAKE_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_async(dptr, bytesize, pool, hStream);
}
FAKE_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                       CUstream hStream) {
  return alloc_async(dptr, bytesize, pool, hStream);
}

FAKE_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  {
    std::lock_guard lk(g_mu);  // the stream's context, not the thread's (alloc_async)
    std::shared_ptr<CUstream_st> s;
    if (CUresult r = get_stream_locked(hStream, &s)) return r;
  }
  if (CUresult r = free_graph_alloc(dptr); r != CUDA_ERROR_NOT_FOUND) return r;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs.find(dptr);
    if (it == g_allocs.end() || it->second->vmm) return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  submit_locked(s, [dptr] {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs.find(dptr);
    if (it == g_allocs.end()) return;
    if (auto* pool = it->second->pool) pool->used -= it->second->size;
    g_used -= it->second->size;
    pool_forget_locked(*it->second);
    g_allocs.erase(it);
  });
  return CUDA_SUCCESS;
}
FAKE_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFreeAsync(dptr, hStream); }

// The pool cuMemAllocAsync uses: the default one (cuDeviceSetMemPool is not implemented).
FAKE_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }

FAKE_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = &g_default_pool;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !valid_device(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  auto p = make_handle<CUmemPoolHandle_st>();
  std::lock_guard lk(g_mem_mu);
  *pool = p.get();
  g_pools.emplace(p.get(), std::move(p));
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  if (!g_pools.count(pool)) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [base, a] : g_allocs)
    if (a->pool == pool) a->pool = nullptr;  // the real driver frees them when they are freed
  g_pools.erase(pool);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  return pool_alive(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  if (!pool_alive(pool)) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *static_cast<cuuint64_t*>(value) = pool->release_threshold; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = pool->used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = pool->used_high; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

FAKE_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  if (!pool_alive(pool)) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = *static_cast<cuuint64_t*>(value); return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;  // may only be reset
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---------- pointer attributes ----------
// Device allocations only (pinned host ranges answer MEMORY_TYPE host); anything else is not a
// CUDA pointer: cuPointerGetAttribute fails, cuPointerGetAttributes reports zeros.

namespace {

// Attributes every allocation has on driver 580, whatever its kind (seen on the H200): P2P tokens
// (zeros here), no shareable handle types, a block id, and the mapping that holds it, in whole
// 2 MiB granules. CUDA_ERROR_NOT_FOUND for the other attributes.
CUresult mapping_attribute(void* data, CUpointer_attribute attr, uint64_t base, uint64_t size) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: std::memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS)); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *static_cast<uint64_t*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *static_cast<uint64_t*>(data) = base; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *static_cast<CUdeviceptr*>(data) = base; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *static_cast<size_t*>(data) = (size + (2u << 20) - 1) & ~size_t((2u << 20) - 1); break;
    default: return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

// What device memory can do on the H200, each answered 1 (driver 580).
bool device_capability(CUpointer_attribute attr) {
  return attr == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || attr == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE ||
         attr == CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE || attr == CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE;
}

// A managed allocation (g_mem_mu held): memory type device, as driver 580 reports managed memory
// (CU_MEMORYTYPE_UNIFIED is never returned), and IS_MANAGED.
CUresult managed_attribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr,
                           const std::pair<const uintptr_t, Pinned>& m) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = m.second.managed; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = reinterpret_cast<void*>(ptr); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = m.first; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *static_cast<unsigned*>(data) = 1; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = m.first; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = m.second.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = 1; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *static_cast<unsigned*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *static_cast<unsigned*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *static_cast<CUmemoryPool*>(data) = nullptr; break;
    default:
      if (mapping_attribute(data, attr, m.first, m.second.size) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  {
    std::lock_guard lk(g_mem_mu);
    if (auto* m = find_managed_locked(ptr)) return managed_attribute(data, attr, ptr, *m);
  }
  Span s;
  // device_span also finds mapped pinned host memory (no allocation behind it): that is host memory here.
  bool device = device_span(ptr, 1, &s) && s.hold;
  // A pinned host range: its base and size (its whole range is one buffer, as the driver reports).
  uintptr_t pin_base = 0;
  size_t pin_size = 0;
  if (!device) {
    std::lock_guard lk(g_mem_mu);
    auto it = g_pinned.upper_bound(ptr);
    if (it != g_pinned.begin() && ptr - std::prev(it)->first < std::prev(it)->second.size)
      pin_base = std::prev(it)->first, pin_size = std::prev(it)->second.size;
  }
  if (!device && !pin_size) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base = device ? s.hold->base : pin_base, size = device ? s.hold->size : pin_size;
  if (device && s.hold->map_size && (attr == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR || attr == CU_POINTER_ATTRIBUTE_MAPPING_SIZE))
    base = s.hold->map_base, size = s.hold->map_size;  // a pool's chunk
  if (!device && attr == CU_POINTER_ATTRIBUTE_P2P_TOKENS) return CUDA_ERROR_INVALID_VALUE;  // device memory only
  if (CUresult r = mapping_attribute(data, attr, base, size); r != CUDA_ERROR_NOT_FOUND) return r;
  if (device && device_capability(attr)) {
    // cuMemAlloc's memory; stream-ordered and VMM memory say 0 but for SYNC_MEMOPS (driver 580).
    *static_cast<unsigned*>(data) = attr == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || !(s.hold->pool || s.hold->vmm);
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      // Stream-ordered and VMM memory belong to no context (driver 580 answers NULL).
      *static_cast<CUcontext*>(data) = device ? (s.hold->pool || s.hold->vmm ? nullptr : s.hold->ctx) : current_ctx_locked();
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = device ? s.hold->base : pin_base; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device && s.hold->ctx ? s.hold->ctx->device : 0;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
      CUdeviceptr range_base = device ? s.hold->base : pin_base;
      size_t range_size = device ? s.hold->size : pin_size;
      // A VMM mapping's range is its reservation's (driver 580: 4 granules reserved, 1 mapped → 8 MiB).
      if (device && s.hold->vmm) {
        std::lock_guard lk(g_mem_mu);
        vmm_reservation_locked(ptr, &range_base, &range_size);
      }
      if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *static_cast<size_t*>(data) = range_size;
      else
        *static_cast<CUdeviceptr*>(data) = range_base;
      break;
    }
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *static_cast<unsigned*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *static_cast<unsigned*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *static_cast<CUmemoryPool*>(data) = device ? s.hold->pool : nullptr; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);  // current_ctx_locked
  return pointer_attribute(data, attribute, ptr);
}

FAKE_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                                 void** data, CUdeviceptr ptr) {
  if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (!data[i]) continue;
    uint8_t tmp[16] = {};
    // Not a CUDA pointer: zeros, and success; its device ordinal is -2 (driver 580 on the H200).
    if (pointer_attribute(tmp, attributes[i], ptr) != CUDA_SUCCESS && attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
      int none = -2;
      std::memcpy(tmp, &none, sizeof none);
    }
    size_t n = attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS ? 16
               : (attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ||
                  attributes[i] == CU_POINTER_ATTRIBUTE_MAPPED || attributes[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
                  attributes[i] == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || attributes[i] == CU_POINTER_ATTRIBUTE_ACCESS_FLAGS ||
                  attributes[i] == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE ||
                  attributes[i] == CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE ||
                  attributes[i] == CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE)
                   ? 4
                   : 8;
    std::memcpy(data[i], tmp, n);
  }
  return CUDA_SUCCESS;
}

// ---------- managed memory: advice, prefetch, attach, range attributes ----------
// Accepted for managed ranges and changing nothing: every byte is where the CPU and the fake's
// kernels both reach it.

namespace {

CUresult managed_range(CUdeviceptr p, size_t n) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mem_mu);
  auto* m = find_managed_locked(p);
  if (!m || n > m->second.size - (p - m->first)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult stream_ok(CUstream h) {
  std::unique_lock lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  return get_stream_locked(h, &s);
}

}  // namespace

FAKE_API CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice, CUstream hStream) {
  if (CUresult r = managed_range(devPtr, count)) return r;
  return stream_ok(hStream);
}
FAKE_API CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dev, CUstream hStream) {
  return cuMemPrefetchAsync(devPtr, count, dev, hStream);
}
FAKE_API CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation, unsigned int flags,
                                                CUstream hStream) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return cuMemPrefetchAsync(devPtr, count, 0, hStream);
}
FAKE_API CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation loc, unsigned int flags,
                                                     CUstream hStream) {
  return cuMemPrefetchAsync_v2(devPtr, count, loc, flags, hStream);
}
FAKE_API CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise, CUdevice) {
  return managed_range(devPtr, count);
}
FAKE_API CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise, CUmemLocation) {
  return managed_range(devPtr, count);
}
FAKE_API CUresult CUDAAPI cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = managed_range(dptr, 1)) return r;  // length 0: the whole allocation
  return stream_ok(hStream);
}
FAKE_API CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags) {
  return cuStreamAttachMemAsync(hStream, dptr, length, flags);
}
// Answers as for memory nobody advised: not read-mostly, no preferred location, last prefetched nowhere.
FAKE_API CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute, CUdeviceptr devPtr,
                                                 size_t count) {
  if (!data || dataSize == 0 || dataSize % 4) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = managed_range(devPtr, count)) return r;
  std::memset(data, 0, dataSize);
  return CUDA_SUCCESS;
}
FAKE_API CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* dataSizes, CUmem_range_attribute* attributes,
                                                  size_t numAttributes, CUdeviceptr devPtr, size_t count) {
  if (!data || !dataSizes || !attributes || numAttributes == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i)
    if (CUresult r = cuMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count)) return r;
  return CUDA_SUCCESS;
}

// For the fake NCCL (fakecuda/nccl/), which runs in the same process and moves device bytes as
// real NCCL's kernels would: the host bytes behind device range [p, p + n), or nullptr when the
// range is not wholly inside one live allocation (or mapped host buffer). The bytes stay valid
// while work queued before a cuMemFree of them runs (cuMemFree waits for it).
extern "C" __attribute__((visibility("default"))) void* fakecuda_device_bytes(CUdeviceptr p, size_t n) {
  fake::Span s;
  if (!fake::device_span(p, n == 0 ? 1 : n, &s)) return nullptr;
  return s.host;
}
