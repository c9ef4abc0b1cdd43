// Counters and latency histograms.
#include "stats.h"

#include <gtest/gtest.h>

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
