// Which driver calls can make the GPU touch memory, and which wait for the GPU: what mapped host
// memory (server/mapped_memory.h) needs to know to exchange pages only where it matters.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "gen/ops.gen.h"
#include "protocol/messages.h"

namespace rgpu {

namespace detail {
inline std::vector<uint8_t> classify(const char* const* prefixes, size_t n) {
  std::vector<uint8_t> v(65536, 0);
  for (uint32_t op = 0; op < v.size(); ++op) {
    const char* name = op::name(static_cast<uint16_t>(op));
    if (!name) continue;
    for (size_t i = 0; i < n; ++i)
      if (std::strncmp(name, prefixes[i], std::strlen(prefixes[i])) == 0) v[op] = 1;
  }
  return v;
}
}  // namespace detail

// Launches, graph launches, copies and memsets: the GPU work that may read host memory mapped
// for it, so the client's changes go to the server first.
inline bool op_touches_memory(uint16_t op) {
  static const char* const kPrefixes[] = {"cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset"};
  static const std::vector<uint8_t> table = detail::classify(kPrefixes, 4);
  return table[op] != 0 || op == proto::kOpMappedCopy;
}

// Calls after which the GPU's work so far may be finished: synchronizes, queries, blocking
// copies. The server sends mapped memory's changes before their replies.
inline bool op_synchronizes(uint16_t op) {
  static const char* const kPrefixes[] = {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                                          "cuStreamQuery", "cuEventQuery", "cuMemcpy"};
  static const std::vector<uint8_t> table = detail::classify(kPrefixes, 6);
  return table[op] != 0 || op == proto::kOpMappedCopy;
}

}  // namespace rgpu
