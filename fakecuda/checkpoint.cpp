// The checkpoint API (cuCheckpointProcess*, driver 570 and newer; cuda.h "CUDA Checkpointing"),
// faithful enough for rgpu-smi suspend / resume / migrate to be tested without a GPU.
//
// The real API is called by one process on another (by pid). Here the target does the work: each
// process listens, from cuInit on, on an abstract Unix socket named by its pid
// (fakecuda/checkpoint_wire.h), on a thread of its own, and the caller's entry points send it
// one request each. The state machine is the documented one:
//
//   RUNNING --Lock--> LOCKED --Checkpoint--> CHECKPOINTED --Restore--> LOCKED --Unlock--> RUNNING
//
// and any other transition is CUDA_ERROR_ILLEGAL_STATE ("Process must be in the RUNNING state in
// order to lock", and so on). While the target is LOCKED or CHECKPOINTED its driver calls block
// (cuda.h: "CUDA API locks are taken so further CUDA API calls will block"; NVIDIA's
// cuda-checkpoint README: calls "may block until CUDA is resumed"): here, every entry point that
// checks initialisation or the current context (check_init, current_ctx) waits in
// checkpoint_gate() until the process runs again. Lock also waits for the work already queued on
// every stream to finish, as the driver does before a checkpoint ("already-submitted CUDA work ...
// are completed"), up to the lock's timeout; past it the process is left RUNNING and the lock
// fails. Checkpoint copies every device allocation into host memory the fake keeps and then
// overwrites the allocation with 0xCD bytes, so a restore that failed to bring the contents back
// shows; Restore copies them back. With GPU pairs, Restore moves the process's GPUs (the fake
// notes which GPU each of its devices lives on; kWhere reports it to tests): every pair's old UUID
// must be a GPU the process was on and every GPU it was on must have a pair, and the new UUID must
// be one of this fake's GPUs (RGPU_FAKE_DEVICES).
//
// What the fake does not model: memory of one process counted against another's cuMemGetInfo
// (each fake process has a whole GPU to itself), calls already inside the driver when the lock
// came (they finish; on the real driver the lock waits for them), the FAILED state, and which
// processes may act on which (the real driver's permission rules are not documented).
//
// Error codes the header documents and the fake uses: ILLEGAL_STATE for a wrong transition,
// INVALID_VALUE for a bad argument (no state pointer, nonzero reserved fields, an unknown UUID),
// NOT_READY for a lock that timed out (the header lists it for cuCheckpointProcessLock, and the
// lock's timeout is its only documented way to fail short of a wrong state), NOT_INITIALIZED for
// a pid that has not initialised CUDA (pid 1 on driver 580), OPERATING_SYSTEM for a pid no process
// has (as driver 580 answers: tests/gpu/checkpoint_probe.c on an H100, 2026-12-06), INVALID_VALUE
// for a nonzero reserved field of the restore's arguments (likewise).
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>

#include "fakecuda/checkpoint_wire.h"
#include "fakecuda/internal.h"

