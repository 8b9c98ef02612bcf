// kOpSessionControl (protocol/messages.h): rgpu-smi suspend | resume | migrate of a live session
// of this server, through the driver's checkpoint API (cuda.h "CUDA Checkpointing", driver 570
// and newer).
//
// Why here: each session is a process of its own (protocol/accept_loop.h), and the checkpoint
// calls act on a process by pid from another process, as NVIDIA's cuda-checkpoint utility does.
// The process that took rgpu-smi's connection is such another process, has the driver loaded,
// and sees the same sessions directory (server/session.cpp lists it), so it checks that the pid is
// a live session of this server and runs the calls; the listening parent never touches the GPU.
//
// The sequences (the driver's states: RUNNING, LOCKED, CHECKPOINTED):
//   suspend  Lock (bounded by kLockTimeoutMs) + Checkpoint: the session's GPU memory is copied to
//            host memory and its GPU resources are released; its calls block in the driver.
//   resume   Restore + Unlock: the memory comes back at the same addresses, calls go on.
//   migrate  (Lock + Checkpoint when running) + Restore with the GPU pair {the GPU it is on -> GPU
//            N} + Unlock. The driver requires a GPU of the same chip with enough memory, and a
//            pair for every GPU the process had; rgpu pairs the one GPU it knows the session is on
//            (GPU 0, where its context is made, or where an earlier migrate put it, noted in
//            <sessions dir>/.gpu-<pid>), so a session that uses several GPUs cannot be moved.
// The client sees a pause: its calls wait in the session's driver, and the session's reading
// thread, which does not call the driver, keeps answering the client's heartbeats
// (protocol/channel.h), so a long suspension does not look like a broken connection.
#include <cuda.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"
#include "server/dispatch.h"
#include "server/handlers/control.h"
#include "server/session.h"

namespace rgpu::server {
namespace {

// How long suspend and migrate wait for the session's running work to finish before they give up
// and leave it running (CUcheckpointLockArgs::timeoutMs).
constexpr unsigned kLockTimeoutMs = 10000;

struct Outcome {
  CUresult result = CUDA_SUCCESS;
  std::string message;
};

Outcome fail(CUresult r, std::string message) { return {r, std::move(message)}; }

class Control {
 public:
  Control(const DriverTable& drv, std::string dir, uint32_t pid) : drv_(drv), dir_(std::move(dir)), pid_(static_cast<int>(pid)) {}

  bool has_api() const {
    return drv_.cuCheckpointProcessGetState && drv_.cuCheckpointProcessLock && drv_.cuCheckpointProcessCheckpoint &&
           drv_.cuCheckpointProcessRestore && drv_.cuCheckpointProcessUnlock;
  }

  std::string err(CUresult r) const {
    const char* n = nullptr;
    if (drv_.cuGetErrorName && drv_.cuGetErrorName(r, &n) == CUDA_SUCCESS && n) return n;
    return "CUresult " + std::to_string(static_cast<int>(r));
  }

  // The session's state, or -1 with *why.
  int state(std::string* why) const {
    CUprocessState s = CU_PROCESS_STATE_FAILED;
    CUresult r = drv_.cuCheckpointProcessGetState(pid_, &s);
    if (r != CUDA_SUCCESS) {
      *why = log::format("the driver cannot tell the state of session %d (%s)%s", pid_, err(r).c_str(),
                         r == CUDA_ERROR_NOT_INITIALIZED ? ": it has not used the GPU yet, so there is nothing to suspend or move" : "");
      return -1;
    }
    return static_cast<int>(s);
  }

