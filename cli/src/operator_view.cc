// Section order and plain names for `kvstash describe` and `kvstash stats`.
#include "operator_view.h"

#include "json_table.h"

#include <string>
#include <utility>
#include <vector>

namespace kvstash::cli {

namespace {

using json = nlohmann::ordered_json;

// (key in the daemon's document, title shown), in the order shown; keys not
// listed follow under their own names.
using Sections = std::vector<std::pair<std::string, std::string>>;

json Reorder(const json& document, const Sections& sections,
             json (*transform)(const std::string& key, const json& value)) {
  if (!document.is_object()) return document;
  json out = json::object();
  for (const auto& [key, title] : sections) {
    if (document.contains(key)) out[title] = transform(key, document[key]);
  }
  for (const auto& [key, value] : document.items()) {
    bool listed = false;
    for (const auto& section : sections) listed = listed || section.first == key;
    if (!listed) out[key] = transform(key, value);
  }
  return out;
}

json AsIs(const std::string&, const json& value) { return value; }

// {"Store": {"count", "mean_us", "p50_us", "p99_us"}, ...} as rows of
// plainly named columns (the daemon's percentiles are the upper bounds of
// its histogram buckets, which the section title says; earlier daemons
// named them p50_us_le and p99_us_le).
json LatencyRows(const json& latency) {
  if (!latency.is_object()) return latency;
  json rows = json::array();
  for (const auto& [request, figures] : latency.items()) {
    if (!figures.is_object()) return latency;
    json row = {{"request", request}};
    auto copy = [&](const char* from, const char* to) {
      if (figures.contains(from)) row[to] = figures[from];
    };
    copy("count", "count");
    copy("mean_us", "mean µs");
    copy("p50_us_le", "p50 µs");
    copy("p99_us_le", "p99 µs");
    copy("p50_us", "p50 µs");
    copy("p99_us", "p99 µs");
    for (const auto& [key, value] : figures.items()) {
      if (key != "count" && key != "mean_us" && key.rfind("p50_us", 0) != 0 &&
          key.rfind("p99_us", 0) != 0) {
        row[key] = value;
      }
    }
    rows.push_back(std::move(row));
  }
  return rows.empty() ? json("(no requests yet)") : rows;
}

json StatsSection(const std::string& key, const json& value) {
  return key == "latency" ? LatencyRows(value) : value;
}

}  // namespace

json DescribeView(const json& describe) {
  return Reorder(describe,
                 {{"server", "server"},
                  {"backend", "backend"},
                  {"tiers", "pool and tiers"},
                  {"pool", "pool"},
                  {"registrations", "registrations"},
                  {"config", "config"}},
                 AsIs);
}

json StatsView(const json& stats) {
  return Reorder(stats,
                 {{"gauges", "pool and tiers"},
                  {"tiers", "tiers below L1"},
                  {"per_registration", "registrations"},
                  {"counters", "counters"},
                  {"derived", "rates"},
                  {"latency", "latency (µs; p50 and p99 are histogram bucket bounds)"}},
                 StatsSection);
}

std::string RenderSections(const json& view) {
  if (!view.is_object()) return RenderJson(view);
  std::string out;
  for (const auto& [key, value] : view.items()) {
    std::string section;
    if (value.is_object() || (value.is_array() && !value.empty() && value[0].is_object())) {
      section = RenderJson(json{{key, value}});
    } else {
      const bool none = value.is_null() || (value.is_array() && value.empty());
      section = "# " + key + "\n" + (none ? std::string("(none)\n") : RenderJson(value));
    }
    if (section.empty()) continue;  // an empty object
    out += (out.empty() ? "" : "\n") + section;
  }
  return out;
}

}  // namespace kvstash::cli
