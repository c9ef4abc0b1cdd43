// The Prometheus text: well-formed exposition format 0.0.4 under stable names.
#include "prometheus_text.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

namespace kvstash::server {
namespace {

// A snapshot with traffic in every section, as Service::ReadStats builds it.
StatsSnapshot SampleSnapshot() {
  Stats stats;
  Stats::Add(stats.requests, 12);
  Stats::Add(stats.store_bytes, 1 << 20);
  for (uint64_t micros : {10, 40, 40, 300, 3000, 2000000}) {
    stats.latency(RequestKind::kStore).Record(micros);
  }
  stats.latency(RequestKind::kLookup).Record(1500);
  RegistrationStats reg;
  Stats::Add(reg.store_chunks, 4);
  Stats::Add(reg.lookup_miss_chunks, 2);

  StatsSnapshot s;
  s.counters = stats.ReadCounters();
  s.gauges = {{"l1_used_bytes", "bytes used", 4096}, {"l1_capacity_bytes", "bytes", 8192}};
  for (size_t k = 0; k < s.latency.size(); ++k) s.latency[k] = stats.latency(RequestKind(k)).Read();
  s.registrations.push_back({7, "llama", 1, reg.ReadCounters()});
  s.registrations.push_back({9, "odd \"model\"\\\n", 0, RegistrationStats().ReadCounters()});
  return s;
}

struct Exposition {
  std::map<std::string, int> help_count, type_count;
  std::map<std::string, std::string> type;
  std::vector<std::pair<std::string, std::string>> samples;  // "name{labels}", value
  std::vector<std::string> errors;
};

// The family a sample belongs to: histograms own _bucket, _sum and _count.
std::string FamilyOf(const Exposition& e, const std::string& sample_name) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample_name.size() > s.size() &&
        sample_name.compare(sample_name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample_name.substr(0, sample_name.size() - s.size());
      auto it = e.type.find(base);
      if (it != e.type.end() && it->second == "histogram") return base;
    }
  }
  return sample_name;
}

Exposition Parse(const std::string& text) {
  Exposition e;
  EXPECT_EQ(text.back(), '\n');
  std::istringstream lines(text);
  std::string line, current;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name >> rest;
      if (line[2] == 'H') {
        ++e.help_count[name];
        current = name;
        if (rest.empty()) e.errors.push_back("empty HELP for " + name);
      } else {
        ++e.type_count[name];
        e.type[name] = rest;
        if (name != current) e.errors.push_back("TYPE without HELP before it: " + name);
      }
      continue;
    }
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) {
      e.errors.push_back("not a sample: " + line);
      continue;
    }
    const std::string series = line.substr(0, space);
    const std::string name = series.substr(0, series.find('{'));
    if (FamilyOf(e, name) != current) e.errors.push_back("sample outside its family: " + line);
    e.samples.emplace_back(series, line.substr(space + 1));
  }
  return e;
}

std::string Value(const Exposition& e, const std::string& series) {
  for (const auto& [s, v] : e.samples) {
    if (s == series) return v;
  }
  return "(absent)";
}

TEST(PrometheusText, EveryFamilyHasHelpAndTypeOnceBeforeItsSamples) {
  const Exposition e = Parse(PrometheusText(SampleSnapshot()));
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  for (const auto& [name, count] : e.help_count) EXPECT_EQ(count, 1) << name;
  for (const auto& [name, count] : e.type_count) EXPECT_EQ(count, 1) << name;
  EXPECT_EQ(e.help_count.size(), e.type_count.size());
  for (const auto& [name, type] : e.type) {
    EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << name << " " << type;
    if (type == "counter") {
      EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
    }
  }
}

