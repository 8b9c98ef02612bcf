// What the real driver's checkpoint API does (cuCheckpointProcess*, driver 570+), seen from a
// second process as rgpu-server uses it: the fake driver (fakecuda/checkpoint.cpp) must answer the
// same. A child process initialises CUDA, fills 64 MiB of device memory and then copies 4 bytes
// back every 20 ms, reporting each result and time to the parent through a pipe; the parent walks
// the state machine on the child (right and wrong transitions), notes each CUresult, whether the
// child's calls block or fail while it is locked or checkpointed, and what cuMemGetInfo shows.
// Prints one "fact: ..." line per observation. Build: cc -I/usr/local/cuda/include
// checkpoint_probe.c -o checkpoint_probe -L/usr/local/cuda/lib64/stubs -lcuda -lpthread.
#include <cuda.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct Report {
  int index, result;
  double when;
  unsigned value;
};

static const char* state_name(int s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING: return "RUNNING";
    case CU_PROCESS_STATE_LOCKED: return "LOCKED";
    case CU_PROCESS_STATE_CHECKPOINTED: return "CHECKPOINTED";
    case CU_PROCESS_STATE_FAILED: return "FAILED";
  }
  return "?";
}

static const char* rname(CUresult r) {
  const char* n = 0;
  if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n) return "?";
  return n;
}

#define N_BYTES (64u << 20)

static void child(int report_fd, int ready_fd, int stop_fd) {
  CUdevice d;
  CUcontext c;
  CUdeviceptr p;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) ||
      cuMemAlloc(&p, N_BYTES) || cuMemsetD32(p, 0x5a5a5a5a, N_BYTES / 4) || cuCtxSynchronize()) {
    fprintf(stderr, "child: CUDA set-up failed\n");
    _exit(1);
  }
  char b = 1;
  if (write(ready_fd, &b, 1) != 1) _exit(1);
  fcntl(stop_fd, F_SETFL, O_NONBLOCK);
  for (int i = 0; i < 2000; ++i) {
    struct Report r = {i, 0, 0, 0};
    r.result = cuMemcpyDtoH(&r.value, p + 4 * (unsigned)i, 4);
    r.when = now_s();
    if (write(report_fd, &r, sizeof r) != sizeof r) _exit(1);
    if (read(stop_fd, &b, 1) == 1) break;
    usleep(20000);
  }
  // The whole buffer, after everything the parent did.
  unsigned* host = malloc(N_BYTES);
  CUresult r = cuMemcpyDtoH(host, p, N_BYTES);
  size_t bad = 0;
  for (size_t k = 0; k < N_BYTES / 4; ++k) bad += host[k] != 0x5a5a5a5au;
  printf("fact: child after everything: full copy %s, %zu words differ from the pattern\n", rname(r), bad);
  CUdevice cur = -1;
  CUuuid u;
  cuCtxGetDevice(&cur);
  cuDeviceGetUuid(&u, cur);
  printf("fact: child context device %d uuid first bytes %02x%02x%02x%02x\n", cur, u.bytes[0] & 0xff,
         u.bytes[1] & 0xff, u.bytes[2] & 0xff, u.bytes[3] & 0xff);
  fflush(stdout);
  _exit(0);
}

static int report_fd_g;
// Reads the child's reports for `seconds`; prints how many came and their results.
static void drain(const char* phase, double seconds) {
  double end = now_s() + seconds;
  int n = 0, fails = 0, last_result = 0;
  unsigned last_value = 0;
  for (;;) {
    double left = end - now_s();
    if (left <= 0) break;
    struct pollfd pf = {report_fd_g, POLLIN, 0};
    if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
    struct Report r;
    if (read(report_fd_g, &r, sizeof r) != sizeof r) break;
    ++n;
    if (r.result) ++fails, last_result = r.result;
    last_value = r.value;
  }
  printf("fact: %s: child completed %d calls in %.1f s, %d failed (last failure %s), last value %08x\n", phase, n,
         seconds, fails, rname(last_result), last_value);
}

static void state(const char* when, int pid) {
  CUprocessState s = 99;
  CUresult r = cuCheckpointProcessGetState(pid, &s);
  printf("fact: state %s: %s %s\n", when, rname(r), r ? "-" : state_name(s));
}

static void meminfo(const char* when) {
  size_t f = 0, t = 0;
  CUresult r = cuMemGetInfo(&f, &t);
  printf("fact: parent cuMemGetInfo %s: %s free %zu MiB of %zu MiB\n", when, rname(r), f >> 20, t >> 20);
}

