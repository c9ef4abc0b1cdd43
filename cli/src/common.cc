// Connection options, error reporting and command-name suggestions shared by
// the subcommands.
#include "common.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "kvstash/endpoint.h"

namespace kvstash::cli {

namespace {

// Global options that take a value, so FirstCommandWord skips it.
bool TakesValue(const std::string& arg) {
  return arg == "--socket" || arg == "--timeout-ms" || arg == "--busy-poll-us";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string CommonOptions::Endpoint() const {
  const char* from_environment = std::getenv(kSocketEnvVar);
  return ClientEndpoint(socket, from_environment != nullptr ? from_environment : "");
}

void AddCommonOptions(CLI::App& app, CommonOptions& options) {
  app.fallthrough();
  app.add_option("--socket", options.socket,
                 "kvstashd endpoint: ipc://PATH, tcp://HOST:PORT, or a plain path (an ipc "
                 "socket); default: $KVSTASH_SOCKET, else " +
                     std::string(kDefaultSocket));
  app.add_flag("--json", options.json, "print JSON for machines instead of tables");
  app.add_option("--timeout-ms", options.timeout_ms,
                 "per-request timeout in ms (default " + std::to_string(kDefaultTimeoutMs) +
                     ", bench " + std::to_string(kBenchTimeoutMs) + ")")
      ->check(CLI::Range(1, 3600 * 1000));
  app.add_option("--busy-poll-us", options.busy_poll_us,
                 "the spin window: keep the client's I/O thread polling this long after its "
                 "last message (and up to 20 windows while replies are awaited) instead of "
                 "sleeping; 0 = never")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_flag("-v,--verbose", options.verbose, "log the client library's messages");
}

Result<std::unique_ptr<Client>> ConnectCli(const CommonOptions& options, int default_timeout_ms) {
  const std::string endpoint = options.Endpoint();
  const std::string ipc = "ipc://";
  if (endpoint.compare(0, ipc.size(), ipc) == 0) {
    const std::string path = endpoint.substr(ipc.size());
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return Status::Unavailable("no kvstashd socket at " + path +
                                 " (is kvstashd running? set --socket or KVSTASH_SOCKET)");
    }
  }
  ClientOptions client_options;
  client_options.socket = endpoint;
  client_options.request_timeout =
      std::chrono::milliseconds(options.timeout_ms > 0 ? options.timeout_ms : default_timeout_ms);
  client_options.client_name = "kvstash-cli";
  client_options.busy_poll_us = options.busy_poll_us;
  if (options.verbose) {
    client_options.log = [](LogLevel level, std::string_view text) {
      static const char* const kNames[] = {"debug", "info", "warn", "error"};
      std::cerr << "[kvstash " << kNames[int(level)] << "] " << text << "\n";
    };
  }
  return Client::Connect(std::move(client_options));
}

int Fail(const std::string& command, const Status& status) {
  std::cerr << "kvstash " << command << ": " << status.ToString() << "\n";
  return 1;
}

std::string ClosestName(const std::string& typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 3;  // farther than 2 edits is no suggestion
  for (const std::string& name : names) {
    const bool prefix = typed.size() >= 2 && name.compare(0, typed.size(), typed) == 0;
    const size_t distance = prefix ? 1 : EditDistance(typed, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

std::string FirstCommandWord(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return "";
    if (TakesValue(arg)) {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] != '-') return arg;
  }
  return "";
}

}  // namespace kvstash::cli