  // Lock + Checkpoint; on failure the session is left running, as it was.
  Outcome checkpoint() {
    CUcheckpointLockArgs lock{};
    lock.timeoutMs = kLockTimeoutMs;
    if (CUresult r = drv_.cuCheckpointProcessLock(pid_, &lock))
      return fail(r, log::format("could not lock session %d within %u s (%s): a call of its is still running on the "
                                 "GPU; it runs on untouched; try again when it is idle",
                                 pid_, kLockTimeoutMs / 1000, err(r).c_str()));
    if (CUresult r = drv_.cuCheckpointProcessCheckpoint(pid_, nullptr)) {
      CUresult u = drv_.cuCheckpointProcessUnlock(pid_, nullptr);
      return fail(r, log::format("the driver could not checkpoint session %d (%s; this driver cannot checkpoint "
                                 "managed (UVM) or IPC memory); %s",
                                 pid_, err(r).c_str(),
                                 u == CUDA_SUCCESS ? "it runs on untouched"
                                                   : ("and could not unlock it either (" + err(u) + ")").c_str()));
    }
    return {};
  }

  int recorded_gpu() const {
    std::ifstream f(gpu_file());
    int g = 0;
    return f >> g ? g : 0;
  }
  void record_gpu(int gpu) const {
    std::string tmp = gpu_file() + ".tmp";
    if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%d\n", gpu);
      std::fclose(f);
      std::rename(tmp.c_str(), gpu_file().c_str());
    }
  }
  std::string gpu_file() const { return session_gpu_file(dir_, pid_); }

  // Name and compute capability: what "the same chip type" can be told by here.
  std::string kind(int gpu) const {
    CUdevice d;
    char name[256] = "?";
    int major = 0, minor = 0;
    if (drv_.cuDeviceGet(&d, gpu) == CUDA_SUCCESS) {
      drv_.cuDeviceGetName(name, sizeof name, d);
      drv_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      drv_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    }
    return log::format("%s, compute capability %d.%d", name, major, minor);
  }

  bool uuid(int gpu, CUuuid* out) const {
    CUdevice d;
    if (drv_.cuDeviceGet(&d, gpu) != CUDA_SUCCESS) return false;
    if (drv_.cuDeviceGetUuid_v2) return drv_.cuDeviceGetUuid_v2(out, d) == CUDA_SUCCESS;
    return drv_.cuDeviceGetUuid && drv_.cuDeviceGetUuid(out, d) == CUDA_SUCCESS;
  }

  Outcome suspend() {
    std::string why;
    int s = state(&why);
    if (s < 0) return fail(CUDA_ERROR_INVALID_VALUE, why);
    if (s == CU_PROCESS_STATE_CHECKPOINTED)
      return fail(CUDA_ERROR_ILLEGAL_STATE, log::format("session %d is already suspended (rgpu-smi resume %d)", pid_, pid_));
    if (s != CU_PROCESS_STATE_RUNNING) return not_running(s);
    Outcome o = checkpoint();
    if (o.result != CUDA_SUCCESS) return o;
    return {CUDA_SUCCESS, log::format("session %d suspended: its GPU memory is in host memory and its GPU is free; its "
                                      "calls wait until `rgpu-smi resume %d`",
                                      pid_, pid_)};
  }

  Outcome resume() {
    std::string why;
    int s = state(&why);
    if (s < 0) return fail(CUDA_ERROR_INVALID_VALUE, why);
    if (s == CU_PROCESS_STATE_RUNNING)
      return fail(CUDA_ERROR_ILLEGAL_STATE, log::format("session %d is not suspended", pid_));
    if (s == CU_PROCESS_STATE_CHECKPOINTED) {
      if (CUresult r = drv_.cuCheckpointProcessRestore(pid_, nullptr))
        return fail(r, log::format("the driver could not restore session %d (%s); it stays suspended", pid_, err(r).c_str()));
    } else if (s != CU_PROCESS_STATE_LOCKED) {
      return not_running(s);
    }
    // LOCKED: restored (now, or by an earlier resume that did not get as far as unlocking it).
    if (CUresult r = drv_.cuCheckpointProcessUnlock(pid_, nullptr))
      return fail(r, log::format("the driver restored session %d but could not unlock it (%s)", pid_, err(r).c_str()));
    return {CUDA_SUCCESS, log::format("session %d resumed", pid_)};
  }

