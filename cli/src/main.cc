// kvstash: the command-line client of kvstashd (ping, describe, stats,
// clear) and its synthetic engine workload (bench).
#include <algorithm>
#include <iostream>
#include <vector>

#include "common.h"

int main(int argc, char** argv) {
  CLI::App app{"kvstash: talk to kvstashd, the KV-cache offload daemon"};
  app.require_subcommand(1);
  app.footer(
      "Global options go before or after the subcommand: kvstash --socket S ping, or kvstash "
      "ping --socket S.\nRun kvstash SUBCOMMAND --help for a subcommand's own options.");
  auto options = std::make_shared<kvstash::cli::CommonOptions>();
  kvstash::cli::AddCommonOptions(app, *options);
  std::vector<kvstash::cli::Command> commands = {
      kvstash::cli::AddPingCommand(app, options),  kvstash::cli::AddDescribeCommand(app, options),
      kvstash::cli::AddStatsCommand(app, options), kvstash::cli::AddClearCommand(app, options),
      kvstash::cli::AddBenchCommand(app, options),
  };
  std::vector<std::string> names;
  for (const kvstash::cli::Command& command : commands) {
    names.push_back(command.app->get_name());
    command.app->footer(
        "Global options (--socket, --json, --timeout-ms, --busy-poll-us, -v) are accepted here "
        "too; kvstash --help lists them.");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A mistyped subcommand: name it and suggest the closest one.
    const std::string word = kvstash::cli::FirstCommandWord(argc, argv);
    if (!word.empty() && std::find(names.begin(), names.end(), word) == names.end() &&
        e.get_exit_code() != 0) {
      const std::string closest = kvstash::cli::ClosestName(word, names);
      std::cerr << "kvstash: unknown command '" << word << "'";
      if (!closest.empty()) std::cerr << "; did you mean '" << closest << "'?";
      std::cerr << "\nRun kvstash --help for the commands.\n";
      return 2;
    }
    return app.exit(e);
  }
  for (const kvstash::cli::Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return 1;
}
