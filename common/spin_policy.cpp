// Implementation of common/spin_policy.h.
#include "common/spin_policy.h"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>

namespace rgpu {
namespace {

constexpr int kMaxScore = 16;
constexpr int kSpinScore = 4;       // spin at this score and above
constexpr uint32_t kProbeEvery = 32;  // below it, still spin on every 32nd wait

unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(CPU_COUNT(&set));
}

}  // namespace

SpinPolicy::SpinPolicy(std::chrono::microseconds window) : window_(window) {}

bool SpinPolicy::machine_can_spare(unsigned cpus, double load) { return cpus >= 4 && load + 2 <= cpus; }

void SpinPolicy::pretend_machine(unsigned cpus, double load) {
  pretended_ = true;
  can_spare_ = machine_can_spare(cpus, load);
}

std::chrono::microseconds SpinPolicy::before_wait() {
  if (!pretended_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - checked_ >= std::chrono::seconds(1)) {
      checked_ = now;
      double load[1] = {0};
      if (getloadavg(load, 1) != 1) load[0] = 0;
      can_spare_ = machine_can_spare(usable_cpus(), load[0]);
    }
  }
  if (!can_spare_) return std::chrono::microseconds(0);
  ++waits_;
  if (score_ >= kSpinScore || waits_ % kProbeEvery == 0) return window_;
  return std::chrono::microseconds(0);
}

void SpinPolicy::after_spin(bool caught) {
  score_ = caught ? std::min(kMaxScore, score_ + 1) : std::max(0, score_ - 2);
}

}  // namespace rgpu
