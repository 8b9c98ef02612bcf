// Contexts: created ones, the device's primary context, and each thread's context stack.
//
// Semantics chosen:
// - Each device's primary context is one permanent object; "active" while retained (refs > 0). Releasing
//   the last reference or cuDevicePrimaryCtxReset tears down what it owns (streams, memory,
//   modules, events) and clears its sticky error; the handle stays valid for the next retain.
// - A context poisoned by a fault (sticky CUDA_ERROR_ILLEGAL_ADDRESS) answers that error to every
//   call that uses it until it is destroyed or (primary) reset, as the real driver does.
#include <algorithm>
#include <iterator>

#include "fakecuda/internal.h"

namespace fake {

std::mutex& g_mu = *new std::mutex;
std::condition_variable& g_cv = *new std::condition_variable;
std::unordered_map<CUctx_st*, HandlePtr<CUctx_st>>& g_ctxs = *new std::unordered_map<CUctx_st*, HandlePtr<CUctx_st>>;
std::unordered_map<CUstream_st*, std::shared_ptr<CUstream_st>>& g_streams =
    *new std::unordered_map<CUstream_st*, std::shared_ptr<CUstream_st>>;
std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>& g_events =
    *new std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>;
std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>>& g_modules = *new std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>>;
std::unordered_map<CUfunc_st*, CUmod_st*>& g_funcs = *new std::unordered_map<CUfunc_st*, CUmod_st*>;

namespace {

thread_local std::vector<CUctx_st*> t_stack;  // back() is current
CUctx_st* g_primary[8] = {};  // one per device (RGPU_FAKE_DEVICES), created on first use, never freed

CUctx_st* primary_locked(CUdevice dev) {
  CUctx_st*& p = g_primary[dev];
  if (!p) {
    p = new_ctx_locked(0, true);
    p->device = dev;
  }
  return p;
}

// Takes c out of every context's peer list (it was destroyed or torn down), and empties its own.
void forget_peer_locked(CUctx_st* c) {
  for (auto& [raw, other] : g_ctxs) std::erase(other->peers, c);
  c->peers.clear();
}

bool usable_locked(CUctx_st* c) { return ctx_alive_locked(c) && (!c->primary || c->primary_refs > 0); }

// Every CUlimit cuda.h 13.0 declares, with what a fresh context on an H200 under driver 580
// answers, and how cuCtxSetLimit treats it: the values and codes are the real driver's
// (tests/conformance/h200.txt, driver 580.159.04). cuBLASLt 13 asks for CU_LIMIT_CIG_ENABLED when it
// sets up a handle (cublasLtCtxInit, from cublasCreate_v2 too); it takes SUCCESS,
// INVALID_CONTEXT and INVALID_VALUE in its stride, but on any other answer (the fake's
// UNSUPPORTED_LIMIT, when it knew only limits 0 to 6) it skips copying the device's description
// into the handle's block and still reports success, so every later heuristic read malloc'd
// garbage: crashes and CUBLAS_STATUS_NOT_SUPPORTED/INTERNAL_ERROR that varied with the heap.
// Pinned by fakecuda_test Fake.AnswersEveryLimitCudaHDeclaresWithTheDriversDefaults,
// ctest conformance_fake and tests/e2e/test_torch_train.py.
enum class SetRule {
  kStore,          // kept as given
  kL2Hint,         // a hint of 0..128 bytes; above that CUDA_ERROR_INVALID_VALUE, value kept
  kPersist,        // up to CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE; above, INVALID_VALUE
  kNotPermitted,   // query-only: CUDA_ERROR_NOT_PERMITTED
  kUnsupported,    // not on this device, get and set: CUDA_ERROR_UNSUPPORTED_LIMIT
};
struct LimitRule {
  CUlimit limit;
  size_t initial;
  SetRule set;
};
constexpr size_t kMaxPersistingL2 = 39321600;  // CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE (device.cpp)
constexpr LimitRule kLimits[] = {
    {CU_LIMIT_STACK_SIZE, 1024, SetRule::kStore},                // bytes per thread
    {CU_LIMIT_PRINTF_FIFO_SIZE, 8650752, SetRule::kStore},       // 8.25 MiB (cuda.h says 1 MiB)
    {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20, SetRule::kStore},       // 8 MiB
    // cuda.h: settable only below compute capability 9.0; on an H200 not even read.
    {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 0, SetRule::kUnsupported},
    {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048, SetRule::kStore},
    {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64, SetRule::kL2Hint},
    // 30% of the maximum (11796480 of 39321600). Values up to the maximum are stored as given
    // (not recorded whether the driver rounds them).
    {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, kMaxPersistingL2 / 10 * 3, SetRule::kPersist},
    // CIG (CUDA in graphics) limits of a context that is not CIG-enabled, which no cuCtxCreate
    // through rgpu is: read, not set. The shared memory a kernel may use is the device's opt-in
    // maximum per block; the fallback limit is not answered at all.
    {CU_LIMIT_SHMEM_SIZE, 232448, SetRule::kNotPermitted},
    {CU_LIMIT_CIG_ENABLED, 0, SetRule::kNotPermitted},
    {CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED, 0, SetRule::kUnsupported},
};
static_assert(std::size(kLimits) == CU_LIMIT_MAX, "a CUlimit of cuda.h has no rule");

const LimitRule* limit_rule(CUlimit limit) {
  for (const LimitRule& rule : kLimits)
    if (rule.limit == limit) return &rule;
  return nullptr;
}

void reset_limits(CUctx_st* c) {
  for (const LimitRule& rule : kLimits) c->limits[rule.limit] = rule.initial;
}

}  // namespace

void* handle_storage_alloc(size_t size) {
  constexpr size_t kAlign = 256, kOffset = 16;
  void* base = std::aligned_alloc(kAlign, (size + kOffset + kAlign - 1) / kAlign * kAlign);
  if (!base) throw std::bad_alloc();
  return static_cast<char*>(base) + kOffset;
}

void handle_storage_free(void* p) { std::free(static_cast<char*>(p) - 16); }

bool ctx_alive_locked(CUctx_st* c) { return c && g_ctxs.count(c); }

CUctx_st* new_ctx_locked(unsigned flags, bool primary) {
  auto c = make_handle<CUctx_st>();
  CUctx_st* raw = c.get();
  raw->flags = flags;
  raw->primary = primary;
  reset_limits(raw);
  g_ctxs.emplace(raw, std::move(c));
  raw->null_stream = new_stream_locked(raw, 0, 0, true);
  return raw;
}

CUctx_st* current_ctx_locked() {
  if (t_stack.empty()) return nullptr;
  CUctx_st* c = t_stack.back();
  return usable_locked(c) ? c : nullptr;
}

CUresult current_ctx(CUctx_st** out) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUctx_st* c = current_ctx_locked();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->sticky) return c->sticky;
  *out = c;
  return CUDA_SUCCESS;
}

