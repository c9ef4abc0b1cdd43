// What every `kvstash` subcommand shares: its connection options, connecting,
// and how failures are reported.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvstash/client.h"

namespace kvstash::cli {

struct CommonOptions {
  std::string socket = kDefaultSocket;
  bool json = false;
  int timeout_ms = 10000;
  bool verbose = false;
  uint32_t busy_poll_us = 0;  // ClientOptions::busy_poll_us
};

// --socket (env KVSTASH_SOCKET), --json, --timeout-ms, --busy-poll-us, --verbose.
void AddCommonOptions(CLI::App& command, CommonOptions& options);

// Connects, failing at once with a hint when an ipc:// socket file is missing.
Result<std::unique_ptr<Client>> ConnectCli(const CommonOptions& options);

// Prints "kvstash <command>: <status>" to stderr; returns the exit code 1.
int Fail(const std::string& command, const Status& status);

// A registered subcommand and what runs it once parsed (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddPingCommand(CLI::App& app);
Command AddDescribeCommand(CLI::App& app);
Command AddStatsCommand(CLI::App& app);
Command AddClearCommand(CLI::App& app);
Command AddBenchCommand(CLI::App& app);

}  // namespace kvstash::cli
