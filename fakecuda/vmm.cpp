// Virtual memory management: address reservations, physical allocations by handle, mappings and
// their access, and shareable handles (JAX's and PyTorch's expandable-segment allocators, NVIDIA's
// vectorAddMMAP and memMapIPCDrv samples).
//
// - Granularity: 2 MiB, minimum and recommended, for pinned device memory on device 0. Sizes,
//   addresses and alignments given to the calls below must be multiples of it.
// - cuMemAddressReserve hands out fresh addresses in the device window (memory.cpp), never reused;
//   the address hint is ignored, as the driver may. cuMemAddressFree takes back a whole
//   reservation with nothing mapped in it.
// - cuMemCreate makes physical memory: a memfd of that size, mapped shared (pages are taken when
//   touched), counted in cuMemGetInfo until its handle is released and its last mapping is gone.
// - cuMemMap places a whole handle (offset 0) at a granule-aligned range inside one reservation
//   that nothing else is mapped at; the range becomes an allocation the copy, memset and kernel
//   paths find (memory.cpp's table), reachable only after cuMemSetAccess gives read access, as on
//   the driver. cuMemUnmap takes back whole mappings only.
// - cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR) dups the memfd, for a handle created
//   with that type requested; cuMemImportFromShareableHandle maps the same memory again, in this
//   process or another. Fabric handles → CUDA_ERROR_NOT_SUPPORTED (no fabric here).
// Every call takes memory.cpp's allocation lock (mem_mutex) and nothing else.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "fakecuda/internal.h"

using namespace fake;

namespace {

constexpr size_t kGranularity = size_t(2) << 20;

struct Phys {
  size_t size = 0;
  CUmemAllocationProp prop{};
  int fd = -1;                    // the memfd
  std::shared_ptr<uint8_t[]> bytes;  // its shared mapping; mappings hold it too
  int handle_refs = 0;            // cuMemCreate / import / retain, less cuMemRelease
  int mappings = 0;
  ~Phys() {
    if (fd >= 0) close(fd);
  }
};

// Handles are small numbers, never 0 and never reused.
std::map<CUmemGenericAllocationHandle, std::shared_ptr<Phys>>& g_handles =
    *new std::map<CUmemGenericAllocationHandle, std::shared_ptr<Phys>>;
CUmemGenericAllocationHandle g_next_handle = 0x1000;
std::map<CUdeviceptr, size_t>& g_reserved = *new std::map<CUdeviceptr, size_t>;  // base → size
// Which handle each mapping (by its base) maps.
std::map<CUdeviceptr, CUmemGenericAllocationHandle>& g_mapped = *new std::map<CUdeviceptr, CUmemGenericAllocationHandle>;

bool aligned(uint64_t v) { return v % kGranularity == 0; }

// Forgets a handle whose last reference and last mapping are gone (lock held).
void maybe_free_locked(CUmemGenericAllocationHandle h) {
  auto it = g_handles.find(h);
  if (it == g_handles.end() || it->second->handle_refs > 0 || it->second->mappings > 0) return;
  uncharge_locked(it->second->size);
  g_handles.erase(it);
}

// The physical memory of size bytes from fd (owned), or null.
std::shared_ptr<uint8_t[]> map_fd(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [size](uint8_t* q) { munmap(q, size); });
}

CUresult new_handle_locked(int fd, size_t size, const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* out) {
  auto bytes = map_fd(fd, size);
  if (!bytes) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!charge_locked(size)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto ph = std::make_shared<Phys>();
  ph->size = size;
  ph->prop = prop;
  ph->fd = fd;
  ph->bytes = std::move(bytes);
  ph->handle_refs = 1;
  *out = g_next_handle++;
  g_handles.emplace(*out, std::move(ph));
  return CUDA_SUCCESS;
}

// The mapping holding p (lock held), or null.
Alloc* mapping_at_locked(CUdeviceptr p) {
  auto& allocs = allocs_locked();
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  Alloc* a = it->second.get();
  return a->vmm && p - a->base < a->size ? a : nullptr;
}

// The reservation holding [p, p + n) (lock held), or g_reserved.end().
std::map<CUdeviceptr, size_t>::iterator reservation_locked(CUdeviceptr p, size_t n) {
  auto it = g_reserved.upper_bound(p);
  if (it == g_reserved.begin()) return g_reserved.end();
  --it;
  if (p - it->first >= it->second || n > it->second - (p - it->first)) return g_reserved.end();
  return it;
}

// Whether anything (a mapping or an allocation) overlaps [p, p + n) (lock held).
bool overlaps_locked(CUdeviceptr p, size_t n) {
  auto& allocs = allocs_locked();
  auto it = allocs.lower_bound(p + n);
  if (it == allocs.begin()) return false;
  --it;
  return it->first + it->second->size > p;
}

}  // namespace

bool fake::vmm_reservation_locked(CUdeviceptr p, CUdeviceptr* base, size_t* size) {
  auto it = reservation_locked(p, 1);
  if (it == g_reserved.end()) return false;
  *base = it->first;
  *size = it->second;
  return true;
}

