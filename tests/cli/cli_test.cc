// The `kvstash` CLI against a real kvstashd: bench passes and verifies, the
// other subcommands print tables or JSON, failures exit non-zero.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "daemon_process.h"
#include "small_bench.h"

namespace kvstash::testing {
namespace {

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon =
        DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0625", "--l1-slice-mb", "4"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
  }
  ProcessResult Run(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--socket", daemon_->socket()});
    return RunBinary("kvstash", args);
  }
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(Cli, BenchStoresRetrievesAndVerifies) {
  std::vector<std::string> args = {"bench"};
  args.insert(args.end(), kSmallBenchShape.begin(), kSmallBenchShape.end());
  const ProcessResult result = Run(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("\nPASS\n"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("lookup hit rate"), std::string::npos) << result.output;
}

TEST_F(Cli, BenchJsonCountsSharedPrefixChunksOnce) {
  std::vector<std::string> args = {"bench", "--json", "--rounds", "2"};
  args.insert(args.end(), kSmallBenchShape.begin(), kSmallBenchShape.end());
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

TEST_F(Cli, GlobalOptionsGoBeforeOrAfterTheSubcommand) {
  const ProcessResult before = RunBinary("kvstash", {"--socket", daemon_->socket(), "ping"});
  EXPECT_EQ(before.exit_code, 0) << before.output;
  const ProcessResult after = RunBinary("kvstash", {"ping", "--socket", daemon_->socket()});
  EXPECT_EQ(after.exit_code, 0) << after.output;
  const ProcessResult json_first =
      RunBinary("kvstash", {"--json", "--socket", daemon_->socket(), "stats"});
  ASSERT_EQ(json_first.exit_code, 0) << json_first.output;
  EXPECT_TRUE(nlohmann::json::accept(json_first.output)) << json_first.output;
}

TEST_F(Cli, APlainPathIsAnIpcSocket) {
  const ProcessResult plain = RunBinary("kvstash", {"ping", "--socket", daemon_->socket_path()});
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("at ipc://" + daemon_->socket_path()), std::string::npos)
      << plain.output;
}

TEST_F(Cli, KvstashSocketIsTheDefault) {
  ::setenv("KVSTASH_SOCKET", daemon_->socket_path().c_str(), 1);
  const ProcessResult from_env = RunBinary("kvstash", {"ping"});
  // --socket wins over the environment.
  const ProcessResult flag_wins =
      RunBinary("kvstash", {"ping", "--socket", "/nonexistent/kvstash.sock"});
  ::unsetenv("KVSTASH_SOCKET");
  EXPECT_EQ(from_env.exit_code, 0) << from_env.output;
  EXPECT_NE(flag_wins.exit_code, 0) << flag_wins.output;
  EXPECT_NE(flag_wins.output.find("no kvstashd socket at /nonexistent/kvstash.sock"),
            std::string::npos)
      << flag_wins.output;
}

TEST_F(Cli, MistypedSubcommandGetsASuggestion) {
  const ProcessResult typo = RunBinary("kvstash", {"--socket", daemon_->socket(), "stast"});
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.output.find("unknown command 'stast'; did you mean 'stats'?"), std::string::npos)
      << typo.output;
}

// CLI11 prints "  --flag TYPE:RANGE=DEFAULT  description", the description
// moving to the next, deeper indented line when the spec is long. True when
// the option on lines[i] has a description.
bool HasDescription(const std::vector<std::string>& lines, size_t i) {
  std::istringstream words(lines[i]);
  std::string word;
  words >> word;  // the flag
  while (words >> word) {
    const char c = word[0];
    const bool spec = std::isupper(static_cast<unsigned char>(c)) || std::isdigit(c) || c == '{' ||
                      c == '[' || c == '-' || c == '=' || word == "in" || word == "...";
    if (!spec) return true;
  }
  return i + 1 < lines.size() && lines[i + 1].rfind(std::string(20, ' '), 0) == 0 &&
         lines[i + 1].find_first_not_of(' ') != std::string::npos;
}

TEST_F(Cli, BenchHelpDescribesEveryFlag) {
  const ProcessResult help = RunBinary("kvstash", {"bench", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  std::vector<std::string> lines;
  std::istringstream stream(help.output);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  int flags = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("  -", 0) != 0) continue;
    ++flags;
    EXPECT_TRUE(HasDescription(lines, i)) << "no help text: " << lines[i];
  }
  EXPECT_GE(flags, 15) << help.output;
}

TEST(CliEvictions, BenchSaysWhyTheHitRateFellShort) {
  // A 16 MiB pool; 40 prompts of 16 chunks of 128 KiB (2 shared) need 70 MiB.
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.015625", "--l1-slice-mb", "4"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  std::vector<std::string> args = {"bench",
                                   "--socket",
                                   (*daemon)->socket(),
                                   "--layers",
                                   "4",
                                   "--kv-heads",
                                   "2",
                                   "--head-dim",
                                   "64",
                                   "--prompts",
                                   "40",
                                   "--prompt-tokens",
                                   "1024",
                                   "--shared-prefix-tokens",
                                   "128"};
  const ProcessResult text = RunBinary("kvstash", args);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("why not 100%"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("%: the pool was full and "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(" chunks were evicted"), std::string::npos) << text.output;

  args.push_back("--json");
  args.push_back("--seed");
  args.push_back("2");
  const ProcessResult json_run = RunBinary("kvstash", args);
  ASSERT_EQ(json_run.exit_code, 0) << json_run.output;
  const auto json = nlohmann::json::parse(json_run.output);
  EXPECT_GT(json["daemon"]["evicted_chunks"].get<uint64_t>(), 0u) << json_run.output;
  EXPECT_LT(json["lookup"]["hit_chunks"].get<uint64_t>(), json["lookup"]["chunks"].get<uint64_t>());
  EXPECT_NE(json["lookup"]["shortfall_reason"].get<std::string>().find("evicted"),
            std::string::npos);
}

TEST_F(Cli, FullHitRateGivesNoShortfallReason) {
  std::vector<std::string> args = {"bench", "--json"};
  args.insert(args.end(), kSmallBenchShape.begin(), kSmallBenchShape.end());
  const ProcessResult result = Run(args);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["lookup"]["shortfall_reason"], "");
  EXPECT_EQ(json["daemon"]["counters_read"], true);
  EXPECT_EQ(json["daemon"]["evicted_chunks"], 0);
}

}  // namespace
}  // namespace kvstash::testing
