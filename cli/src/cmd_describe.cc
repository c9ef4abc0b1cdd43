// `kvstash describe`: the daemon's server, config, backend, pool and
// registrations with their groups, as tables or as its JSON.
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.h"
#include "json_table.h"
#include "operator_view.h"

namespace kvstash::cli {

namespace {

int RunDescribe(const CommonOptions& options) {
  auto client = ConnectCli(options);
  if (!client.ok()) return Fail("describe", client.status());
  Result<std::string> text = (*client)->Describe().get();
  if (!text.ok()) return Fail("describe", text.status());
  const auto document = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    // Still show what came: it may say why.
    std::cout << *text << "\n";
    return Fail("describe", Status::Malformed("kvstashd's description is not valid JSON"));
  }
  std::cout << (options.json ? document.dump(2) + "\n" : RenderSections(DescribeView(document)));
  return 0;
}

}  // namespace

Command AddDescribeCommand(CLI::App& app, SharedOptions options) {
  CLI::App* command = app.add_subcommand(
      "describe", "Show the daemon: server, config, backend, pool, registrations and groups");
  return {command, [options] { return RunDescribe(*options); }};
}

}  // namespace kvstash::cli