namespace fake {
namespace {

using namespace fake::checkpoint;

std::mutex& g_cp_mu = *new std::mutex;
std::condition_variable& g_cp_cv = *new std::condition_variable;
std::atomic<int> g_state{CU_PROCESS_STATE_RUNNING};
// Which fake GPU each device ordinal of this process lives on now (a restore with pairs moves it).
std::vector<int>& g_gpu_of = *new std::vector<int>;
// The device memory a checkpoint took out, per allocation.
std::vector<std::pair<std::shared_ptr<Alloc>, std::vector<uint8_t>>>& g_saved =
    *new std::vector<std::pair<std::shared_ptr<Alloc>, std::vector<uint8_t>>>;
std::atomic<pid_t> g_listening_for{0};  // the pid whose socket this process listens on
std::atomic<int> g_control_tid{0};
// Set in a forked child of a process that had called cuInit: its first call listens again.
std::atomic<bool> g_listen_again{false};
thread_local bool t_never_waits = false;  // stream workers and the control thread

int gpu_of(int ordinal) {
  if (g_gpu_of.empty())
    for (int i = 0; i < device_count(); ++i) g_gpu_of.push_back(i);
  return g_gpu_of[static_cast<size_t>(ordinal)];
}

bool same_uuid(const CUuuid& a, const unsigned char b[16]) { return std::memcmp(a.bytes, b, 16) == 0; }

// The fake GPU with this UUID, or -1.
int gpu_with_uuid(const CUuuid& u) {
  for (int g = 0; g < device_count(); ++g) {
    unsigned char mine[16];
    device_uuid(g, mine);
    if (same_uuid(u, mine)) return g;
  }
  return -1;
}

// Whether every stream's queued work has run (g_mu held).
bool idle_locked() {
  for (auto& [raw, c] : g_ctxs)
    if (c->null_stream && c->null_stream->completed != c->null_stream->submitted) return false;
  for (auto& [raw, s] : g_streams)
    if (s->completed != s->submitted) return false;
  return true;
}

Reply lock(uint32_t timeout_ms) {
  {
    std::lock_guard lk(g_cp_mu);
    if (g_state != CU_PROCESS_STATE_RUNNING) return {CUDA_ERROR_ILLEGAL_STATE, 0};
    g_state = CU_PROCESS_STATE_LOCKED;  // from here new calls wait in checkpoint_gate
  }
  std::unique_lock lk(g_mu);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool drained = timeout_ms == 0 ? (g_cv.wait(lk, idle_locked), true) : g_cv.wait_until(lk, until, idle_locked);
  lk.unlock();
  if (drained) return {CUDA_SUCCESS, 0};
  std::lock_guard cl(g_cp_mu);
  g_state = CU_PROCESS_STATE_RUNNING;
  g_cp_cv.notify_all();
  return {CUDA_ERROR_NOT_READY, 0};
}

Reply take_checkpoint() {
  std::lock_guard lk(g_cp_mu);
  if (g_state != CU_PROCESS_STATE_LOCKED) return {CUDA_ERROR_ILLEGAL_STATE, 0};
  std::lock_guard ml(mem_mutex());
  g_saved.clear();
  for (auto& [base, a] : allocs_locked()) {
    uint8_t* bytes = a->data.get();
    g_saved.emplace_back(a, std::vector<uint8_t>(bytes, bytes + a->size));
    std::memset(bytes, 0xcd, a->size);
  }
  g_state = CU_PROCESS_STATE_CHECKPOINTED;
  return {CUDA_SUCCESS, 0};
}

Reply restore(const Request& q) {
  std::lock_guard lk(g_cp_mu);
  if (g_state != CU_PROCESS_STATE_CHECKPOINTED) return {CUDA_ERROR_ILLEGAL_STATE, 0};
  if (q.pair_count > 0) {
    // The GPUs this process was on: its contexts' devices, wherever those live now.
    std::set<int> on;
    {
      std::lock_guard gl(g_mu);
      for (auto& [raw, c] : g_ctxs) on.insert(gpu_of(c->device));
    }
    std::set<int> covered;
    std::vector<std::pair<int, int>> moves;
    for (uint32_t i = 0; i < q.pair_count; ++i) {
      int from = gpu_with_uuid(q.pairs[i].oldUuid), to = gpu_with_uuid(q.pairs[i].newUuid);
      if (from < 0 || to < 0 || !on.count(from) || !covered.insert(from).second) return {CUDA_ERROR_INVALID_VALUE, 0};
      moves.emplace_back(from, to);
    }
    // "If an array of GPU UUID pairs is specified, it must contain every checkpointed GPU."
    if (covered != on) return {CUDA_ERROR_INVALID_VALUE, 0};
    for (int d = 0; d < device_count(); ++d)
      for (auto [from, to] : moves)
        if (gpu_of(d) == from) {
          g_gpu_of[static_cast<size_t>(d)] = to;
          break;
        }
  }
  {
    std::lock_guard ml(mem_mutex());
    for (auto& [a, bytes] : g_saved) std::memcpy(a->data.get(), bytes.data(), bytes.size());
    g_saved.clear();
  }
  g_state = CU_PROCESS_STATE_LOCKED;
  return {CUDA_SUCCESS, 0};
}

Reply unlock() {
  std::lock_guard lk(g_cp_mu);
  if (g_state != CU_PROCESS_STATE_LOCKED) return {CUDA_ERROR_ILLEGAL_STATE, 0};
  g_state = CU_PROCESS_STATE_RUNNING;
  g_cp_cv.notify_all();
  return {CUDA_SUCCESS, 0};
}

Reply handle(const Request& q) {
  switch (q.action) {
    case kGetState: return {CUDA_SUCCESS, g_state.load()};
    case kGetRestoreThreadId: return {CUDA_SUCCESS, g_control_tid.load()};
    case kLock: return lock(q.timeout_ms);
    case kCheckpoint: return take_checkpoint();
    case kRestore:
      if (q.pair_count > kMaxPairs) return {CUDA_ERROR_INVALID_VALUE, 0};
      return restore(q);
    case kUnlock: return unlock();
    case kWhere: {
      std::lock_guard lk(g_cp_mu);
      return {CUDA_SUCCESS, gpu_of(0)};
    }
  }
  return {CUDA_ERROR_INVALID_VALUE, 0};
}

bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    ssize_t k = ::read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n) {
    ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

sockaddr_un address_of(pid_t pid, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = std::string(kSocketPrefix) + std::to_string(pid);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// One request at a time, in order: a lock that waits for the streams holds the others back.
void serve(int listen_fd) {
  t_never_waits = true;
  g_control_tid = static_cast<int>(syscall(SYS_gettid));
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    Request q;
    if (read_all(fd, &q, sizeof q)) {
      Reply r = handle(q);
      write_all(fd, &r, sizeof r);
    }
    ::close(fd);
  }
}

// Asks process pid; the caller's side of every entry point.
CUresult ask(int pid, const Request& q, Reply* out) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return CUDA_ERROR_OPERATING_SYSTEM;  // as driver 580
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  socklen_t len;
  sockaddr_un a = address_of(pid, &len);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(fd);
    return CUDA_ERROR_NOT_INITIALIZED;  // a process, but no CUDA in it
  }
  bool ok = write_all(fd, &q, sizeof q) && read_all(fd, out, sizeof *out);
  ::close(fd);
  return ok ? static_cast<CUresult>(out->result) : CUDA_ERROR_OPERATING_SYSTEM;
}

