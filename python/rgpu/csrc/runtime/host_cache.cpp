// Host memory for the PyTorch device's `.cpu()` results (aten/kernels.cpp to_copy): a freed
// result of 1 MiB or more is kept for the next `.cpu()` of its size class (common/buffer_cache.h),
// up to RGPU_HOST_CACHE_MB (default 1 GiB) in all.
//
// Why: such a result is fresh memory from mmap, and the kernel zeroes each page as the received
// bytes first touch it; on a loopback `.cpu()` of 1 GiB that zeroing was a fifth of the client's
// time, the gap to the driver path's bulk bandwidth (bench/torch_bench.py). A program that reads
// the same tensors back every step (losses, logits, checkpoints) reuses its own buffers instead.
// The tensors are plain CPU tensors; only their memory's way back differs. torch.rgpu.empty_cache()
// (torch.accelerator.empty_cache()) frees what is kept.
#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>

#include "common/buffer_cache.h"
#include "common/env.h"
#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

BufferCache& cache() {
  // Leaked on purpose: tensors may be freed after static destructors ran.
  static auto* c = new BufferCache(&c10::alloc_cpu, &c10::free_cpu, /*min_cached=*/kHostCacheMin,
                                   env::get().host_cache_mb << 20);
  return *c;
}

void release(void* p) { cache().release(p); }

class HostCacheAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? cache().allocate(nbytes) : nullptr;
    TORCH_CHECK(p || !nbytes, "rgpu: out of host memory for a .cpu() result of ", nbytes, " bytes");
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dst, const void* src, std::size_t n) const override { std::memcpy(dst, src, n); }
};

HostCacheAllocator g_host_cache;

}  // namespace

c10::Allocator* host_cache_allocator() { return &g_host_cache; }

size_t empty_host_cache() { return cache().trim(); }

std::pair<size_t, size_t> host_cache_state() { return {cache().cached_bytes(), cache().reused()}; }

}  // namespace rgpu::torchdev
