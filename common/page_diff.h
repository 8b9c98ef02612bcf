// Runs of pages that differ between a buffer and its shadow: how mapped host memory finds what
// changed since the two ends last met, where nothing better tells it (the server after a kernel
// ran; the client where the kernel cannot track writes). client/mapped_memory.cpp,
// server/mapped_memory.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rgpu {

// Calls fn(offset, length) for each run of whole pages (the last may be short) for which
// differs(offset, length) holds, each run at most max_run bytes (a longer one comes as several
// runs). fn returns false to stop; so does this function then.
template <class Differs, class Fn>
bool for_each_run(size_t size, size_t page, size_t max_run, Differs differs, Fn fn) {
  auto step = [&](size_t at) { return std::min(page, size - at); };
  for (size_t at = 0; at < size;) {
    if (!differs(at, step(at))) {
      at += step(at);
      continue;
    }
    size_t end = at + step(at);
    while (end < size && end - at < max_run && differs(end, step(end))) end += step(end);
    if (!fn(at, end - at)) return false;
    at = end;
  }
  return true;
}

// The runs of pages where data and shadow differ.
template <class Fn>
bool for_each_changed_run(const uint8_t* data, const uint8_t* shadow, size_t size, size_t page, size_t max_run,
                          Fn fn) {
  return for_each_run(size, page, max_run,
                      [&](size_t at, size_t n) { return std::memcmp(data + at, shadow + at, n) != 0; }, fn);
}

// The runs of pages that hold anything but zeros (what a peer that starts zeroed lacks).
template <class Fn>
bool for_each_nonzero_run(const uint8_t* data, size_t size, size_t page, size_t max_run, Fn fn) {
  return for_each_run(size, page, max_run,
                      [&](size_t at, size_t n) {
                        const uint8_t* p = data + at;
                        return n != 0 && (p[0] != 0 || std::memcmp(p, p + 1, n - 1) != 0);
                      },
                      fn);
}

}  // namespace rgpu