  Outcome migrate(int gpu) {
    int count = 0;
    drv_.cuDeviceGetCount(&count);
    if (gpu < 0 || gpu >= count)
      return fail(CUDA_ERROR_INVALID_DEVICE, log::format("GPU %d does not exist: this server has %d GPU%s (0 to %d)", gpu,
                                                         count, count == 1 ? "" : "s", count - 1));
    const int from = recorded_gpu();
    if (from == gpu) return fail(CUDA_ERROR_INVALID_VALUE, log::format("session %d is on GPU %d already", pid_, gpu));
    const std::string from_kind = kind(from), to_kind = kind(gpu);
    if (from_kind != to_kind)
      return fail(CUDA_ERROR_INVALID_DEVICE,
                  log::format("GPU %d (%s) is not the same kind as GPU %d (%s), which session %d is on: the driver moves "
                              "a session only between GPUs of one kind",
                              gpu, to_kind.c_str(), from, from_kind.c_str(), pid_));
    CUcheckpointGpuPair pair{};
    if (!uuid(from, &pair.oldUuid) || !uuid(gpu, &pair.newUuid))
      return fail(CUDA_ERROR_INVALID_DEVICE, log::format("the driver does not give the UUIDs of GPUs %d and %d", from, gpu));
    std::string why;
    int s = state(&why);
    if (s < 0) return fail(CUDA_ERROR_INVALID_VALUE, why);
    const bool was_suspended = s == CU_PROCESS_STATE_CHECKPOINTED;
    if (s == CU_PROCESS_STATE_RUNNING) {
      Outcome o = checkpoint();
      if (o.result != CUDA_SUCCESS) return o;
    } else if (!was_suspended) {
      return not_running(s);
    }
    CUcheckpointRestoreArgs args{};
    args.gpuPairs = &pair;
    args.gpuPairsCount = 1;
    if (CUresult r = drv_.cuCheckpointProcessRestore(pid_, &args)) {
      // Back where it was, as it was.
      CUresult back = was_suspended ? CUDA_SUCCESS : drv_.cuCheckpointProcessRestore(pid_, nullptr);
      CUresult unlocked = was_suspended || back != CUDA_SUCCESS ? back : drv_.cuCheckpointProcessUnlock(pid_, nullptr);
      std::string after = was_suspended ? "it stays suspended on GPU " + std::to_string(from)
                          : unlocked == CUDA_SUCCESS
                              ? "it runs on GPU " + std::to_string(from) + " again"
                              : "and could not bring it back to GPU " + std::to_string(from) + " (" + err(unlocked) +
                                    "): try rgpu-smi resume " + std::to_string(pid_);
      return fail(r, log::format("the driver could not move session %d onto GPU %d (%s; it needs a GPU with enough free "
                                 "memory, and a session that uses one GPU only); %s",
                                 pid_, gpu, err(r).c_str(), after.c_str()));
    }
    record_gpu(gpu);
    if (CUresult r = drv_.cuCheckpointProcessUnlock(pid_, nullptr))
      return fail(r, log::format("session %d is on GPU %d now, but the driver could not unlock it (%s)", pid_, gpu,
                                 err(r).c_str()));
    return {CUDA_SUCCESS, log::format("session %d moved from GPU %d to GPU %d%s", pid_, from, gpu,
                                      was_suspended ? " (it was suspended: it runs again)" : "")};
  }

  Outcome not_running(int s) const {
    if (s == CU_PROCESS_STATE_LOCKED)
      return fail(CUDA_ERROR_ILLEGAL_STATE,
                  log::format("session %d is locked by another checkpoint tool (cuda-checkpoint?), not suspended by "
                              "rgpu-smi; unlock it there, or rgpu-smi resume %d",
                              pid_, pid_));
    return fail(CUDA_ERROR_ILLEGAL_STATE,
                log::format("session %d failed in an earlier checkpoint or restore (the driver's FAILED state); it "
                            "cannot be suspended, resumed or moved",
                            pid_));
  }