void teardown_ctx(std::unique_lock<std::mutex>& lk, CUctx_st* c) {
  forget_peer_locked(c);
  wait_seq(lk, c->null_stream, c->null_stream->submitted);
  std::vector<std::shared_ptr<CUstream_st>> streams;
  for (auto& [raw, s] : g_streams)
    if (s->ctx == c) streams.push_back(s);
  for (auto& s : streams) {
    g_streams.erase(s.get());
    stop_stream(lk, s);
  }
  for (auto it = g_events.begin(); it != g_events.end();) it = it->second->ctx == c ? g_events.erase(it) : std::next(it);
  for (auto it = g_modules.begin(); it != g_modules.end();) {
    if (it->second->ctx != c) {
      ++it;
      continue;
    }
    for (auto& f : it->second->funcs) g_funcs.erase(f.get());
    it = g_modules.erase(it);
  }
  lk.unlock();
  free_ctx_allocations(c);
  lk.lock();
  c->sticky = CUDA_SUCCESS;
  reset_limits(c);  // a primary context active again starts as a new one does
}

void poison(CUctx_st* c, CUresult err) {
  std::lock_guard lk(g_mu);
  if (ctx_alive_locked(c) && c->sticky == CUDA_SUCCESS) c->sticky = err;
}

}  // namespace fake

using namespace fake;

namespace {

CUresult create_ctx(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(g_mu);
  CUctx_st* c = new_ctx_locked(flags, false);
  c->device = dev;
  t_stack.push_back(c);
  *pctx = c;
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_ctx(pctx, flags, dev);
}

FAKE_API CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                         unsigned int flags, CUdevice dev) {
  if (numParams != 0 || paramsArray) return CUDA_ERROR_NOT_SUPPORTED;  // no execution affinity on the fake
  return create_ctx(pctx, flags, dev);
}

