// `kvstash stats`: the daemon's counters as a name/value table (then the
// derived figures of its JSON), or the JSON itself.
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "common.h"
#include "json_table.h"

namespace kvstash::cli {

namespace {

std::string CountersTable(const StatsResult& stats) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& [name, value] : stats.counters) rows.push_back({{"counter", name}, {"value", value}});
  return rows.empty() ? std::string("(no counters)\n") : RenderJson(rows);
}

int RunStats(const CommonOptions& options) {
  auto client = ConnectCli(options);
  if (!client.ok()) return Fail("stats", client.status());
  Result<StatsResult> stats = (*client)->Stats().get();
  if (!stats.ok()) return Fail("stats", stats.status());
  nlohmann::ordered_json document = nlohmann::ordered_json::parse(stats->json, nullptr, false);
  if (options.json) {
    if (document.is_discarded()) {
      // No usable JSON from the daemon: give machines the counters.
      document = nlohmann::ordered_json::object();
      for (const auto& [name, value] : stats->counters) document[name] = value;
    }
    std::cout << document.dump(2) << "\n";
    return 0;
  }
  std::cout << CountersTable(*stats);
  if (document.is_object()) {
    // The JSON repeats the counters (at the top or as one section); show only
    // what it adds.
    std::set<std::string> names;
    for (const auto& counter : stats->counters) names.insert(counter.first);
    auto repeats_counters = [&](const std::string& key, const nlohmann::ordered_json& value) {
      if (names.count(key)) return true;
      if (!value.is_object() || value.empty()) return false;
      for (const auto& item : value.items()) {
        if (!names.count(item.key())) return false;
      }
      return true;
    };
    nlohmann::ordered_json derived = nlohmann::ordered_json::object();
    for (const auto& [key, value] : document.items()) {
      if (!repeats_counters(key, value)) derived[key] = value;
    }
    if (!derived.empty()) std::cout << "\n" << RenderJson(derived);
  }
  return 0;
}

}  // namespace

Command AddStatsCommand(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* command = app.add_subcommand("stats", "Show the daemon's counters and rates");
  AddCommonOptions(*command, *options);
  return {command, [options] { return RunStats(*options); }};
}

}  // namespace kvstash::cli