template <class T>
bool zeroed(const T& v, size_t from, size_t to) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  for (size_t i = from; i < to; ++i)
    if (b[i]) return false;
  return true;
}

// rgpu-server forks its session processes; a test forks its targets. Threads do not survive a
// fork, so the child's socket and its thread are made anew.
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, [] {
  if (g_listening_for.load() != 0) g_listen_again = true;
});

}  // namespace

void checkpoint_gate() {
  if (g_listen_again.load(std::memory_order_relaxed)) checkpoint_listen();
  if (g_state.load(std::memory_order_acquire) == CU_PROCESS_STATE_RUNNING || t_never_waits) return;
  std::unique_lock lk(g_cp_mu);
  g_cp_cv.wait(lk, [] { return g_state.load() == CU_PROCESS_STATE_RUNNING; });
}

void checkpoint_never_wait() { t_never_waits = true; }

void checkpoint_listen() {
  pid_t me = ::getpid();
  static std::mutex mu;
  std::lock_guard lk(mu);
  g_listen_again = false;
  if (g_listening_for.load() == me) return;
  // A forked child inherits nothing that lives in a thread: it starts again, running.
  g_state = CU_PROCESS_STATE_RUNNING;
  g_saved.clear();
  g_listening_for = me;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len;
  sockaddr_un a = address_of(me, &len);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 16) != 0) {
    if (fd >= 0) ::close(fd);
    return;  // then cuCheckpointProcess* on this pid answer NOT_INITIALIZED
  }
  std::thread(serve, fd).detach();
}

}  // namespace fake

using namespace fake;
using namespace fake::checkpoint;

namespace {

// The two queries: the target's answer to `action`, a number, into *out.
CUresult ask_value(int pid, decltype(Request::action) action, int* out) {
  Request q;
  q.action = action;
  Reply r;
  if (CUresult e = ask(pid, q, &r)) return e;
  *out = r.value;
  return CUDA_SUCCESS;
}

// The transitions: the target's result of q, nothing else.
CUresult ask_result(int pid, const Request& q) {
  Reply r;
  return ask(pid, q, &r);
}

}  // namespace

FAKE_API CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  int value = 0;
  if (CUresult e = ask_value(pid, kGetState, &value)) return e;
  *state = static_cast<CUprocessState>(value);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  if (!tid) return CUDA_ERROR_INVALID_VALUE;
  return ask_value(pid, kGetRestoreThreadId, tid);
}

FAKE_API CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  Request q;
  q.action = kLock;
  if (args) {
    if (args->reserved0 || !zeroed(args->reserved1, 0, sizeof args->reserved1)) return CUDA_ERROR_INVALID_VALUE;
    q.timeout_ms = args->timeoutMs;
  }
  return ask_result(pid, q);
}

FAKE_API CUresult CUDAAPI cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  if (args && !zeroed(*args, 0, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  Request q;
  q.action = kCheckpoint;
  return ask_result(pid, q);
}

FAKE_API CUresult CUDAAPI cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  Request q;
  q.action = kRestore;
  if (args) {
    if (!zeroed(args->reserved, 0, sizeof args->reserved) || args->reserved1) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount && !args->gpuPairs) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount > kMaxPairs) return CUDA_ERROR_INVALID_VALUE;
    q.pair_count = args->gpuPairsCount;
    for (uint32_t i = 0; i < q.pair_count; ++i) q.pairs[i] = args->gpuPairs[i];
  }
  return ask_result(pid, q);
}

FAKE_API CUresult CUDAAPI cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  if (args && !zeroed(*args, 0, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  Request q;
  q.action = kUnlock;
  return ask_result(pid, q);
}