TEST(PrometheusText, EveryCounterIsExportedUnderItsStableName) {
  const StatsSnapshot snapshot = SampleSnapshot();
  const Exposition e = Parse(PrometheusText(snapshot));
  for (const Stats::Counter& c : snapshot.counters) {
    const std::string name = std::string("kvstash_") + c.name + "_total";
    EXPECT_EQ(e.type.at(name), "counter");
    EXPECT_EQ(Value(e, name), std::to_string(c.value)) << name;
  }
  EXPECT_EQ(Value(e, "kvstash_requests_total"), "12");
  EXPECT_EQ(Value(e, "kvstash_store_bytes_total"), "1048576");
  EXPECT_EQ(Value(e, "kvstash_lookup_miss_chunks_total"), "0");
  EXPECT_EQ(e.type.at("kvstash_l1_used_bytes"), "gauge");
  EXPECT_EQ(Value(e, "kvstash_l1_used_bytes"), "4096");
  EXPECT_EQ(Value(e, "kvstash_l1_capacity_bytes"), "8192");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndEndInInf) {
  const Exposition e = Parse(PrometheusText(SampleSnapshot()));
  EXPECT_EQ(e.type.at("kvstash_request_duration_seconds"), "histogram");
  for (size_t k = 0; k < size_t(RequestKind::kCount); ++k) {
    const std::string request = std::string("request=\"") + RequestKindName(RequestKind(k)) + "\"";
    const std::string prefix = "kvstash_request_duration_seconds_bucket{" + request + ",le=\"";
    std::vector<std::pair<double, uint64_t>> buckets;
    std::vector<std::string> les;
    for (const auto& [series, value] : e.samples) {
      if (series.rfind(prefix, 0) != 0) continue;
      const std::string le = series.substr(prefix.size(), series.size() - prefix.size() - 2);
      les.push_back(le);
      buckets.emplace_back(le == "+Inf" ? 1e300 : std::stod(le), std::stoull(value));
    }
    ASSERT_EQ(buckets.size(), LatencyHistogram::kBoundsUs.size() + 1) << request;
    EXPECT_EQ(les.back(), "+Inf");
    for (size_t b = 1; b < buckets.size(); ++b) {
      EXPECT_LT(buckets[b - 1].first, buckets[b].first) << request;
      EXPECT_LE(buckets[b - 1].second, buckets[b].second) << request;
    }
    EXPECT_EQ(Value(e, "kvstash_request_duration_seconds_count{" + request + "}"),
              std::to_string(buckets.back().second));
  }
}

TEST(PrometheusText, HistogramBoundsAndSumAreInSeconds) {
  const Exposition e = Parse(PrometheusText(SampleSnapshot()));
  const std::string store = "kvstash_request_duration_seconds_bucket{request=\"store\",le=\"";
  // Samples 10, 40, 40, 300, 3000 and 2000000 µs.
  EXPECT_EQ(Value(e, store + "0.000025\"}"), "1");
  EXPECT_EQ(Value(e, store + "0.00005\"}"), "3");
  EXPECT_EQ(Value(e, store + "0.0005\"}"), "4");
  EXPECT_EQ(Value(e, store + "0.005\"}"), "5");
  EXPECT_EQ(Value(e, store + "1\"}"), "5");
  EXPECT_EQ(Value(e, store + "+Inf\"}"), "6");
  EXPECT_EQ(Value(e, "kvstash_request_duration_seconds_count{request=\"store\"}"), "6");
  EXPECT_EQ(Value(e, "kvstash_request_duration_seconds_sum{request=\"store\"}"), "2.00339");
  EXPECT_EQ(Value(e, "kvstash_request_duration_seconds_sum{request=\"lookup\"}"), "0.0015");
  EXPECT_EQ(Value(e, "kvstash_request_duration_seconds_count{request=\"ping\"}"), "0");
}

TEST(PrometheusText, RegistrationSeriesCarryIdModelAndRank) {
  const Exposition e = Parse(PrometheusText(SampleSnapshot()));
  const std::string labels = "{registration=\"7\",model=\"llama\",tp_rank=\"1\"}";
  EXPECT_EQ(Value(e, "kvstash_registration_store_chunks_total" + labels), "4");
  EXPECT_EQ(Value(e, "kvstash_registration_lookup_miss_chunks_total" + labels), "2");
  EXPECT_EQ(Value(e, "kvstash_registration_retrieve_bytes_total" + labels), "0");
  // Quote, backslash and newline in a label value are escaped.
  EXPECT_EQ(Value(e,
                  "kvstash_registration_store_chunks_total{registration=\"9\",model=\"odd "
                  "\\\"model\\\"\\\\\\n\",tp_rank=\"0\"}"),
            "0");
}

TEST(PrometheusText, RegistrationFamiliesExistWithoutRegistrations) {
  StatsSnapshot empty;
  const Exposition e = Parse(PrometheusText(empty));
  EXPECT_EQ(e.type.at("kvstash_registration_lookup_hit_tokens_total"), "counter");
  EXPECT_EQ(e.type.at("kvstash_request_duration_seconds"), "histogram");
}

}  // namespace
}  // namespace kvstash::server
