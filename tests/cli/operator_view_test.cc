// describe and stats as an operator reads them: sections in order, latency
// with plain names.
#include "operator_view.h"

#include <gtest/gtest.h>

#include "json_table.h"

namespace kvstash::cli {
namespace {

using json = nlohmann::ordered_json;

std::vector<std::string> Keys(const json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

TEST(OperatorView, DescribeShowsServerPoolRegistrationsThenConfig) {
  // As the daemon sends it today: keys sorted alphabetically.
  const json describe = json::parse(R"({"backend": {"name": "host"}, "config": {"l1_gb": "2"},
      "registrations": [], "server": {"version": "0.1.0"}, "tiers": [{"name": "L1"}],
      "zzz_new": 1})");
  EXPECT_EQ(Keys(DescribeView(describe)),
            (std::vector<std::string>{"server", "backend", "pool and tiers", "registrations",
                                      "config", "zzz_new"}));
}

TEST(OperatorView, StatsShowsPoolRegistrationsCountersRatesThenLatency) {
  const json stats = json::parse(R"({"counters": {"requests": 3}, "derived": {"lookup_hit_rate": 1},
      "gauges": {"l1_used_bytes": 0}, "latency": {"Ping": {"count": 2, "mean_us": 30,
      "p50_us_le": 50, "p99_us_le": 100}}, "per_registration": []})");
  const json view = StatsView(stats);
  ASSERT_EQ(Keys(view).size(), 5u);
  EXPECT_EQ(Keys(view)[0], "pool and tiers");
  EXPECT_EQ(Keys(view)[1], "registrations");
  EXPECT_EQ(Keys(view)[2], "counters");
  EXPECT_EQ(Keys(view)[3], "rates");
  EXPECT_EQ(Keys(view)[4].rfind("latency (µs", 0), 0u) << Keys(view)[4];
  const std::string text = RenderJson(view);
  EXPECT_EQ(text.find("_le"), std::string::npos) << text;
  EXPECT_NE(text.find("request  count  mean µs  p50 µs  p99 µs\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Ping     2      30       50      100\n"), std::string::npos) << text;
}

TEST(OperatorView, RendersSectionsInTheViewsOrder) {
  const json describe = json::parse(R"({"registrations": [], "server": {"version": "0.1.0"},
      "tiers": [{"name": "L1", "used_bytes": 0}]})");
  const std::string text = RenderSections(DescribeView(describe));
  const size_t server = text.find("# server\n");
  const size_t pool = text.find("# pool and tiers\n");
  const size_t registrations = text.find("# registrations\n(none)\n");
  ASSERT_NE(server, std::string::npos) << text;
  ASSERT_NE(pool, std::string::npos) << text;
  ASSERT_NE(registrations, std::string::npos) << text;
  EXPECT_LT(server, pool) << text;
  EXPECT_LT(pool, registrations) << text;
}

TEST(OperatorView, LeavesUnknownDocumentsAlone) {
  EXPECT_EQ(StatsView(json::array({1, 2})), json::array({1, 2}));
  EXPECT_EQ(DescribeView(json("text")), json("text"));
}

}  // namespace
}  // namespace kvstash::cli
