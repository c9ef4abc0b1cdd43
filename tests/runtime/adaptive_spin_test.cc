// When kvstashd's and libkvstash's threads poll on a core instead of sleeping.
#include "kvstash/runtime/adaptive_spin.h"

#include <gtest/gtest.h>

namespace kvstash {
namespace {

using std::chrono::microseconds;

TEST(AdaptiveSpinTest, SpinsForTheWindowAfterActivityThenSleeps) {
  AdaptiveSpin spin(microseconds(50));
  const auto t = AdaptiveSpin::Clock::time_point() + std::chrono::seconds(100);
  spin.Activity(t);
  EXPECT_TRUE(spin.Spinning(t + microseconds(49), false));
  EXPECT_FALSE(spin.Spinning(t + microseconds(50), false));
  EXPECT_FALSE(spin.Spinning(t + std::chrono::seconds(1), false));
}

TEST(AdaptiveSpinTest, WorkInFlightStretchesTheWindowButNotForever) {
  AdaptiveSpin spin(microseconds(50));
  const auto t = AdaptiveSpin::Clock::time_point() + std::chrono::seconds(100);
  spin.Activity(t);
  EXPECT_TRUE(spin.Spinning(t + microseconds(50 * AdaptiveSpin::kInFlightWindows - 1), true));
  EXPECT_FALSE(spin.Spinning(t + microseconds(50 * AdaptiveSpin::kInFlightWindows), true));
}

TEST(AdaptiveSpinTest, AZeroWindowNeverSpins) {
  AdaptiveSpin spin(microseconds(0));
  const auto t = AdaptiveSpin::Clock::time_point() + std::chrono::seconds(100);
  spin.Activity(t);
  EXPECT_FALSE(spin.Spinning(t, true));
  EXPECT_FALSE(spin.Spinning(t, false));
}

TEST(AdaptiveSpinTest, NothingYetMeansNoSpinning) {
  AdaptiveSpin spin(microseconds(50));
  EXPECT_FALSE(spin.Spinning(AdaptiveSpin::Clock::now(), true));
}

}  // namespace
}  // namespace kvstash