  uint8_t final_state() const {
    CUprocessState s;
    if (drv_.cuCheckpointProcessGetState(pid_, &s) != CUDA_SUCCESS) return proto::kSessionStateUnknown;
    return static_cast<uint8_t>(s);
  }

 private:
  const DriverTable& drv_;
  std::string dir_;
  int pid_;
};

bool listed(const std::string& dir, uint32_t pid) {
  if (dir.empty() || pid == 0 || pid > 0x7fffffff) return false;
  struct stat st;
  if (stat((dir + "/" + std::to_string(pid)).c_str(), &st) != 0) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

}  // namespace

std::string session_gpu_file(const std::string& dir, int pid) { return dir + "/.gpu-" + std::to_string(pid); }

std::string session_state_note(const DriverTable& drv, const std::string& dir, int pid) {
  std::string note;
  if (drv.cuCheckpointProcessGetState) {
    CUprocessState s;
    if (drv.cuCheckpointProcessGetState(pid, &s) == CUDA_SUCCESS) {
      if (s == CU_PROCESS_STATE_CHECKPOINTED) note += " (suspended: its calls wait for rgpu-smi resume)";
      if (s == CU_PROCESS_STATE_LOCKED) note += " (locked)";
      if (s == CU_PROCESS_STATE_FAILED) note += " (failed in a checkpoint or restore)";
    }
  }
  std::ifstream f(session_gpu_file(dir, pid));
  int gpu;
  if (f >> gpu) note += log::format(" (on GPU %d)", gpu);
  return note;
}

namespace handlers {

void session_control(Dispatch& d) {
  proto::wire::SessionControl q;
  if (!proto::wire::read_session_control(d.args, &q)) return;  // malformed: the session ends
  const std::string& dir = listed_sessions_dir();
  Control c(d.drv, dir, q.pid);
  Outcome o;
  uint8_t state = proto::kSessionStateUnknown;
  const char* action = q.action == proto::kSessionSuspend   ? "suspend"
                       : q.action == proto::kSessionResume  ? "resume"
                       : q.action == proto::kSessionMigrate ? "migrate"
                                                            : nullptr;
  if (!action) {
    o = fail(CUDA_ERROR_NOT_SUPPORTED,
             log::format("this rgpu-server does not know session action %u (is rgpu-smi newer than the server?)", q.action));
  } else if (!listed(dir, q.pid) || !same_tenant_session(dir, static_cast<int>(q.pid))) {
    o = fail(CUDA_ERROR_INVALID_VALUE,
             log::format("%u is not a live session of this server (rgpu-smi lists them by pid)", q.pid));
  } else if (static_cast<pid_t>(q.pid) == getpid()) {
    o = fail(CUDA_ERROR_INVALID_VALUE, log::format("session %u is this rgpu-smi's own; it cannot %s itself", q.pid, action));
  } else if (!c.has_api()) {
    o = fail(CUDA_ERROR_NOT_SUPPORTED,
             "this driver has no checkpoint API (cuCheckpointProcess*, driver 570 or newer): sessions cannot be "
             "suspended or moved on this server");
  } else {
    if (d.drv.cuInit) d.drv.cuInit(0);  // for the device queries; the checkpoint calls do not need it
    o = q.action == proto::kSessionSuspend ? c.suspend() : q.action == proto::kSessionResume ? c.resume() : c.migrate(q.gpu);
    state = c.final_state();
    log::info("rgpu-smi %s of session %u: %s", action, q.pid, o.message.c_str());
  }
  d.reply.put<int32_t>(o.result);
  proto::wire::put_session_control_reply(d.reply, {o.message, state});
}

}  // namespace handlers
}  // namespace rgpu::server
