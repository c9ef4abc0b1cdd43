// The `kvstash` CLI against a real kvstashd: bench passes and verifies, the
// other subcommands print tables or JSON, failures exit non-zero.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon_process.h"

namespace kvstash::testing {
namespace {

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0625",
                                        "--l1-slice-mb", "4"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
  }
  ProcessResult Run(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--socket", daemon_->socket()});
    return RunBinary("kvstash", args);
  }
  std::unique_ptr<DaemonProcess> daemon_;
};

const std::vector<std::string> kSmallBench = {
    "--layers", "4", "--kv-heads", "2", "--head-dim", "64", "--block-tokens", "16",
    "--prompts", "4", "--prompt-tokens", "300", "--shared-prefix-tokens", "128"};

TEST_F(Cli, BenchStoresRetrievesAndVerifies) {
  std::vector<std::string> args = {"bench"};
  args.insert(args.end(), kSmallBench.begin(), kSmallBench.end());
  const ProcessResult result = Run(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("\nPASS\n"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("lookup hit rate"), std::string::npos) << result.output;
}

TEST_F(Cli, BenchJsonCountsSharedPrefixChunksOnce) {
  std::vector<std::string> args = {"bench", "--json", "--rounds", "2"};
  args.insert(args.end(), kSmallBench.begin(), kSmallBench.end());
  const ProcessResult result = Run(args);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  // 300 tokens = 5 chunks of 64 (the last 44); the first 2 are shared.
  EXPECT_EQ(json["store"]["chunks_stored"], 2 + 4 * 3);
  EXPECT_EQ(json["store"]["chunks_already_present"], 2 * 4 * 5 - (2 + 4 * 3));
  EXPECT_EQ(json["lookup"]["hit_chunks"], 2 * 4 * 5);
  EXPECT_EQ(json["lookup"]["hit_tokens"], 2 * 4 * 300);
  EXPECT_EQ(json["verify"]["tokens"], 2 * 4 * 300);
  EXPECT_EQ(json["verify"]["mismatched_rows"], 0);
  EXPECT_EQ(json["pass"], true);
}

TEST_F(Cli, DescribeStatsPingAndClear) {
  ProcessResult ping = Run({"ping"});
  EXPECT_EQ(ping.exit_code, 0) << ping.output;
  EXPECT_NE(ping.output.find("backend host"), std::string::npos) << ping.output;

  ProcessResult describe = Run({"describe"});
  EXPECT_EQ(describe.exit_code, 0) << describe.output;
  EXPECT_NE(describe.output.find("# "), std::string::npos) << describe.output;
  ProcessResult describe_json = Run({"describe", "--json"});
  ASSERT_EQ(describe_json.exit_code, 0) << describe_json.output;
  EXPECT_TRUE(nlohmann::json::accept(describe_json.output)) << describe_json.output;

  ProcessResult stats = Run({"stats"});
  EXPECT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_NE(stats.output.find("counter"), std::string::npos) << stats.output;
  ProcessResult stats_json = Run({"stats", "--json"});
  ASSERT_EQ(stats_json.exit_code, 0) << stats_json.output;
  EXPECT_TRUE(nlohmann::json::accept(stats_json.output)) << stats_json.output;

  ProcessResult clear = Run({"clear", "--model", "nothing-here"});
  EXPECT_EQ(clear.exit_code, 0) << clear.output;
  EXPECT_NE(clear.output.find("cleared 0 chunks of model nothing-here"), std::string::npos)
      << clear.output;
}

TEST_F(Cli, FailuresExitNonZeroWithTheError) {
  const ProcessResult missing =
      RunBinary("kvstash", {"ping", "--socket", "ipc:///nonexistent/kvstash.sock"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("Unavailable: no kvstashd socket at /nonexistent/kvstash.sock"),
            std::string::npos)
      << missing.output;
  const ProcessResult bad = Run({"bench", "--prompt-tokens", "10", "--shared-prefix-tokens", "20"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("exceeds --prompt-tokens"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kvstash::testing
