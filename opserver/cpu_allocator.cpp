// The cpu allocator of rgpu-opserver --device cpu: keeps freed buffers of 64 KiB and more for the
// next allocation of their size class instead of handing them back to malloc.
//
// A client frees its tensors in batches (the storage changes that ride on its next message), so
// the server frees a training step's activations later than a local run would, in another order,
// while the next step is already allocating: malloc then maps fresh pages for the new buffers,
// and the kernel zeroes each page at its first touch. Reusing the step's own buffers skips both
// (bench/torch_gen_bench.py --train-pairs measures the step; bench/README.md).
//
// Size classes are 8 per power of two (at most 12.5% more than asked), so a sequence that grows
// by a token reuses its predecessor's buffers too. At most kMaxCachedBytes are kept; past that a
// freed buffer goes back to the system. The cache is never emptied: a cpu server has no caching
// allocator statistics to report (torch.rgpu.memory_reserved counts none), and empty_cache on cpu
// is a no-op in torch as well.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace rgpu::opserver {
namespace {

constexpr size_t kMinCached = 64 << 10;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;

size_t size_class(size_t n) {
  if (n <= kMinCached) return n;
  size_t top = size_t{1} << (63 - __builtin_clzll(n));  // the highest power of two <= n
  size_t step = top >> 3;
  return (n + step - 1) / step * step;
}

class ReusingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < kMinCached) {
      void* p = c10::alloc_cpu(n);
      return {p, p, &free_any, c10::Device(c10::kCPU)};
    }
    size_t c = size_class(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(c);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= c;
      }
    }
    if (!p) p = c10::alloc_cpu(c);
    {
      std::lock_guard<std::mutex> lk(mu_);
      sizes_[p] = c;
    }
    return {p, p, &free_any, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_any; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  static ReusingCpuAllocator& get() {
    static auto* a = new ReusingCpuAllocator;  // never destroyed: tensors may be freed at exit
    return *a;
  }

 private:
  static void free_any(void* p) { get().release(p); }

  void release(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) {  // a small buffer
      c10::free_cpu(p);
      return;
    }
    size_t c = it->second;
    sizes_.erase(it);
    if (cached_ + c > kMaxCachedBytes) {
      c10::free_cpu(p);
      return;
    }
    free_[c].push_back(p);
    cached_ += c;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> sizes_;
  size_t cached_ = 0;
};

}  // namespace

void install_reusing_cpu_allocator() {
  // Priority above the default's (0) and below what a profiler or test would force.
  c10::SetCPUAllocator(&ReusingCpuAllocator::get(), /*priority=*/1);
}

}  // namespace rgpu::opserver
