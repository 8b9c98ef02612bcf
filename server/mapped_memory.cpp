// Implementation of server/mapped_memory.h.
#include "server/mapped_memory.h"

#include <sys/mman.h>

#include <cstring>

#include "common/log.h"
#include "common/page_diff.h"

namespace rgpu::server {
namespace {

constexpr size_t kPage = 4096;
// Largest single mapped buffer a client may ask for.
constexpr uint64_t kMaxMapped = uint64_t(16) << 30;
// Largest kOpMappedUpdate payload (pages beyond go in further frames).
constexpr size_t kMaxUpdate = 4u << 20;

}  // namespace

void MappedMemory::alloc(const DriverTable& drv, Reader& in, Writer& out) {
  uint64_t base = in.u64(), size = in.u64();
  uint32_t flags = in.u32();
  if (!in.ok()) return;
  (void)flags;
  if (size == 0 || size > kMaxMapped || base % kPage) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!drv.cuMemHostRegister_v2 || !drv.cuMemHostGetDevicePointer_v2 || !drv.cuMemHostUnregister)
    return out.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  {
    std::lock_guard lk(mu_);
    if (by_client_.count(base)) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  }
  size_t len = (size + kPage - 1) / kPage * kPage;
  // The client's address first: then the device pointer equals the host pointer on both ends.
  void* p = mmap(reinterpret_cast<void*>(base), len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != MAP_FAILED && reinterpret_cast<uint64_t>(p) != base) {
    munmap(p, len);  // an old kernel that took the address as a hint only
    p = MAP_FAILED;
  }
  if (p == MAP_FAILED) p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return out.put<int32_t>(CUDA_ERROR_OUT_OF_MEMORY);
  CUresult rc = drv.cuMemHostRegister_v2(p, len, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  CUdeviceptr dptr = 0;
  if (rc == CUDA_SUCCESS) rc = drv.cuMemHostGetDevicePointer_v2(&dptr, p, 0);
  if (rc != CUDA_SUCCESS) {
    drv.cuMemHostUnregister(p);
    munmap(p, len);
    return out.put<int32_t>(rc);
  }
  Buffer b;
  b.client_base = base;
  b.data = static_cast<uint8_t*>(p);
  b.size = size;
  b.shadow.assign(size, 0);  // both copies start zeroed
  {
    std::lock_guard lk(mu_);
    by_client_[base] = std::move(b);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  if (reinterpret_cast<uint64_t>(p) != base)
    log::debug("mapped host memory: %llu bytes at %p here for the client's 0x%llx (address taken here)",
               static_cast<unsigned long long>(size), p, static_cast<unsigned long long>(base));
  out.put<int32_t>(CUDA_SUCCESS);
  out.put_u64(dptr);
  out.put_u64(reinterpret_cast<uint64_t>(p));
}

void MappedMemory::free(const DriverTable& drv, Reader& in, Writer& out) {
  uint64_t base = in.u64();
  if (!in.ok()) return;
  Buffer b;
  {
    std::lock_guard lk(mu_);
    auto it = by_client_.find(base);
    if (it == by_client_.end()) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    b = std::move(it->second);
    by_client_.erase(it);
    count_.fetch_sub(1, std::memory_order_relaxed);
  }
  size_t len = (b.size + kPage - 1) / kPage * kPage;
  CUresult rc = drv.cuMemHostUnregister ? drv.cuMemHostUnregister(b.data) : CUDA_ERROR_NOT_SUPPORTED;
  munmap(b.data, len);
  out.put<int32_t>(rc);
}

void MappedMemory::write(Reader& in, Writer& out) {
  uint64_t base = in.u64(), offset = in.u64();
  if (!in.ok()) return;
  size_t n = in.left();
  const uint8_t* bytes = in.view(n);
  std::lock_guard lk(mu_);
  auto it = by_client_.find(base);
  if (it == by_client_.end() || offset > it->second.size || n > it->second.size - offset)
    return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  std::memcpy(it->second.data + offset, bytes, n);
  std::memcpy(it->second.shadow.data() + offset, bytes, n);
  out.put<int32_t>(CUDA_SUCCESS);
}

bool MappedMemory::send_updates(const SendUpdate& send) {
  if (empty()) return true;
  std::lock_guard lk(mu_);
  std::vector<uint8_t> payload;
  for (auto& [base, b] : by_client_) {
    bool sent = for_each_changed_run(b.data, b.shadow.data(), b.size, kPage, kMaxUpdate, [&](size_t at, size_t n) {
      payload.clear();
      Writer w(&payload);
      w.put_u64(base);
      w.put_u64(at);
      w.append(b.data + at, n);
      // The shadow takes what was sent: the GPU may be changing the buffer meanwhile.
      std::memcpy(b.shadow.data() + at, payload.data() + 16, n);
      return send(payload);
    });
    if (!sent) return false;
  }
  return true;
}

}  // namespace rgpu::server
