// Counters and latency histograms.
#include "stats.h"

#include <gtest/gtest.h>

#include <string>

namespace kvstash::server {
namespace {

TEST(Stats, CountersAreListedOnceWithHelp) {
  Stats stats;
  Stats::Add(stats.store_chunks_stored, 3);
  bool found = false;
  for (const auto& c : stats.ReadCounters()) {
    EXPECT_NE(std::string(c.help), "");
    if (std::string(c.name) == "store_chunks_stored") found = c.value == 3;
  }
  EXPECT_TRUE(found);
}

uint64_t CounterOf(const Stats& stats, const std::string& name) {
  uint64_t value = 0;
  size_t found = 0;
  for (const auto& c : stats.ReadCounters()) {
    if (std::string(c.name) == name) {
      value = c.value;
      ++found;
    }
  }
  EXPECT_EQ(found, 1u) << name << " listed " << found << " times";
  return value;
}

TEST(Stats, FrontendCountersAreReadWithTheServicesAndSharedNamesSummed) {
  Stats stats;
  FrontendStats frontend;
  Stats::Add(stats.request_errors, 2);
  Stats::Add(frontend.request_errors, 3);
  Stats::Add(frontend.channels_attached, 4);
  EXPECT_EQ(CounterOf(stats, "request_errors"), 2u);  // the frontend not counted yet
  stats.CountFrontend(&frontend);
  EXPECT_EQ(CounterOf(stats, "request_errors"), 5u);
  EXPECT_EQ(CounterOf(stats, "channels_attached"), 4u);
  EXPECT_EQ(CounterOf(stats, "channel_doorbells"), 0u);
}

TEST(Stats, HistogramPercentilesBracketTheSamples) {
  LatencyHistogram h;
  for (int i = 0; i < 98; ++i) h.Record(40);
  h.Record(3000);
  h.Record(3000);
  auto s = h.Read();
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.Percentile(0.5), 50u);
  EXPECT_EQ(s.Percentile(0.99), 5000u);
}

}  // namespace
}  // namespace kvstash::server
