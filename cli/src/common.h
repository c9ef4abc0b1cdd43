// What every `kvstash` subcommand shares: the global connection options,
// connecting, and how failures are reported.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvstash/client.h"

namespace kvstash::cli {

// Options of the `kvstash` app itself, accepted before or after the
// subcommand (`kvstash --socket S ping` and `kvstash ping --socket S`).
struct CommonOptions {
  std::string socket;  // empty: $KVSTASH_SOCKET, else kDefaultSocket
  bool json = false;
  int timeout_ms = 0;  // 0: the command's default (DefaultTimeoutMs)
  bool verbose = false;
  uint32_t busy_poll_us = ClientOptions{}.busy_poll_us;  // the spin window

  // The endpoint to connect to: --socket, $KVSTASH_SOCKET or the default,
  // a plain path taken as an ipc socket.
  std::string Endpoint() const;
};

// Request timeouts when --timeout-ms is not given.
inline constexpr int kDefaultTimeoutMs = 10000;
inline constexpr int kBenchTimeoutMs = 60000;

// --socket, --json, --timeout-ms, --busy-poll-us, --verbose on the top-level
// app; subcommands fall through to it for options they do not know.
void AddCommonOptions(CLI::App& app, CommonOptions& options);

// Connects, failing at once with a hint when an ipc socket file is missing.
Result<std::unique_ptr<Client>> ConnectCli(const CommonOptions& options,
                                           int default_timeout_ms = kDefaultTimeoutMs);

// Prints "kvstash <command>: <status>" to stderr; returns the exit code 1.
int Fail(const std::string& command, const Status& status);

// A registered subcommand and what runs it once parsed (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Each subcommand reads the shared options once the command line is parsed.
using SharedOptions = std::shared_ptr<const CommonOptions>;

Command AddPingCommand(CLI::App& app, SharedOptions options);
Command AddDescribeCommand(CLI::App& app, SharedOptions options);
Command AddStatsCommand(CLI::App& app, SharedOptions options);
Command AddClearCommand(CLI::App& app, SharedOptions options);
Command AddBenchCommand(CLI::App& app, SharedOptions options);

// The subcommand name closest to `typed` (edit distance at most 2, or a
// prefix), or "" when none is close.
std::string ClosestName(const std::string& typed, const std::vector<std::string>& names);

// The first word of argv (after argv[0]) that is neither an option nor an
// option's value: what the user meant as the subcommand; "" when none.
std::string FirstCommandWord(int argc, const char* const* argv);

}  // namespace kvstash::cli
