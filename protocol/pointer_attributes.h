// How many bytes each CUpointer_attribute writes, for cuPointerGetAttribute(s) on the wire
// (client/driver/host_memory.cpp, server/handlers/memory.cpp). 0: an attribute this build does
// not know, refused. Handle-valued attributes (context, memory pool) travel as handle ids.
#pragma once

#include <cstdint>

namespace rgpu::proto {

inline uint32_t pointer_attribute_size(int attr) {
  switch (attr) {
    case 1: return 8;   // CONTEXT (a handle id)
    case 2: return 4;   // MEMORY_TYPE
    case 3: return 8;   // DEVICE_POINTER
    case 4: return 8;   // HOST_POINTER
    case 5: return 16;  // P2P_TOKENS
    case 6: return 4;   // SYNC_MEMOPS
    case 7: return 8;   // BUFFER_ID
    case 8: return 4;   // IS_MANAGED
    case 9: return 4;   // DEVICE_ORDINAL
    case 10: return 4;  // IS_LEGACY_CUDA_IPC_CAPABLE
    case 11: return 8;  // RANGE_START_ADDR
    case 12: return 8;  // RANGE_SIZE
    case 13: return 4;  // MAPPED
    case 14: return 8;  // ALLOWED_HANDLE_TYPES
    case 15: return 4;  // IS_GPU_DIRECT_RDMA_CAPABLE
    case 16: return 4;  // ACCESS_FLAGS
    case 17: return 8;  // MEMPOOL_HANDLE (a handle id)
    case 18: return 8;  // MAPPING_SIZE
    case 19: return 8;  // MAPPING_BASE_ADDR
    case 20: return 8;  // MEMORY_BLOCK_ID
    case 21: return 4;  // IS_HW_DECOMPRESS_CAPABLE
    default: return 0;
  }
}
inline constexpr int kPointerAttributeContext = 1;
inline constexpr int kPointerAttributeMempool = 17;
inline constexpr uint32_t kMaxPointerAttributes = 64;

}  // namespace rgpu::proto
