// Implementation of client/device_work.h.
#include "client/device_work.h"

#include <atomic>
#include <bitset>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <cuda.h>

#include "client/contexts.h"
#include "client/mapped_memory.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"

namespace rgpu::client::device_work {
namespace {

// Entry points, by name prefix, whose work nothing on the host can observe before a later call:
// copies into device memory and memsets (their sources were copied before the call returned),
// allocation, loading, creating and destroying objects, attributes and queries; and waiting itself.
constexpr const char* kInvisiblePrefixes[] = {
    "cuMemcpyHtoD", "cuMemsetD", "cuMemAlloc", "cuMemFree", "cuMemGetInfo", "cuMemGetAddressRange",
    "cuPointerGetAttribute", "cuEventCreate", "cuEventDestroy", "cuEventRecord", "cuStreamCreate",
    "cuStreamDestroy", "cuStreamGet", "cuLibraryLoad", "cuLibraryGet", "cuLibraryUnload", "cuKernelGet",
    "cuKernelSetAttribute", "cuKernelSetCacheConfig", "cuModuleLoad", "cuModuleGet", "cuModuleUnload",
    "cuFuncGet", "cuFuncSetAttribute", "cuFuncSetCacheConfig", "cuFuncSetSharedMemConfig", "cuOccupancy",
    "cuDeviceGet", "cuDevicePrimaryCtx", "cuCtxGet", "cuCtxSetCurrent",
    "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxSetLimit", "cuDriverGetVersion", "cuGetErrorName",
    "cuGetErrorString", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuStreamQuery",
    "cuEventQuery", "cuEventElapsedTime", "cuStreamIsCapturing", "cuThreadExchangeStreamCaptureMode",
};

// Entry points, by exact name, that leave nothing behind: the synchronous copies to the host
// return once their data is there.
constexpr const char* kInvisibleNames[] = {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"};

// Control ops (protocol/messages.h) that only load, name or ask.
constexpr uint16_t kInvisibleControl[] = {
    proto::kOpSnapshot,           proto::kOpModuleByHash,   proto::kOpToolsContextObject,
    proto::kOpModuleFunctions,    proto::kOpExportTableInfo, proto::kOpSessions,
    proto::kOpParamLayout,        proto::kOpFuncAttributes, proto::kOpClusterOccupancyTable,
    proto::kOpAllocAhead,         proto::kOpAllocMany,      proto::kOpClusterTopology,
};

struct Tables {
  std::bitset<op::kLast + 1> invisible;
  std::bitset<op::kLast + 1> per_thread;  // the _ptsz/_ptds forms: stream 0 is this thread's own
};

Tables build_tables() {
  Tables t;
  for (uint16_t c : kInvisibleControl) t.invisible.set(c);
  for (uint16_t o = op::kFirst; o <= op::kLast; ++o) {
    const char* n = op::name(o);
    if (!n) continue;
    for (const char* p : kInvisiblePrefixes)
      if (std::strncmp(n, p, std::strlen(p)) == 0) t.invisible.set(o);
    for (const char* p : kInvisibleNames)
      if (std::strcmp(n, p) == 0) t.invisible.set(o);
    size_t len = std::strlen(n);
    if (len > 5 && (std::strcmp(n + len - 5, "_ptsz") == 0 || std::strcmp(n + len - 5, "_ptds") == 0))
      t.per_thread.set(o);
  }
  return t;
}

const Tables& tables() {
  static const Tables t = build_tables();
  return t;
}

// The key a stream is kept under. The legacy default stream has two names (0 and
// CU_STREAM_LEGACY); a per-thread default stream is not told apart from other threads' and so
// counts as "any stream" (only a context synchronize clears it).
uint64_t stream_key(uint16_t o, uint64_t stream) {
  if (stream == reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD)) return kAnyStream;
  if (stream == 0 && o <= op::kLast && tables().per_thread.test(o)) return kAnyStream;
  if (stream == reinterpret_cast<uint64_t>(CU_STREAM_LEGACY)) return 0;
  return stream;
}

thread_local bool t_unanswered = false;  // this thread: a one-way call not yet answered for

std::mutex g_mu;
std::unordered_set<CUcontext> g_any_busy;          // contexts where some call named no stream
std::unordered_map<uint64_t, CUcontext> g_busy;    // streams with work a synchronize must wait for
// Bumped by every synced() (under g_mu): a thread that noted a stream since the last bump knows
// it is still busy, so back-to-back launches on one stream take g_mu once, not once each.
std::atomic<uint64_t> g_clears{0};
thread_local uint64_t t_noted_stream = kAnyStream - 1;  // no stream yet
thread_local CUcontext t_noted_ctx = nullptr;
thread_local uint64_t t_noted_at = ~uint64_t{0};

}  // namespace

bool invisible(uint16_t o) { return o <= op::kLast && tables().invisible.test(o); }

void note(uint16_t o, uint64_t stream) {
  if (invisible(o)) return;
  stream = stream_key(o, stream);
  const CUcontext ctx = contexts::current();
  if (stream == t_noted_stream && ctx == t_noted_ctx && g_clears.load(std::memory_order_acquire) == t_noted_at)
    return;
  std::lock_guard lk(g_mu);
  if (stream == kAnyStream)
    g_any_busy.insert(ctx);
  else
    g_busy.emplace(stream, ctx);
  t_noted_stream = stream;
  t_noted_ctx = ctx;
  t_noted_at = g_clears.load(std::memory_order_relaxed);
}

void unanswered() { t_unanswered = true; }
void answered() { t_unanswered = false; }

bool must_wait(uint64_t /*stream*/) {
  if (t_unanswered) return true;
  // Mapped and managed memory are host memory the GPU writes: the program may look at it right
  // after any synchronize.
  if (mapped::active()) return true;
  std::lock_guard lk(g_mu);
  // Any busy stream at all: streams can depend on each other (the legacy default stream, events),
  // so a synchronize of one stream may wait for work queued on another.
  return !g_any_busy.empty() || !g_busy.empty();
}

void synced(uint16_t o, uint64_t stream, CUcontext ctx) {
  std::lock_guard lk(g_mu);
  g_clears.fetch_add(1, std::memory_order_release);
  if (stream == kAnyStream) {
    // A context synchronize: that context's work (the current one's, when ctx is nullptr).
    if (!ctx) ctx = contexts::current();
    g_any_busy.erase(ctx);
    std::erase_if(g_busy, [ctx](const auto& entry) { return entry.second == ctx; });
    return;
  }
  stream = stream_key(o, stream);
  if (stream != kAnyStream) g_busy.erase(stream);
}

}  // namespace rgpu::client::device_work
