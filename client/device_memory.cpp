// Implementation of client/device_memory.h.
#include "client/device_memory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "client/call.h"
#include "client/contexts.h"
#include "client/runtime.h"
#include "common/env.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"

namespace rgpu::client::device_memory {
namespace {

struct Ahead {
  std::vector<CUdeviceptr> spare;  // allocated, not handed out
  uint32_t next_extra = 1;         // how many to ask for with the next refill
};

std::mutex g_mu;
std::map<CUdeviceptr, size_t> g_held;                               // base -> size
std::map<std::pair<CUcontext, size_t>, Ahead> g_ahead;              // (context, size) -> spares
uint64_t g_ahead_bytes = 0;

void hold_locked(CUdeviceptr p, size_t size) { g_held[p] = size; }

// Frees every allocation held ahead (the server is out of memory). Sent one-way, in order before
// the retried request.
void release_ahead() {
  std::vector<CUdeviceptr> all;
  {
    std::lock_guard lk(g_mu);
    for (auto& [key, a] : g_ahead) {
      all.insert(all.end(), a.spare.begin(), a.spare.end());
      a.spare.clear();
      a.next_extra = 1;
    }
    g_ahead_bytes = 0;
  }
  for (CUdeviceptr p : all) {
    Call c(op::cuMemFree_v2, kOneWay);
    c.args().put<uint64_t>(p);
    c.invoke();
  }
}

// One kOpAllocAhead round trip: the allocation, plus up to `extra` more of `size` kept for later.
CUresult ask(CUcontext ctx, size_t size, uint32_t extra, CUdeviceptr* dptr) {
  Call c(proto::kOpAllocAhead, kWaits);
  c.args().put_u64(size);
  c.args().put_u32(extra);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  Reader& r = c.reply();
  CUdeviceptr first = r.u64();
  uint32_t n = r.u32();
  if (!r.ok() || n > extra) return CUDA_ERROR_UNKNOWN;
  std::vector<CUdeviceptr> more(n);
  for (auto& p : more) p = r.u64();
  if (!r.ok()) return CUDA_ERROR_UNKNOWN;
  std::lock_guard lk(g_mu);
  hold_locked(first, size);
  if (n) {
    Ahead& a = g_ahead[{ctx, size}];
    a.spare.insert(a.spare.end(), more.begin(), more.end());
    g_ahead_bytes += uint64_t{n} * size;
  }
  *dptr = first;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult allocate(CUdeviceptr* dptr, size_t size) {
  trace_call("cuMemAlloc_v2");
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = contexts::current();
  uint32_t extra = 0;
  if (ctx && env::get().alloc_ahead) {
    std::lock_guard lk(g_mu);
    Ahead& a = g_ahead[{ctx, size}];
    if (!a.spare.empty()) {
      *dptr = a.spare.back();
      a.spare.pop_back();
      g_ahead_bytes -= size;
      hold_locked(*dptr, size);
      return CUDA_SUCCESS;
    }
    // A refill: twice as many as last time, within what may be held ahead in all.
    uint64_t room = g_ahead_bytes >= kAheadBytes ? 0 : kAheadBytes - g_ahead_bytes;
    room = std::min<uint64_t>(room, proto::kMaxAllocAheadBytes);
    extra = static_cast<uint32_t>(std::min<uint64_t>({a.next_extra, room / size, proto::kMaxAllocAhead}));
    a.next_extra = std::min<uint32_t>(a.next_extra * 2, proto::kMaxAllocAhead);
  }
  CUresult rc = ask(ctx, size, extra, dptr);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && ahead_bytes() > 0) {
    release_ahead();
    rc = ask(ctx, size, 0, dptr);
  }
  return rc;
}

void forget(CUdeviceptr ptr) {
  std::lock_guard lk(g_mu);
  g_held.erase(ptr);
}

bool contains(CUdeviceptr ptr, size_t n) {
  std::lock_guard lk(g_mu);
  auto it = g_held.upper_bound(ptr);
  if (it == g_held.begin()) return false;
  --it;
  return ptr - it->first <= it->second && n <= it->second - (ptr - it->first);
}

uint64_t ahead_bytes() {
  std::lock_guard lk(g_mu);
  return g_ahead_bytes;
}

}  // namespace rgpu::client::device_memory