FAKE_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                        CUmemAllocationGranularity_flags option) {
  if (CUresult r = check_init()) return r;
  // The location and type are not checked here: driver 580 answers 2 MiB for device 7 and for an
  // invalid type alike (seen on the H200); cuMemCreate refuses them.
  if (!granularity || !prop ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                              unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (!ptr || size == 0 || !aligned(size) || flags != 0 || (alignment & (alignment - 1))) return CUDA_ERROR_INVALID_VALUE;
  (void)addr;  // a hint
  std::lock_guard lk(mem_mutex());
  CUdeviceptr base = reserve_va_locked(size, std::max(alignment, kGranularity));
  if (!base) return CUDA_ERROR_OUT_OF_MEMORY;
  g_reserved.emplace(base, size);
  *ptr = base;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(mem_mutex());
  auto it = g_reserved.find(ptr);
  if (it == g_reserved.end() || it->second != size || overlaps_locked(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  g_reserved.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                      unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (!handle || !prop || size == 0 || !aligned(size) || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, off_t(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lk(mem_mutex());
  return new_handle_locked(fd, size, *prop, handle);
}

FAKE_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(mem_mutex());
  auto it = g_handles.find(handle);
  if (it == g_handles.end() || it->second->handle_refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second->handle_refs;
  maybe_free_locked(handle);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                 CUmemGenericAllocationHandle handle) {
  if (CUresult r = check_init()) return r;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mem_mutex());
  auto it = g_handles.find(handle);
  if (it == g_handles.end() || it->second->handle_refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second->prop;
  prop->win32HandleMetaData = nullptr;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                   unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (offset != 0) return CUDA_ERROR_NOT_SUPPORTED;  // "currently must be zero" (cuda.h); refused so on the H200
  if (size == 0 || flags != 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  {
    std::lock_guard lk(g_mu);
    ctx = current_ctx_locked();
  }
  std::lock_guard lk(mem_mutex());
  auto h = g_handles.find(handle);
  if (h == g_handles.end() || h->second->handle_refs <= 0 || size > h->second->size) return CUDA_ERROR_INVALID_VALUE;
  if (reservation_locked(ptr, size) == g_reserved.end() || overlaps_locked(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  auto a = std::make_shared<Alloc>();
  a->base = ptr;
  a->size = size;
  a->ctx = ctx;
  a->data = h->second->bytes;
  a->vmm = true;
  allocs_locked().emplace(ptr, std::move(a));
  g_mapped.emplace(ptr, handle);
  ++h->second->mappings;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_init()) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mem_mutex());
  // [ptr, ptr + size) must be whole mappings, one after another; a reserved range with nothing
  // mapped in it is already unmapped (SUCCESS, as on the H200).
  std::vector<CUdeviceptr> bases;
  if (!overlaps_locked(ptr, size) && reservation_locked(ptr, size) != g_reserved.end()) return CUDA_SUCCESS;
  for (CUdeviceptr p = ptr; p < ptr + size;) {
    Alloc* a = mapping_at_locked(p);
    if (!a || a->base != p || a->size > ptr + size - p) return CUDA_ERROR_INVALID_VALUE;
    bases.push_back(p);
    p += a->size;
  }
  for (CUdeviceptr b : bases) {
    allocs_locked().erase(b);
    auto m = g_mapped.find(b);
    CUmemGenericAllocationHandle h = m->second;
    g_mapped.erase(m);
    --g_handles.at(h)->mappings;
    maybe_free_locked(h);
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = check_init()) return r;
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lk(mem_mutex());
  std::vector<Alloc*> maps;
  for (CUdeviceptr p = ptr; p < ptr + size;) {
    Alloc* a = mapping_at_locked(p);
    if (!a) return CUDA_ERROR_INVALID_VALUE;  // a hole in the range
    maps.push_back(a);
    p = a->base + a->size;
  }
  for (Alloc* a : maps) {
    for (size_t i = 0; i < count; ++i) a->access_of[desc[i].location.id] = int(desc[i].flags);  // the last one for a device wins
    a->access = 0;
    for (int f : a->access_of) a->access |= f;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (CUresult r = check_init()) return r;
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(mem_mutex());
  Alloc* a = mapping_at_locked(ptr);
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  *flags = static_cast<unsigned long long>(a->access_of[location->id]);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = check_init()) return r;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mem_mutex());
  Alloc* a = mapping_at_locked(reinterpret_cast<CUdeviceptr>(addr));
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  CUmemGenericAllocationHandle h = g_mapped.at(a->base);
  ++g_handles.at(h)->handle_refs;
  *handle = h;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                       CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (!shareableHandle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mem_mutex());
  auto it = g_handles.find(handle);
  if (it == g_handles.end() || it->second->handle_refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  // A type the handle was not created for is an invalid value (fabric included, on the H200).
  if (!(it->second->prop.requestedHandleTypes & handleType)) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = fcntl(it->second->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                         CUmemAllocationHandleType shHandleType) {
  if (CUresult r = check_init()) return r;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || !aligned(uint64_t(st.st_size))) return CUDA_ERROR_INVALID_VALUE;
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps (and closes) its descriptor
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  std::lock_guard lk(mem_mutex());
  return new_handle_locked(own, size_t(st.st_size), prop, handle);
}
