// Connection options and error reporting shared by the subcommands.
#include "common.h"

#include <sys/stat.h>

#include <chrono>
#include <iostream>

namespace kvstash::cli {

void AddCommonOptions(CLI::App& command, CommonOptions& options) {
  command.add_option("--socket", options.socket, "kvstashd endpoint (ipc:// or tcp://)")
      ->envname("KVSTASH_SOCKET")
      ->capture_default_str();
  command.add_flag("--json", options.json, "print JSON for machines instead of tables");
  command.add_option("--timeout-ms", options.timeout_ms, "per-request timeout")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  command.add_option("--busy-poll-us", options.busy_poll_us,
                     "keep the client's I/O thread polling this long after its last message "
                     "(and while replies are awaited) instead of sleeping; 0 = never")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  command.add_flag("-v,--verbose", options.verbose, "log the client library's messages");
}

Result<std::unique_ptr<Client>> ConnectCli(const CommonOptions& options) {
  const std::string ipc = "ipc://";
  if (options.socket.compare(0, ipc.size(), ipc) == 0) {
    const std::string path = options.socket.substr(ipc.size());
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return Status::Unavailable("no kvstashd socket at " + path +
                                 " (is kvstashd running? set --socket or KVSTASH_SOCKET)");
    }
  }
  ClientOptions client_options;
  client_options.socket = options.socket;
  client_options.request_timeout = std::chrono::milliseconds(options.timeout_ms);
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

}  // namespace kvstash::cli
