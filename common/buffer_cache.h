// Freed large buffers kept for the next allocation of their size class, instead of handing them
// back to malloc: a buffer of tens of MiB or more comes from mmap, and the kernel zeroes each of
// its pages at the first touch, a cost a reused buffer does not pay (on a loopback copy into a
// fresh 1 GiB buffer, clear_page was a fifth of the receiver's time; bench/torch_bench.py).
//
// Two users, each behind a c10::Allocator of its own: rgpu-opserver --device cpu's tensors
// (opserver/cpu_allocator.cpp) and the PyTorch device's `.cpu()` results on the client
// (python/rgpu/csrc/runtime/host_cache.cpp).
//
// Size classes are 8 per power of two (at most 12.5% more than asked), so a sequence that grows
// by a token reuses its predecessor's buffers too. At most max_cached bytes are kept; a buffer
// freed past that goes back to the system. Header-only: both users link torch, not rgpu_common.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace rgpu {

class BufferCache {
 public:
  using AllocFn = void* (*)(size_t);
  using FreeFn = void (*)(void*);

  // Buffers under min_cached bytes are allocated and freed as asked, never kept.
  BufferCache(AllocFn alloc, FreeFn free, size_t min_cached, size_t max_cached)
      : alloc_(alloc), free_(free), min_cached_(min_cached), max_cached_(max_cached) {}

  // n rounded up to its class: n itself under min_cached, else to the next eighth of its power of two.
  size_t size_class(size_t n) const {
    if (n < min_cached_) return n;
    size_t top = size_t{1} << (63 - __builtin_clzll(n));  // the highest power of two <= n
    size_t step = top >> 3;
    return (n + step - 1) / step * step;
  }

  // A kept buffer of n's class when there is one, else a new one (nullptr when the system has none).
  void* allocate(size_t n) {
    if (n < min_cached_ || max_cached_ == 0) return alloc_(n);
    size_t c = size_class(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = kept_.find(c);
      if (it != kept_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= c;
        ++reused_;
      }
    }
    if (!p) p = alloc_(c);
    if (p) {
      std::lock_guard<std::mutex> lk(mu_);
      class_of_[p] = c;
    }
    return p;
  }

  // Takes back a buffer of allocate(): kept while there is room, else freed.
  void release(void* p) {
    if (!p) return;
    std::unique_lock<std::mutex> lk(mu_);
    auto it = class_of_.find(p);
    if (it == class_of_.end()) {  // a small one (or one from before the cache was off)
      lk.unlock();
      free_(p);
      return;
    }
    size_t c = it->second;
    class_of_.erase(it);
    if (cached_ + c > max_cached_) {
      lk.unlock();
      free_(p);
      return;
    }
    kept_[c].push_back(p);
    cached_ += c;
  }

  // Frees every kept buffer; returns their bytes (torch.rgpu.empty_cache on the client).
  size_t trim() {
    std::unordered_map<size_t, std::vector<void*>> kept;
    size_t bytes;
    {
      std::lock_guard<std::mutex> lk(mu_);
      kept.swap(kept_);
      bytes = cached_;
      cached_ = 0;
    }
    for (auto& [c, list] : kept)
      for (void* p : list) free_(p);
    return bytes;
  }

  size_t cached_bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return cached_;
  }
  // Allocations served from a kept buffer since the start.
  size_t reused() const {
    std::lock_guard<std::mutex> lk(mu_);
    return reused_;
  }

 private:
  const AllocFn alloc_;
  const FreeFn free_;
  const size_t min_cached_;
  const size_t max_cached_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> kept_;  // class -> buffers free for reuse
  std::unordered_map<void*, size_t> class_of_;           // each handed-out buffer's class
  size_t cached_ = 0;
  size_t reused_ = 0;
};

}  // namespace rgpu
