// kvstash: the command-line client of kvstashd (ping, describe, stats,
// clear) and its synthetic engine workload (bench).
#include <iostream>
#include <vector>

#include "common.h"

int main(int argc, char** argv) {
  CLI::App app{"kvstash: talk to kvstashd, the KV-cache offload daemon"};
  app.require_subcommand(1);
  std::vector<kvstash::cli::Command> commands = {
      kvstash::cli::AddPingCommand(app),  kvstash::cli::AddDescribeCommand(app),
      kvstash::cli::AddStatsCommand(app), kvstash::cli::AddClearCommand(app),
      kvstash::cli::AddBenchCommand(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const kvstash::cli::Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return 1;
}
