// Occupancy by block-size search and stream attributes: enough for CI to run rgpu's client/server
// paths for them (tests/e2e/extras_test.c). Virtual memory management is vmm.cpp.
//
// - cuOccupancyMaxPotentialBlockSize[WithFlags]: tries every multiple of 32 up to the limit
//   (blockSizeLimit, else 1024) with the formula of cuOccupancyMaxActiveBlocksPerMultiprocessor
//   (library.cpp: 2048 threads, 32 blocks and the SM's shared memory per SM), calling the
//   block-size → shared-memory function for each; the largest block of the best occupancy wins,
//   minGridSize is blocks per SM × 132 SMs.
// - cuStreamGet/SetAttribute: priority is the stream's own (clamped to [-5, 0] as at creation);
//   the other attributes valid for streams are stored and returned as set (synchronization
//   policy defaults to CU_SYNC_POLICY_AUTO), and nothing acts on them.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "fakecuda/internal.h"

using namespace fake;

namespace {

CUresult potential_block_size(int* minGridSize, int* blockSize, CUfunction func, CUoccupancyB2DSize b2d,
                              size_t dynamicSMemSize, int blockSizeLimit) {
  if (CUresult r = check_init()) return r;
  if (!minGridSize || !blockSize || blockSizeLimit < 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lk(g_mu);
    if (!g_funcs.count(func)) return CUDA_ERROR_INVALID_HANDLE;
  }
  int limit = blockSizeLimit > 0 ? std::min(blockSizeLimit, kMaxThreadsPerBlock) : kMaxThreadsPerBlock;
  int best_block = 0, best_blocks = 0, best_threads = 0;
  for (int bs = 32; bs <= limit; bs += 32) {
    int blocks = blocks_per_sm(bs, b2d ? b2d(bs) : dynamicSMemSize);
    if (blocks * bs >= best_threads && blocks > 0) {
      best_threads = blocks * bs;
      best_blocks = blocks;
      best_block = bs;
    }
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  return CUDA_SUCCESS;
}

// Stream attributes other than priority, per live stream (the weak pointer tells a new stream
// at a reused address apart).
struct StoredAttrs {
  std::weak_ptr<CUstream_st> stream;
  std::map<int, CUlaunchAttributeValue> values;
};
std::map<CUstream_st*, StoredAttrs>& stored() {
  static auto* m = new std::map<CUstream_st*, StoredAttrs>;  // g_mu guards it
  return *m;
}

bool stream_attribute(int attr) {
  return attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
         attr == CU_LAUNCH_ATTRIBUTE_PRIORITY || attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP ||
         attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN || attr == CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING;
}

StoredAttrs& attrs_of_locked(const std::shared_ptr<CUstream_st>& s) {
  StoredAttrs& a = stored()[s.get()];
  if (a.stream.lock() != s) a = StoredAttrs{s, {}};
  return a;
}

CUresult get_attribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* out) {
  if (CUresult r = check_init()) return r;
  if (!out || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  CUlaunchAttributeValue v{};
  if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
    v.priority = s->priority;
  } else {
    auto& values = attrs_of_locked(s).values;
    if (auto it = values.find(attr); it != values.end()) v = it->second;
    else if (attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY) v.syncPolicy = CU_SYNC_POLICY_AUTO;
  }
  *out = v;
  return CUDA_SUCCESS;
}

CUresult set_attribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* in) {
  if (CUresult r = check_init()) return r;
  if (!in || !stream_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(h, &s)) return r;
  if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) s->priority = std::min(0, std::max(-5, in->priority));
  else attrs_of_locked(s).values[attr] = *in;
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize, int blockSizeLimit) {
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                              blockSizeLimit);
}

FAKE_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize,
                                                                    CUfunction func,
                                                                    CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                    size_t dynamicSMemSize, int blockSizeLimit,
                                                                    unsigned int flags) {
  if (flags & ~unsigned(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) return CUDA_ERROR_INVALID_VALUE;
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                              blockSizeLimit);
}

FAKE_API CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return get_attribute(hStream, attr, value);
}
FAKE_API CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                    CUstreamAttrValue* value_out) {
  return get_attribute(hStream, attr, value_out);
}
FAKE_API CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr,
                                               const CUstreamAttrValue* param) {
  return set_attribute(hStream, attr, param);
}
FAKE_API CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                    const CUstreamAttrValue* value) {
  return set_attribute(hStream, attr, value);
}

// TMA descriptors: the real encoding is the driver's secret; the fake's is its own (the address
// in the first 8 bytes, then the data type, the rank, the dimensions and the box), enough for
// tests to see a whole 128-byte map travel and an address replaced.
FAKE_API CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                 cuuint32_t tensorRank, void* globalAddress,
                                                 const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                 const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                 CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  if (!tensorMap || tensorRank == 0 || tensorRank > 5 || !globalDim || !boxDim || !elementStrides ||
      (reinterpret_cast<uintptr_t>(globalAddress) & 15))
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t w[16] = {};
  w[0] = reinterpret_cast<uintptr_t>(globalAddress);
  w[1] = (uint64_t(tensorDataType) << 32) | tensorRank;
  for (cuuint32_t i = 0; i < tensorRank; ++i) w[2 + i] = globalDim[i];
  for (cuuint32_t i = 0; i < tensorRank; ++i) w[7 + i] = boxDim[i];
  std::memcpy(tensorMap, w, sizeof w);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  if (!tensorMap || (reinterpret_cast<uintptr_t>(globalAddress) & 15)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t a = reinterpret_cast<uintptr_t>(globalAddress);
  std::memcpy(tensorMap, &a, sizeof a);
  return CUDA_SUCCESS;
}
