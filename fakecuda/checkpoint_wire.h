// How the fake driver's checkpoint entry points (fakecuda/checkpoint.cpp) reach the process they
// act on. The real driver's cuCheckpointProcess* calls take a pid: a second process (NVIDIA's
// cuda-checkpoint, or rgpu-server's session that took rgpu-smi's connection) locks, checkpoints,
// restores and unlocks the target. The fake's "device memory" lives in the target's own address
// space, so the target must do the work itself: every fake process that has called cuInit
// listens on the abstract Unix socket kSocketPrefix + its pid, and the caller's entry point sends
// one Request there and reads one Reply. Private to fakecuda/ and its tests (fakecuda_test speaks
// it to ask a target which GPU it is on, kWhere, which the real API has no call for).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fake::checkpoint {

inline constexpr char kSocketPrefix[] = "rgpu-fakecuda-checkpoint-";  // + decimal pid, abstract namespace
inline constexpr uint32_t kMaxPairs = 16;  // GPU pairs one restore carries (the fake has at most 8 GPUs)

enum Action : uint32_t {
  kGetState = 1,
  kGetRestoreThreadId = 2,
  kLock = 3,
  kCheckpoint = 4,
  kRestore = 5,
  kUnlock = 6,
  kWhere = 7,  // tests only: value = the GPU (fake ordinal) the process's device 0 lives on now
};

struct Request {
  uint32_t action = 0;
  uint32_t timeout_ms = 0;  // kLock: CUcheckpointLockArgs::timeoutMs (0: none)
  uint32_t pair_count = 0;  // kRestore: how many of pairs are used
  uint32_t reserved = 0;
  CUcheckpointGpuPair pairs[kMaxPairs] = {};
};

struct Reply {
  int32_t result = 0;  // CUresult
  int32_t value = 0;   // kGetState: CUprocessState; kGetRestoreThreadId: the thread id; kWhere: GPU
};

}  // namespace fake::checkpoint
