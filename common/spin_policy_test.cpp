// SpinPolicy: spins only on a machine with a CPU to spare, and only while its spins catch what
// they wait for.
#include "common/spin_policy.h"

#include <gtest/gtest.h>

namespace rgpu {
namespace {

using std::chrono::microseconds;

TEST(SpinPolicy, SparesACpuOnlyWithFourOrMoreAndTwoOfThemIdle) {
  EXPECT_FALSE(SpinPolicy::machine_can_spare(2, 0.0));  // the 2-core CI machine, even idle
  EXPECT_FALSE(SpinPolicy::machine_can_spare(4, 2.5));
  EXPECT_TRUE(SpinPolicy::machine_can_spare(4, 1.0));
  EXPECT_TRUE(SpinPolicy::machine_can_spare(16, 3.0));  // the GPU host
  EXPECT_FALSE(SpinPolicy::machine_can_spare(16, 15.0));
}

// The busy CPUs come from /proc/stat's times, not the load average: threads asleep in the kernel
// (a GPU driver's) count in the load average and made an idle 16-core GPU host look busy.
TEST(SpinPolicy, CountsBusyCpusFromTheMachinesCpuTimes) {
  SpinPolicy::CpuTimes a, b;
  ASSERT_TRUE(SpinPolicy::parse_cpu_line("cpu  100 5 50 800 45 0 0 0 0 0\n", &a));
  EXPECT_EQ(a.total, 1000u);
  EXPECT_EQ(a.idle, 845u);
  // One second on 16 CPUs: 1600 ticks, of which 1400 idle or waiting on I/O: 2 CPUs busy.
  ASSERT_TRUE(SpinPolicy::parse_cpu_line("cpu  250 5 100 2150 95 0 0 0 0 0\n", &b));
  EXPECT_DOUBLE_EQ(SpinPolicy::busy_between(a, b, 16), 2.0);
  EXPECT_TRUE(SpinPolicy::machine_can_spare(16, SpinPolicy::busy_between(a, b, 16)));
  EXPECT_EQ(SpinPolicy::busy_between(b, b, 16), 0.0);  // no time passed
  EXPECT_FALSE(SpinPolicy::parse_cpu_line("intr 1 2 3\n", &a));
  EXPECT_FALSE(SpinPolicy::parse_cpu_line("cpu  1 2\n", &a));
}

TEST(SpinPolicy, NeverSpinsOnABusyOrSmallMachine) {
  SpinPolicy p(microseconds(50));
  p.pretend_machine(2, 0.0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.before_wait(), microseconds(0));
}

TEST(SpinPolicy, SpinsWhileItCatchesAndBacksOffWhenItMisses) {
  SpinPolicy p(microseconds(50));
  p.pretend_machine(16, 0.5);
  EXPECT_EQ(p.before_wait(), microseconds(50));
  p.after_spin(true);
  EXPECT_EQ(p.before_wait(), microseconds(50));
  // Spins that keep missing (the peer takes longer than the window): it stops spinning ...
  int spun = 0;
  for (int i = 0; i < 10; ++i) {
    if (p.before_wait() > microseconds(0)) {
      ++spun;
      p.after_spin(false);
    }
  }
  EXPECT_LT(spun, 10);
  int later = 0;
  for (int i = 0; i < 64; ++i) later += p.before_wait() > microseconds(0);
  // ... but for a probe every 32nd wait, so that it notices when spinning pays again.
  EXPECT_GE(later, 1);
  EXPECT_LE(later, 3);
  for (int i = 0; i < 64 && p.before_wait() == microseconds(0); ++i) {
  }
  for (int i = 0; i < 8; ++i) p.after_spin(true);
  EXPECT_EQ(p.before_wait(), microseconds(50));
}

}  // namespace
}  // namespace rgpu
