// The fake driver's checkpoint API (fakecuda/checkpoint.cpp) from a second process, as
// rgpu-server and NVIDIA's cuda-checkpoint use the real one: this test locks, checkpoints,
// restores, moves and unlocks fake_checkpoint_target (fakecuda/checkpoint_target.cpp), checks each
// wrong transition's error, that the target's calls wait while it is locked or checkpointed, and
// that its memory comes back intact. Run with RGPU_FAKE_DEVICES=2 (the ctest sets it), so there
// is a second GPU to move onto. Every wait is bounded.
#include <cuda.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "fakecuda/checkpoint_wire.h"

namespace {

std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string p(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return p.substr(0, p.rfind('/'));
}

// fake_checkpoint_target, spoken to over its stdin and stdout.
class Target {
 public:
  Target() {
    int in[2], out[2];
    if (pipe(in) || pipe(out)) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::string path = exe_dir() + "/fake_checkpoint_target";
      execl(path.c_str(), path.c_str(), nullptr);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Target() {
    send("quit");
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      usleep(100 * 1000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }
  void send(const char* cmd) {
    std::string line = std::string(cmd) + "\n";
    if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) perror("write");
  }
  // The target's next line, or "" when none came within ms.
  std::string line(int ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (true) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
      if (left <= 0) return "";
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) continue;
      char b[256];
      ssize_t k = read(from_, b, sizeof b);
      if (k <= 0) return "";
      buf_.append(b, static_cast<size_t>(k));
    }
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buf_;
};

CUprocessState state_of(int pid) {
  CUprocessState s = CU_PROCESS_STATE_FAILED;
  EXPECT_EQ(cuCheckpointProcessGetState(pid, &s), CUDA_SUCCESS);
  return s;
}

// Which fake GPU the target's device 0 lives on (kWhere: the fake's own question, not the API's).
int gpu_of(int pid) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = std::string(fake::checkpoint::kSocketPrefix) + std::to_string(pid);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  fake::checkpoint::Request q;
  q.action = fake::checkpoint::kWhere;
  fake::checkpoint::Reply r;
  r.value = -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || write(fd, &q, sizeof q) != sizeof q ||
      read(fd, &r, sizeof r) != sizeof r)
    r.value = -1;
  close(fd);
  return r.value;
}

CUuuid uuid_of(int ordinal) {
  CUdevice d;
  CUuuid u{};
  EXPECT_EQ(cuDeviceGet(&d, ordinal), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetUuid_v2(&u, d), CUDA_SUCCESS);
  return u;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(target_.line(10000), "ready");
  }
  Target target_;
};

TEST_F(Checkpoint, WalksLockCheckpointRestoreUnlockAndRefusesEveryOtherTransition) {
  const int pid = target_.pid();
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_RUNNING);
  int tid = 0;
  EXPECT_EQ(cuCheckpointProcessGetRestoreThreadId(pid, &tid), CUDA_SUCCESS);
  EXPECT_GT(tid, 0);
  // RUNNING: only Lock.
  EXPECT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 5000;
  ASSERT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_LOCKED);
  // LOCKED: Checkpoint or Unlock.
  EXPECT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  // The target's calls wait while it is locked.
  target_.send("check");
  EXPECT_EQ(target_.line(300), "");
  ASSERT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_CHECKPOINTED);
  // CHECKPOINTED: only Restore.
  EXPECT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(target_.line(300), "");  // ... and while it is checkpointed
  ASSERT_EQ(cuCheckpointProcessRestore(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_LOCKED);  // restored, still locked
  EXPECT_EQ(target_.line(300), "");
  ASSERT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_RUNNING);
  // The waiting call ran, and found the memory as it was.
  EXPECT_EQ(target_.line(5000), "ok");
  EXPECT_EQ(gpu_of(pid), 0);
}

TEST_F(Checkpoint, RestoreWithAGpuPairMovesTheProcessAndRefusesPairsThatDoNotFit) {
  const int pid = target_.pid();
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2) << "run with RGPU_FAKE_DEVICES=2";
  ASSERT_EQ(cuCheckpointProcessLock(pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_SUCCESS);
  CUcheckpointGpuPair pair{uuid_of(1), uuid_of(0)};  // from a GPU the process is not on
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = &pair;
  args.gpuPairsCount = 1;
  EXPECT_EQ(cuCheckpointProcessRestore(pid, &args), CUDA_ERROR_INVALID_VALUE);
  pair = {uuid_of(0), {}};
  std::memset(pair.newUuid.bytes, 0x77, sizeof pair.newUuid.bytes);  // onto a GPU that does not exist
  EXPECT_EQ(cuCheckpointProcessRestore(pid, &args), CUDA_ERROR_INVALID_VALUE);
  args.gpuPairs = nullptr;
  EXPECT_EQ(cuCheckpointProcessRestore(pid, &args), CUDA_ERROR_INVALID_VALUE);
  CUcheckpointRestoreArgs reserved{};
  reserved.reserved1 = 1;
  EXPECT_EQ(cuCheckpointProcessRestore(pid, &reserved), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_CHECKPOINTED);  // a refused restore changes nothing
  pair = {uuid_of(0), uuid_of(1)};
  args.gpuPairs = &pair;
  ASSERT_EQ(cuCheckpointProcessRestore(pid, &args), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(gpu_of(pid), 1);
  target_.send("check");
  EXPECT_EQ(target_.line(5000), "ok");
}

TEST_F(Checkpoint, ALockThatTimesOutLeavesTheProcessRunning) {
  const int pid = target_.pid();
  target_.send("busy");  // 1.5 s of queued work
  ASSERT_EQ(target_.line(5000), "queued");
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 100;
  EXPECT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_RUNNING);
  target_.send("check");
  EXPECT_EQ(target_.line(5000), "ok");
  lock.timeoutMs = 5000;  // a lock that waits for the work instead
  target_.send("busy");
  ASSERT_EQ(target_.line(5000), "queued");
  ASSERT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_SUCCESS);
}

TEST(CheckpointArguments, BadPidsAndArgumentsAreRefused) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUprocessState s;
  EXPECT_EQ(cuCheckpointProcessGetState(getpid(), nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessGetState(0, &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessGetState(INT_MAX, &s), CUDA_ERROR_OPERATING_SYSTEM);  // no such process (driver 580)
  // A process that never initialised CUDA: a child that only sleeps.
  pid_t child = fork();
  if (child == 0) {
    usleep(5 * 1000 * 1000);
    _exit(0);
  }
  EXPECT_EQ(cuCheckpointProcessGetState(child, &s), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuCheckpointProcessLock(child, nullptr), CUDA_ERROR_NOT_INITIALIZED);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CUcheckpointLockArgs lock{};
  lock.reserved0 = 1;
  EXPECT_EQ(cuCheckpointProcessLock(getpid(), &lock), CUDA_ERROR_INVALID_VALUE);
  // This process itself answers too (it called cuInit): running.
  EXPECT_EQ(cuCheckpointProcessGetState(getpid(), &s), CUDA_SUCCESS);
  EXPECT_EQ(s, CU_PROCESS_STATE_RUNNING);
}

}  // namespace
