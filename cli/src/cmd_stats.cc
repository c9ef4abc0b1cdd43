// `kvstash stats`: the daemon's figures in an operator's order (pool,
// registrations, counters, rates, latency), or its JSON itself.
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.h"
#include "json_table.h"
#include "operator_view.h"

namespace kvstash::cli {

namespace {

std::string CountersTable(const StatsResult& stats) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& [name, value] : stats.counters)
    rows.push_back({{"counter", name}, {"value", value}});
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
  if (document.is_object()) {
    std::cout << RenderSections(StatsView(document));
  } else {
    // No usable JSON from the daemon: its counters alone.
    std::cout << CountersTable(*stats);
  }
  return 0;
}

}  // namespace

Command AddStatsCommand(CLI::App& app, SharedOptions options) {
  CLI::App* command = app.add_subcommand("stats", "Show the daemon's counters and rates");
  return {command, [options] { return RunStats(*options); }};
}

}  // namespace kvstash::cli
