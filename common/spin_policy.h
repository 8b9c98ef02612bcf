// Whether a thread about to block, waiting for its peer, should spin first (issue 16, item 9).
//
// Spinning saves the wake-up (a few microseconds on an idle many-core host, where the next call of
// an active client thread, or the reply to a call, usually comes within tens of microseconds) but
// takes a core while it lasts. On a machine with few CPUs, or all of them busy, that core is the
// one the peer needs to send what the spinner waits for: on this project's 2-core machine with both
// cores loaded, rgpu-server's workers spinning 50 µs after every call made a small synchronous call
// 60 µs (p99 3 to 8 ms); blocking at once, 9.5 µs (p99 13 µs)
// (bench/recorded/cpu-2026-12-03). So a SpinPolicy spins only
// - when the machine has a CPU to spare: at least 4 usable CPUs of which at least 2 were idle over
//   the last second (from /proc/stat's CPU times, looked at once a second; not the load average,
//   which also counts threads asleep in the kernel: a GPU driver's can hold it high on an idle
//   host), and
// - while spinning pays: the events of its recent waits mostly came during the spin (a score kept
//   from each wait's outcome; a policy whose spins keep missing tries again every 32nd wait).
// RGPU_SPIN=1 spins always, =0 never (measuring what the choice costs on a host).
// One per waiting thread (not thread-safe).
#pragma once

#include <chrono>
#include <cstdint>

namespace rgpu {

class SpinPolicy {
 public:
  explicit SpinPolicy(std::chrono::microseconds window = std::chrono::microseconds(50));

  // How long to spin before blocking (zero: block at once).
  std::chrono::microseconds before_wait();
  // After a wait that spun: whether what it waited for came during the spin.
  void after_spin(bool caught);

  // The machine test (usable CPUs, how many of them were busy), apart for tests.
  static bool machine_can_spare(unsigned cpus, double busy);
  // The CPU times of /proc/stat's first line ("cpu  user nice system idle iowait irq softirq
  // steal ..."), in ticks: all of them, and the idle ones (idle and iowait). False when the line
  // is not one.
  struct CpuTimes {
    unsigned long long total = 0, idle = 0;
  };
  static bool parse_cpu_line(const char* line, CpuTimes* out);
  // How many of the machine's `cpus` CPUs were busy between two readings (0 when no time passed).
  static double busy_between(const CpuTimes& before, const CpuTimes& after, unsigned cpus);
  // For tests: decide as if on such a machine from now on.
  void pretend_machine(unsigned cpus, double load);

 private:
  std::chrono::microseconds window_;
  int score_ = 8;  // 0 .. kMaxScore: up by one per caught spin, down by two per missed one
  uint32_t waits_ = 0;
  bool can_spare_ = false;
  bool pretended_ = false;
  std::chrono::steady_clock::time_point checked_{};
  CpuTimes last_{};  // /proc/stat at checked_ (total 0: not read yet)
};

}  // namespace rgpu