int main(void) {
  int rep[2], ready[2], stop[2];
  if (pipe(rep) || pipe(ready) || pipe(stop)) return 1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) child(rep[1], ready[1], stop[0]);
  report_fd_g = rep[0];
  char b;
  if (read(ready[0], &b, 1) != 1) {
    printf("fact: child did not start\n");
    return 1;
  }
  // Before this process has called cuInit.
  state("before the caller's cuInit", pid);
  int v = 0;
  cuDriverGetVersion(&v);
  printf("fact: driver version %d\n", v);
  CUresult ri = cuInit(0);
  printf("fact: caller cuInit %s\n", rname(ri));
  state("after the caller's cuInit", pid);
  state("of the caller itself (no context)", getpid());
  state("of pid 1 (no CUDA)", 1);
  state("of pid 999999 (none)", 999999);
  CUprocessState* null_state = NULL;
  printf("fact: GetState with NULL state: %s\n", rname(cuCheckpointProcessGetState(pid, null_state)));
  int tid = -1;
  CUresult rt = cuCheckpointProcessGetRestoreThreadId(pid, &tid);
  printf("fact: GetRestoreThreadId: %s tid %d (child pid %d)\n", rname(rt), tid, pid);
  CUdevice d;
  CUcontext c;
  cuDeviceGet(&d, 0);
  cuCtxCreate(&c, NULL, 0, d);
  meminfo("with the child running");
  drain("running", 0.5);

  printf("fact: Unlock while RUNNING: %s\n", rname(cuCheckpointProcessUnlock(pid, NULL)));
  printf("fact: Checkpoint while RUNNING: %s\n", rname(cuCheckpointProcessCheckpoint(pid, NULL)));
  printf("fact: Restore while RUNNING: %s\n", rname(cuCheckpointProcessRestore(pid, NULL)));
  printf("fact: Lock of pid 1: %s\n", rname(cuCheckpointProcessLock(1, NULL)));
  CUcheckpointLockArgs la;
  memset(&la, 0, sizeof la);
  la.timeoutMs = 5000;
  double t0 = now_s();
  CUresult rl = cuCheckpointProcessLock(pid, &la);
  printf("fact: Lock (timeout 5000 ms): %s in %.3f s\n", rname(rl), now_s() - t0);
  state("after lock", pid);
  printf("fact: Lock while LOCKED: %s\n", rname(cuCheckpointProcessLock(pid, &la)));
  printf("fact: Restore while LOCKED: %s\n", rname(cuCheckpointProcessRestore(pid, NULL)));
  drain("locked", 1.0);

  t0 = now_s();
  CUresult rc = cuCheckpointProcessCheckpoint(pid, NULL);
  printf("fact: Checkpoint: %s in %.3f s\n", rname(rc), now_s() - t0);
  state("after checkpoint", pid);
  meminfo("with the child checkpointed");
  printf("fact: Checkpoint while CHECKPOINTED: %s\n", rname(cuCheckpointProcessCheckpoint(pid, NULL)));
  printf("fact: Lock while CHECKPOINTED: %s\n", rname(cuCheckpointProcessLock(pid, &la)));
  printf("fact: Unlock while CHECKPOINTED: %s\n", rname(cuCheckpointProcessUnlock(pid, NULL)));
  CUcheckpointRestoreArgs nonzero;
  memset(&nonzero, 0, sizeof nonzero);
  nonzero.reserved1 = 1;
  printf("fact: Restore with a nonzero reserved field: %s\n", rname(cuCheckpointProcessRestore(pid, &nonzero)));
  state("after that", pid);
  drain("checkpointed", 1.0);

  CUuuid own;
  cuDeviceGetUuid(&own, d);
  CUcheckpointGpuPair pair;
  pair.oldUuid = own;
  memset(&pair.newUuid, 0x77, sizeof pair.newUuid);
  CUcheckpointRestoreArgs ra;
  memset(&ra, 0, sizeof ra);
  ra.gpuPairs = &pair;
  ra.gpuPairsCount = 1;
  printf("fact: Restore onto a UUID no GPU has: %s\n", rname(cuCheckpointProcessRestore(pid, &ra)));
  state("after that", pid);
  memset(&pair.oldUuid, 0x66, sizeof pair.oldUuid);
  pair.newUuid = own;
  printf("fact: Restore from a UUID the process did not use: %s\n", rname(cuCheckpointProcessRestore(pid, &ra)));
  state("after that", pid);
  pair.oldUuid = own;
  pair.newUuid = own;
  t0 = now_s();
  CUresult rr = cuCheckpointProcessRestore(pid, &ra);
  printf("fact: Restore with the pair own -> own: %s in %.3f s\n", rname(rr), now_s() - t0);
  if (rr != CUDA_SUCCESS) {
    rr = cuCheckpointProcessRestore(pid, NULL);
    printf("fact: Restore with no arguments: %s\n", rname(rr));
  }
  state("after restore", pid);
  meminfo("with the child restored, still locked");
  drain("restored, locked", 0.5);
  printf("fact: Unlock: %s\n", rname(cuCheckpointProcessUnlock(pid, NULL)));
  state("after unlock", pid);
  drain("running again", 0.5);

  // A second suspension with no arguments at all (as rgpu-smi suspend/resume without --gpu).
  rl = cuCheckpointProcessLock(pid, NULL);
  rc = cuCheckpointProcessCheckpoint(pid, NULL);
  rr = cuCheckpointProcessRestore(pid, NULL);
  CUresult ru = cuCheckpointProcessUnlock(pid, NULL);
  printf("fact: second round with NULL args: lock %s checkpoint %s restore %s unlock %s\n", rname(rl), rname(rc),
         rname(rr), rname(ru));
  drain("after the second round", 0.3);

  b = 1;
  if (write(stop[1], &b, 1) != 1) return 1;
  // Let the child's last reports through, then wait for it (bounded).
  for (int i = 0; i < 100; ++i) {
    int status;
    drain("end", 0.1);
    if (waitpid(pid, &status, WNOHANG) == pid) {
      printf("fact: child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      return 0;
    }
  }
  kill(pid, SIGKILL);
  printf("fact: child did not finish in 10 s\n");
  return 1;
}
