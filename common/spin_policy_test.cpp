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
