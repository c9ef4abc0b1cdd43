// `kvstash ping`: is kvstashd there, which one, and how fast does it answer.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.h"

namespace kvstash::cli {

namespace {

std::string Uptime(uint64_t ms) {
  const uint64_t s = ms / 1000;
  char text[64];
  if (s >= 86400) {
    std::snprintf(text, sizeof(text), "%llud%lluh", (unsigned long long)(s / 86400),
                  (unsigned long long)(s % 86400 / 3600));
  } else if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lluh%llum", (unsigned long long)(s / 3600),
                  (unsigned long long)(s % 3600 / 60));
  } else {
    std::snprintf(text, sizeof(text), "%llum%llus", (unsigned long long)(s / 60),
                  (unsigned long long)(s % 60));
  }
  return text;
}

int RunPing(const CommonOptions& options) {
  auto client = ConnectCli(options);
  if (!client.ok()) return Fail("ping", client.status());
  const auto start = std::chrono::steady_clock::now();
  Result<uint64_t> uptime_ms = (*client)->Ping().get();
  const double round_trip_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!uptime_ms.ok()) return Fail("ping", uptime_ms.status());
  const ServerInfo info = (*client)->server_info();
  const std::string boot_id = ToHex(info.boot_id.data(), info.boot_id.size());
  if (options.json) {
    nlohmann::ordered_json out = {{"socket", options.Endpoint()},
                                  {"server_version", info.server_version},
                                  {"protocol_version", info.protocol_version},
                                  {"boot_id", boot_id},
                                  {"backend", info.backend},
                                  {"chunk_tokens", info.chunk_tokens},
                                  {"uptime_ms", *uptime_ms},
                                  {"round_trip_ms", round_trip_ms}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  char rtt[32];
  std::snprintf(rtt, sizeof(rtt), "%.3f ms", round_trip_ms);
  std::cout << "kvstashd " << info.server_version << " at " << options.Endpoint() << ": up "
            << Uptime(*uptime_ms) << ", backend " << info.backend << ", boot " << boot_id
            << ", round trip " << rtt << "\n";
  return 0;
}

}  // namespace

Command AddPingCommand(CLI::App& app, SharedOptions options) {
  CLI::App* command = app.add_subcommand("ping", "Check that kvstashd answers");
  return {command, [options] { return RunPing(*options); }};
}

}  // namespace kvstash::cli
