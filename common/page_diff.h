// Runs of pages that differ between a buffer and its shadow: how mapped host memory finds what
// changed since the two ends last met (client/mapped_memory.cpp, server/mapped_memory.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rgpu {

// Calls fn(offset, length) for each run of whole pages (the last may be short) where data and
// shadow differ, each run at most max_run bytes (a longer change comes as several runs). fn
// returns false to stop; so does this function then.
template <class Fn>
bool for_each_changed_run(const uint8_t* data, const uint8_t* shadow, size_t size, size_t page, size_t max_run,
                          Fn fn) {
  auto differs = [&](size_t at) {
    return std::memcmp(data + at, shadow + at, std::min(page, size - at)) != 0;
  };
  for (size_t at = 0; at < size;) {
    if (!differs(at)) {
      at += std::min(page, size - at);
      continue;
    }
    size_t end = at + std::min(page, size - at);
    while (end < size && end - at < max_run && differs(end)) end += std::min(page, size - end);
    if (!fn(at, end - at)) return false;
    at = end;
  }
  return true;
}

}  // namespace rgpu
