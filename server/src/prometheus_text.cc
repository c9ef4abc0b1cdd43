// Renders the Prometheus text format: HELP and TYPE once per family, then its
// samples; histogram buckets cumulative, ending in +Inf.
#include "prometheus_text.h"

#include <cstdio>
#include <utility>

namespace kvstash::server {

namespace {

constexpr const char* kPrefix = "kvstash_";

// HELP text escapes backslash and newline; label values also the quote.
std::string Escape(const std::string& text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Microseconds as decimal seconds, exactly: 25 -> "0.000025", 10^6 -> "1".
std::string Seconds(uint64_t micros) {
  std::string out = std::to_string(micros / 1000000);
  uint64_t fraction = micros % 1000000;
  if (fraction == 0) return out;
  char digits[8];
  std::snprintf(digits, sizeof(digits), "%06llu", static_cast<unsigned long long>(fraction));
  std::string tail(digits);
  tail.erase(tail.find_last_not_of('0') + 1);
  return out + "." + tail;
}

void Family(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + Escape(help, false) + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

void Sample(std::string& out, const std::string& name, const std::string& labels,
            const std::string& value) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " " + value + "\n";
}

void Histograms(std::string& out, const StatsSnapshot& snapshot) {
  const std::string name = std::string(kPrefix) + "request_duration_seconds";
  Family(out, name, "histogram",
         "seconds from receiving a request to handing over its reply, by request kind");
  for (size_t k = 0; k < snapshot.latency.size(); ++k) {
    const LatencyHistogram::Snapshot& h = snapshot.latency[k];
    const std::string request = std::string("request=\"") + RequestKindName(RequestKind(k)) + "\"";
    // The count is the +Inf bucket, not h.count: the fields are read one by
    // one while requests finish, and Prometheus needs them equal.
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h.buckets.size(); ++b) {
      cumulative += h.buckets[b];
      const std::string le =
          b < LatencyHistogram::kBoundsUs.size() ? Seconds(LatencyHistogram::kBoundsUs[b]) : "+Inf";
      Sample(out, name + "_bucket", request + ",le=\"" + le + "\"", std::to_string(cumulative));
    }
    Sample(out, name + "_sum", request, Seconds(h.sum_us));
    Sample(out, name + "_count", request, std::to_string(cumulative));
  }
}

void RegistrationCounters(std::string& out, const StatsSnapshot& snapshot) {
  // The families come from the X-macro, so they exist with no registration.
  RegistrationStats names;
  const std::vector<Stats::Counter> families = names.ReadCounters();
  for (size_t i = 0; i < families.size(); ++i) {
    const std::string name = std::string(kPrefix) + "registration_" + families[i].name + "_total";
    Family(out, name, "counter", families[i].help);
    for (const StatsSnapshot::Registration& reg : snapshot.registrations) {
      const std::string labels = "registration=\"" + std::to_string(reg.id) + "\",model=\"" +
                                 Escape(reg.model, true) + "\",tp_rank=\"" +
                                 std::to_string(reg.tp_rank) + "\"";
      Sample(out, name, labels, std::to_string(reg.counters.at(i).value));
    }
  }
}

// Per tier below L1 (label tier="L2"/"L3"): counters, usage, operation latency.
void TierMetrics(std::string& out, const StatsSnapshot& snapshot) {
  if (snapshot.tiers.empty()) return;
  for (size_t i = 0; i < snapshot.tiers.front().counters.size(); ++i) {
    const std::string name =
        std::string(kPrefix) + "tier_" + snapshot.tiers.front().counters[i].name + "_total";
    Family(out, name, "counter", snapshot.tiers.front().counters[i].help);
    for (const TierSnapshot& t : snapshot.tiers) {
      Sample(out, name, "tier=\"" + t.level + "\"", std::to_string(t.counters.at(i).value));
    }
  }
  const std::pair<const char*, const char*> gauges[] = {
      {"tier_capacity_bytes", "bytes the tier may hold (0: unknown, a shared store)"},
      {"tier_used_bytes", "bytes the tier holds"},
      {"tier_chunks", "chunks the tier holds"}};
  for (size_t g = 0; g < 3; ++g) {
    const std::string name = std::string(kPrefix) + gauges[g].first;
    Family(out, name, "gauge", gauges[g].second);
    for (const TierSnapshot& t : snapshot.tiers) {
      const uint64_t value = g == 0 ? t.capacity_bytes : g == 1 ? t.used_bytes : t.chunks;
      Sample(out, name, "tier=\"" + t.level + "\"", std::to_string(value));
    }
  }
  const std::string name = std::string(kPrefix) + "tier_operation_duration_seconds";
  Family(out, name, "histogram", "seconds one chunk's put or get took in a tier");
  for (const TierSnapshot& t : snapshot.tiers) {
    for (const auto& [op, h] :
         {std::pair{"put", &t.put_latency}, std::pair{"get", &t.get_latency}}) {
      const std::string labels = "tier=\"" + t.level + "\",op=\"" + op + "\"";
      uint64_t cumulative = 0;
      for (size_t b = 0; b < h->buckets.size(); ++b) {
        cumulative += h->buckets[b];
        const std::string le = b < LatencyHistogram::kBoundsUs.size()
                                   ? Seconds(LatencyHistogram::kBoundsUs[b])
                                   : "+Inf";
        Sample(out, name + "_bucket", labels + ",le=\"" + le + "\"", std::to_string(cumulative));
      }
      Sample(out, name + "_sum", labels, Seconds(h->sum_us));
      Sample(out, name + "_count", labels, std::to_string(cumulative));
    }
  }
}

}  // namespace

std::string PrometheusText(const StatsSnapshot& snapshot) {
  std::string out;
  out.reserve(32 * 1024);
  for (const Stats::Counter& c : snapshot.counters) {
    const std::string name = std::string(kPrefix) + c.name + "_total";
    Family(out, name, "counter", c.help);
    Sample(out, name, "", std::to_string(c.value));
  }
  for (const Gauge& g : snapshot.gauges) {
    const std::string name = std::string(kPrefix) + g.name;
    Family(out, name, "gauge", g.help);
    Sample(out, name, "", std::to_string(g.value));
  }
  Histograms(out, snapshot);
  RegistrationCounters(out, snapshot);
  TierMetrics(out, snapshot);
  return out;
}

}  // namespace kvstash::server
