// `kvstash clear`: drop stored chunks, all of them or one model's.
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.h"

namespace kvstash::cli {

namespace {

struct ClearOptions {
  std::string model;
  std::string tenant;
};

int RunClear(const CommonOptions& common, const ClearOptions& options) {
  if (options.model.empty() && !options.tenant.empty()) {
    return Fail("clear", Status::InvalidArgument("--tenant needs --model"));
  }
  auto client = ConnectCli(common);
  if (!client.ok()) return Fail("clear", client.status());
  Result<uint64_t> cleared = (*client)->Clear(options.model, options.tenant).get();
  if (!cleared.ok()) return Fail("clear", cleared.status());
  if (common.json) {
    std::cout << nlohmann::ordered_json{{"model", options.model},
                                        {"tenant", options.tenant},
                                        {"cleared_chunks", *cleared}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "cleared " << *cleared << " chunks"
              << (options.model.empty() ? std::string(" (all models)")
                                        : " of model " + options.model)
              << "\n";
  }
  return 0;
}

}  // namespace

Command AddClearCommand(CLI::App& app, SharedOptions common) {
  auto options = std::make_shared<ClearOptions>();
  CLI::App* command = app.add_subcommand(
      "clear", "Drop stored chunks (all, or one model's); leased chunks are kept");
  command->add_option("--model", options->model, "only this model's chunks");
  command->add_option("--tenant", options->tenant, "only this tenant salt's (with --model)");
  return {command, [common, options] { return RunClear(*common, *options); }};
}

}  // namespace kvstash::cli
