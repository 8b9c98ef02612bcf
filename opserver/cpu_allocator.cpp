// The cpu allocator of rgpu-opserver --device cpu: keeps freed buffers of 64 KiB and more for the
// next allocation of their size class instead of handing them back to malloc (common/buffer_cache.h).
//
// A client frees its tensors in batches (the storage changes that ride on its next message), so
// the server frees a training step's activations later than a local run would, in another order,
// while the next step is already allocating: malloc then maps fresh pages for the new buffers,
// and the kernel zeroes each page at its first touch. Reusing the step's own buffers skips both
// (bench/torch_gen_bench.py --train-pairs measures the step; bench/README.md), as does a `.to("rgpu")`
// of a tensor of a size uploaded before (bench/torch_bench.py).
//
// At most 1 GiB is kept. The cache is never emptied: a cpu server has no caching allocator
// statistics to report (torch.rgpu.memory_reserved counts none), and empty_cache on cpu is a no-op
// in torch as well.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>

#include "common/buffer_cache.h"

namespace rgpu::opserver {
namespace {

class ReusingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = cache().allocate(n);
    return {p, p, &free_any, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_any; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  static ReusingCpuAllocator& get() {
    static auto* a = new ReusingCpuAllocator;  // never destroyed: tensors may be freed at exit
    return *a;
  }

 private:
  static BufferCache& cache() {
    static auto* c = new BufferCache(&c10::alloc_cpu, &c10::free_cpu, /*min_cached=*/64 << 10,
                                     /*max_cached=*/size_t{1} << 30);
    return *c;
  }
  static void free_any(void* p) { cache().release(p); }
};

}  // namespace

void install_reusing_cpu_allocator() {
  // Priority above the default's (0) and below what a profiler or test would force.
  c10::SetCPUAllocator(&ReusingCpuAllocator::get(), /*priority=*/1);
}

}  // namespace rgpu::opserver