FAKE_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                                         CUdevice dev) {
  if (ctxCreateParams && (ctxCreateParams->execAffinityParams || ctxCreateParams->numExecAffinityParams ||
                          ctxCreateParams->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;
  return create_ctx(pctx, flags, dev);
}

FAKE_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  std::unique_lock lk(g_mu);
  if (!ctx_alive_locked(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  teardown_ctx(lk, ctx);
  stop_stream(lk, ctx->null_stream);
  g_ctxs.erase(ctx);
  // Only this thread's stack can be fixed up here; other threads find the context gone.
  t_stack.erase(std::remove(t_stack.begin(), t_stack.end(), ctx), t_stack.end());
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!usable_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!ctx) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!usable_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_stack.empty())
    t_stack.push_back(ctx);
  else
    t_stack.back() = ctx;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  *pctx = current_ctx_locked();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  *device = c->device;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!ctx) return cuCtxGetDevice(device);
  if (CUresult r = check_init()) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  if (!usable_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  *flags = c->flags | CU_CTX_MAP_HOST;  // always on, and reported so (seen on the H200)
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  *config = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}

namespace {
CUresult sync_ctx(CUctx_st* c) {
  std::unique_lock lk(g_mu);
  if (!usable_locked(c)) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> targets{{c->null_stream, c->null_stream->submitted}};
  for (auto& [raw, s] : g_streams)
    if (s->ctx == c) targets.emplace_back(s, s->submitted);
  for (auto& [s, seq] : targets) wait_seq(lk, s, seq);
  return ctx_alive_locked(c) ? c->sticky : CUDA_ERROR_INVALID_CONTEXT;
}
}  // namespace

FAKE_API CUresult CUDAAPI cuCtxSynchronize(void) {
  if (CUresult r = check_init()) return r;
  CUctx_st* c;
  {
    std::lock_guard lk(g_mu);
    c = current_ctx_locked();
  }
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  return sync_ctx(c);
}

FAKE_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  if (!ctx) return cuCtxSynchronize();
  if (CUresult r = check_init()) return r;
  return sync_ctx(ctx);
}

FAKE_API CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (CUresult r = check_init()) return r;
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  if (!ctx) ctx = current_ctx_locked();
  if (!usable_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  // The primary context reports 3020 on the H200 (driver 580); a created one is not recorded.
  *version = ctx->primary ? 3020 : 12050;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard lk(g_mu);
  // Past the last limit cuda.h declares: INVALID_VALUE; one the device lacks: UNSUPPORTED_LIMIT.
  const LimitRule* rule = limit_rule(limit);
  if (!rule) return CUDA_ERROR_INVALID_VALUE;
  if (rule->set == SetRule::kUnsupported) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  auto it = c->limits.find(limit);
  if (it == c->limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *pvalue = it->second;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  const LimitRule* rule = limit_rule(limit);
  if (!rule) return CUDA_ERROR_INVALID_VALUE;
  switch (rule->set) {
    case SetRule::kStore: break;
    case SetRule::kL2Hint:
      if (value > 128) return CUDA_ERROR_INVALID_VALUE;
      break;
    case SetRule::kPersist:
      if (value > kMaxPersistingL2) return CUDA_ERROR_INVALID_VALUE;
      break;
    case SetRule::kNotPermitted: return CUDA_ERROR_NOT_PERMITTED;
    case SetRule::kUnsupported: return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  std::lock_guard lk(g_mu);
  c->limits[limit] = value;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

// ---------- primary context ----------

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(g_mu);
  CUctx_st* p = primary_locked(dev);
  ++p->primary_refs;
  *pctx = p;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lk(g_mu);
  CUctx_st* p = primary_locked(dev);
  if (p->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--p->primary_refs == 0) teardown_ctx(lk, p);
  return CUDA_SUCCESS;
}

// The unversioned symbol (cudart's exit path calls it): the same as _v2, as on the real driver.
FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lk(g_mu);
  CUctx_st* p = primary_locked(dev);
  teardown_ctx(lk, p);
  p->primary_refs = 0;
  p->flags = 0;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = check_init()) return r;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(g_mu);
  CUctx_st* p = primary_locked(dev);
  *flags = p->flags;
  *active = p->primary_refs > 0;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = check_init()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~0x1fu) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  primary_locked(dev)->flags = flags;
  return CUDA_SUCCESS;
}

// ---------- peer access ----------
// Two different devices of this fake can always reach each other (an H200 SXM board's NVLink);
// the codes are the driver's: a context of the same device is INVALID_DEVICE, a second enable
// PEER_ACCESS_ALREADY_ENABLED, a disable of what was never enabled PEER_ACCESS_NOT_ENABLED. The
// fake's kernels reach every device's memory whether or not access was enabled.

FAKE_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  if (CUresult r = check_init()) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  CUctx_st* c = current_ctx_locked();
  if (!c || !ctx_alive_locked(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == c->device) return CUDA_ERROR_INVALID_DEVICE;
  if (std::find(c->peers.begin(), c->peers.end(), peer) != c->peers.end()) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  c->peers.push_back(peer);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  CUctx_st* c = current_ctx_locked();
  if (!c || !ctx_alive_locked(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  if (std::erase(c->peers, peer) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}
