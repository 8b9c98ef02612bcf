// Pinned host memory for rgpu (Tensor.pin_memory(), DataLoader(pin_memory=True)): what users pin
// memory for is uploads that do not wait, and every upload to rgpu is already one-way (its bytes
// are queued and sent behind the caller, runtime/connection.h), so pinned memory here is plain
// host memory that remembers it was pinned: is_pinned() says True, and non_blocking copies from
// it never wait for the server, as torch.cuda's do.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <map>
#include <mutex>

#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

std::mutex g_mu;
std::map<uintptr_t, size_t> g_ranges;  // start -> length of each pinned block

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_ranges.erase(reinterpret_cast<uintptr_t>(p));
  }
  c10::free_cpu(p);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lk(g_mu);
      g_ranges[reinterpret_cast<uintptr_t>(p)] = nbytes;
    }
    return {p, p, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dst, const void* src, std::size_t n) const override { std::memcpy(dst, src, n); }
};

PinnedAllocator g_pinned;

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned; }

bool is_pinned(const void* p) {
  auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_ranges.upper_bound(at);
  if (it == g_ranges.begin()) return false;
  --it;
  return at < it->first + it->second;
}

}  // namespace rgpu::torchdev
