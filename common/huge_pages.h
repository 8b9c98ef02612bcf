// A hint for large buffers about to be filled from a socket: transparent huge pages, so that the
// first touch of a fresh 1 GiB buffer costs 512 page faults rather than 262144 (on a loopback copy
// into fresh memory the 4 KiB faults took half the time; bench/torch_bench.py). Only the whole
// 2 MiB pages inside [p, p + n) are advised; the kernel may ignore the hint (THP off: "never").
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace rgpu {

inline constexpr size_t kHugePage = size_t{2} << 20;

inline void advise_huge_pages(void* p, size_t n) {
  if (n < 2 * kHugePage) return;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHugePage - 1);
#ifdef MADV_HUGEPAGE
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace rgpu
