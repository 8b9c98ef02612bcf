// Implementation of common/spin_policy.h.
#include "common/spin_policy.h"

#include "common/env.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

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

// The whole machine's CPU count (/proc/stat's times are summed over all of them).
unsigned online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1;
}

bool read_cpu_times(SpinPolicy::CpuTimes* out) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return false;
  char line[512];
  const bool ok = std::fgets(line, sizeof line, f) && SpinPolicy::parse_cpu_line(line, out);
  std::fclose(f);
  return ok;
}

}  // namespace

SpinPolicy::SpinPolicy(std::chrono::microseconds window) : window_(window) {}

bool SpinPolicy::machine_can_spare(unsigned cpus, double busy) { return cpus >= 4 && busy + 2 <= cpus; }

bool SpinPolicy::parse_cpu_line(const char* line, CpuTimes* out) {
  unsigned long long v[8] = {};
  const int n = std::sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                            &v[5], &v[6], &v[7]);
  if (n < 4) return false;
  out->total = 0;
  for (int i = 0; i < n; ++i) out->total += v[i];
  out->idle = v[3] + (n > 4 ? v[4] : 0);
  return true;
}

double SpinPolicy::busy_between(const CpuTimes& before, const CpuTimes& after, unsigned cpus) {
  if (after.total <= before.total || after.idle < before.idle) return 0;
  const double total = static_cast<double>(after.total - before.total);
  const double idle = std::min(total, static_cast<double>(after.idle - before.idle));
  return (total - idle) / total * cpus;
}

void SpinPolicy::pretend_machine(unsigned cpus, double load) {
  pretended_ = true;
  can_spare_ = machine_can_spare(cpus, load);
}

std::chrono::microseconds SpinPolicy::before_wait() {
  static const int forced = env::get().spin;  // RGPU_SPIN: -1 auto
  if (forced == 0 && !pretended_) return std::chrono::microseconds(0);
  if (forced == 1 && !pretended_) return window_;
  if (!pretended_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - checked_ >= std::chrono::seconds(1)) {
      checked_ = now;
      CpuTimes times;
      if (read_cpu_times(&times)) {
        // The machine's busy CPUs over the last second, against the CPUs this process may use.
        // The first reading has nothing before it: the 1-minute load average stands in once.
        double busy = 0;
        if (last_.total) {
          busy = busy_between(last_, times, online_cpus());
        } else if (getloadavg(&busy, 1) != 1) {
          busy = 0;
        }
        last_ = times;
        can_spare_ = machine_can_spare(usable_cpus(), busy);
      } else {
        double load = 0;
        if (getloadavg(&load, 1) != 1) load = 0;
        can_spare_ = machine_can_spare(usable_cpus(), load);
      }
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
