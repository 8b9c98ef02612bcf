// Streams and events. Every stream, the context's default stream included, has a worker thread
// that runs its queue in order, so asynchronous calls return before their work is done.
//
// The default stream has legacy semantics: an operation queued on it waits for everything
// already queued on the context's blocking streams, and an operation queued on a blocking
// stream waits for everything already queued on the default stream. CU_STREAM_NON_BLOCKING
// streams take part in neither. CU_STREAM_PER_THREAD and the _ptsz entry points are treated as
// the legacy stream. These dependencies are captured as (stream, sequence number) pairs when an
// operation is queued, so they always point at earlier work and cannot deadlock.
// cuStreamDestroy waits for the stream's queued work before it returns (the real driver returns
// at once and finishes the work in the background); callers see no difference except time.
// Work queued on a capturing stream is captured instead (fakecuda/graph.cpp, "stream capture").
#include <chrono>
#include <cstdlib>
#include <new>

#include "fakecuda/internal.h"

namespace fake {

// Stream capture (fakecuda/graph.cpp), g_mu held: true when s is capturing and the work became
// graph nodes instead of being queued.
bool capture_work_locked(const CUstream_st* s, std::function<void()>* fn);
// A synchronize of a capturing stream: true (and the capture is invalidated) when s is capturing.
bool capture_invalidate_locked(const CUstream_st* s);
bool capture_host_locked(const CUstream_st* s, CUhostFn fn, void* user);
bool capture_event_record_locked(const CUstream_st* s, const CUevent_st* e);
bool capture_event_wait_locked(const CUstream_st* s, const CUevent_st* e, CUresult* r);
bool capturing_locked(const CUstream_st* s);

namespace {

bool deps_ready(const Op& op) {
  for (auto& [s, seq] : op.deps)
    if (s->completed < seq) return false;
  return true;
}

void worker_main(CUstream_st* s) {
  checkpoint_never_wait();  // a lock waits for the queued work to finish: it must not wait for the lock
  std::unique_lock lk(g_mu);
  for (;;) {
    g_cv.wait(lk, [&] { return (!s->queue.empty() && deps_ready(s->queue.front())) || (s->stop && s->queue.empty()); });
    if (s->queue.empty()) return;  // stopped and drained
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    // A poisoned context runs nothing more, like a GPU after a fault.
    bool run = ctx_alive_locked(s->ctx) && s->ctx->sticky == CUDA_SUCCESS;
    lk.unlock();
    if (run) op.fn();
    op = Op{};  // drop captured buffers and stream references outside the lock
    lk.lock();
    ++s->completed;
    g_cv.notify_all();
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_default_handle(CUstream h) { return h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD; }

}  // namespace

std::shared_ptr<CUstream_st> new_stream_locked(CUctx_st* c, unsigned flags, int priority, bool is_null) {
  std::shared_ptr<CUstream_st> s = make_handle<CUstream_st>();
  s->ctx = c;
  s->flags = flags;
  s->priority = priority;
  s->is_null = is_null;
  s->worker = std::thread(worker_main, s.get());
  return s;
}

CUresult get_stream_locked(CUstream h, std::shared_ptr<CUstream_st>* out) {
  if (is_default_handle(h)) {
    CUctx_st* c = current_ctx_locked();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->sticky) return c->sticky;
    *out = c->null_stream;
    return CUDA_SUCCESS;
  }
  auto it = g_streams.find(h);
  if (it == g_streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (!ctx_alive_locked(it->second->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (it->second->ctx->sticky) return it->second->ctx->sticky;
  *out = it->second;
  return CUDA_SUCCESS;
}

uint64_t submit_locked(const std::shared_ptr<CUstream_st>& s, std::function<void()> fn,
                       std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> extra_deps) {
  // Captured instead of queued: nothing new to wait for on this stream.
  if (capture_work_locked(s.get(), &fn)) return s->submitted;
  Op op{std::move(extra_deps), std::move(fn)};
  if (s->is_null) {
    for (auto& [raw, other] : g_streams)
      if (other->ctx == s->ctx && !(other->flags & CU_STREAM_NON_BLOCKING) && other->submitted > other->completed)
        op.deps.emplace_back(other, other->submitted);
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
    auto& n = s->ctx->null_stream;
    if (n->submitted > n->completed) op.deps.emplace_back(n, n->submitted);
  }
  s->queue.push_back(std::move(op));
  g_cv.notify_all();
  return ++s->submitted;
}

void wait_seq(std::unique_lock<std::mutex>& lk, const std::shared_ptr<CUstream_st>& s, uint64_t seq) {
  g_cv.wait(lk, [&] { return s->completed >= seq; });
}

void stop_stream(std::unique_lock<std::mutex>& lk, const std::shared_ptr<CUstream_st>& s) {
  s->stop = true;
  g_cv.notify_all();
  if (!s->worker.joinable()) return;
  lk.unlock();
  s->worker.join();
  lk.lock();
}

}  // namespace fake

using namespace fake;

// ---------- streams ----------

FAKE_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  if (!phStream || (flags & ~unsigned(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard lk(g_mu);
  auto s = new_stream_locked(c, flags, std::min(0, std::max(-5, priority)), false);
  g_streams.emplace(s.get(), s);
  *phStream = s.get();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return cuStreamCreateWithPriority(phStream, Flags, 0);
}

FAKE_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::unique_lock lk(g_mu);
  auto it = g_streams.find(hStream);
  if (it == g_streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> s = it->second;
  g_streams.erase(it);
  stop_stream(lk, s);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::unique_lock lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  // Not permitted while capturing: refused, and the capture can only fail from here (driver 580).
  if (capture_invalidate_locked(s.get())) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  // Synchronizing the legacy stream waits for the blocking streams too: queue a marker there.
  uint64_t seq = s->is_null ? submit_locked(s, [] {}) : s->submitted;
  wait_seq(lk, s, seq);
  return ctx_alive_locked(s->ctx) ? s->ctx->sticky : CUDA_ERROR_INVALID_CONTEXT;
}

FAKE_API CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  if (s->completed < s->submitted) return CUDA_ERROR_NOT_READY;
  if (s->is_null)
    for (auto& [raw, other] : g_streams)
      if (other->ctx == s->ctx && !(other->flags & CU_STREAM_NON_BLOCKING) && other->completed < other->submitted)
        return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (Flags & ~unsigned(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  auto it = g_events.find(hEvent);
  if (it == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUevent_st* e = it->second.get();
  // An external wait is a graph's event-wait node: only in a stream capture (driver 580).
  if ((Flags & CU_EVENT_WAIT_EXTERNAL) && !capturing_locked(s.get())) return CUDA_ERROR_ILLEGAL_STATE;
  CUresult captured = CUDA_SUCCESS;
  if (capture_event_wait_locked(s.get(), e, &captured)) return captured;
  if (!e->recorded) return CUDA_SUCCESS;  // waiting on a never-recorded event is a no-op
  submit_locked(s, [] {}, {{e->stream, e->seq}});
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  if (CUresult r = check_init()) return r;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int* priority) {
  if (CUresult r = check_init()) return r;
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  *pctx = s->ctx;
  return CUDA_SUCCESS;
}

// ---------- events ----------

// The context first, then the arguments (driver 580: no current context is INVALID_CONTEXT
// whatever the arguments). An interprocess event must be untimed.
FAKE_API CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~unsigned(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
    return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  auto e = std::make_shared<CUevent_st>();
  e->ctx = c;
  e->flags = Flags;
  g_events.emplace(e.get(), e);
  *phEvent = e.get();
  return CUDA_SUCCESS;
}

// CU_EVENT_RECORD_EXTERNAL is the only flag, and only in a stream capture (an event-record
// node); outside one it is ILLEGAL_STATE, any other bit INVALID_VALUE (driver 580).
FAKE_API CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (CUresult r = check_init()) return r;
  if (flags & ~unsigned(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_mu);
  auto it = g_events.find(hEvent);
  if (it == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  if ((flags & CU_EVENT_RECORD_EXTERNAL) && !capturing_locked(s.get())) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<CUevent_st> e = it->second;
  if (capture_event_record_locked(s.get(), e.get())) return CUDA_SUCCESS;
  uint64_t gen = ++e->generation;
  e->recorded = true;
  e->stream = s;
  e->seq = submit_locked(s, [e, gen] {
    std::lock_guard lk2(g_mu);
    if (e->generation == gen) e->time_ns = now_ns();
  });
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  return cuEventRecordWithFlags(hEvent, hStream, 0);
}

FAKE_API CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  auto it = g_events.find(hEvent);
  if (it == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUevent_st* e = it->second.get();
  if (e->recorded && e->stream->completed < e->seq) return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::unique_lock lk(g_mu);
  auto it = g_events.find(hEvent);
  if (it == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUevent_st> e = it->second;
  if (!e->recorded) return CUDA_SUCCESS;
  std::shared_ptr<CUstream_st> s = e->stream;
  wait_seq(lk, s, e->seq);
  return ctx_alive_locked(e->ctx) ? e->ctx->sticky : CUDA_ERROR_INVALID_CONTEXT;
}

FAKE_API CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (CUresult r = check_init()) return r;
  // A NULL out-pointer is INVALID_HANDLE on driver 580, even for two recorded, completed events
  // (rgpu_conformance "null elapsed out").
  if (!pMilliseconds) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lk(g_mu);
  auto a = g_events.find(hStart), b = g_events.find(hEnd);
  if (a == g_events.end() || b == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUevent_st *s = a->second.get(), *e = b->second.get();
  if ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!s->recorded || !e->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (s->stream->completed < s->seq || e->stream->completed < e->seq) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = float(double(e->time_ns - s->time_ns) / 1e6);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

FAKE_API CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  // Pending records keep the object alive (they hold a reference); the handle dies now.
  return g_events.erase(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// ---------- per-thread-default-stream variants: the legacy stream stands in ----------

FAKE_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return cuStreamSynchronize(h); }
FAKE_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return cuStreamQuery(h); }

FAKE_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f) { return cuStreamWaitEvent(h, e, f); }
FAKE_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int* f) { return cuStreamGetFlags(h, f); }
FAKE_API CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int* p) { return cuStreamGetPriority(h, p); }
FAKE_API CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext* c) { return cuStreamGetCtx(h, c); }
FAKE_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream h) { return cuEventRecord(e, h); }
FAKE_API CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int f) {
  return cuEventRecordWithFlags(e, h, f);
}

// ---------- host functions ----------
// Run on the stream's worker, in order: later work on the stream starts after the function
// returns, as on the real driver. A poisoned context runs no more work, so a callback queued
// behind a fault never runs (the real driver calls cuStreamAddCallback callbacks with the error;
// the fake only reports it at the next synchronize).

FAKE_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  if (capture_host_locked(s.get(), fn, userData)) return CUDA_SUCCESS;
  submit_locked(s, [fn, userData] { fn(userData); });
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                              unsigned int flags) {
  if (!callback || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = get_stream_locked(hStream, &s)) return r;
  submit_locked(s, [hStream, callback, userData] { callback(hStream, CUDA_SUCCESS, userData); });
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* u) { return cuLaunchHostFunc(h, fn, u); }
FAKE_API CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* u, unsigned int f) {
  return cuStreamAddCallback(h, cb, u, f);
}
