// `kvstash bench --phase store|retrieve --seed N`: what one run stores,
// another run (on the same daemon here; on another daemon sharing its L3,
// or after a restart with L2, in tests/integration) retrieves and verifies
// byte for byte; a retrieve phase that finds less than every chunk fails.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon_process.h"
#include "small_bench.h"

namespace kvstash::testing {
namespace {

class BenchPhase : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon =
        DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0625", "--l1-slice-mb", "4"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
  }
  ProcessResult Bench(const std::string& phase, const std::string& seed, bool json = true) {
    std::vector<std::string> args = {"bench",  "--socket", daemon_->socket(), "--phase", phase,
                                     "--seed", seed};
    args.insert(args.end(), kSmallBenchShape.begin(), kSmallBenchShape.end());
    if (json) args.push_back("--json");
    return RunBinary("kvstash", args);
  }
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(BenchPhase, StoreThenRetrieveVerifiesEveryByteOfTheSeedsPrompts) {
  const ProcessResult store = Bench("store", "7");
  ASSERT_EQ(store.exit_code, 0) << store.output;
  const auto stored = nlohmann::json::parse(store.output);
  // 4 prompts of 300 tokens = 5 chunks of 64 each, the first 2 shared.
  EXPECT_EQ(stored["store"]["chunks_stored"], 2 + 4 * 3);
  EXPECT_EQ(stored["lookup"]["chunks"], 0);  // no retrieve in a store phase
  EXPECT_EQ(stored["config"]["phase"], "store");

  const ProcessResult retrieve = Bench("retrieve", "7");
  ASSERT_EQ(retrieve.exit_code, 0) << retrieve.output;
  const auto got = nlohmann::json::parse(retrieve.output);
  EXPECT_EQ(got["store"]["chunks_stored"], 0);  // nothing stored in a retrieve phase
  EXPECT_EQ(got["lookup"]["hit_chunks"], 4 * 5);
  EXPECT_EQ(got["verify"]["tokens"], 4 * 300);
  EXPECT_EQ(got["verify"]["mismatched_rows"], 0);
  EXPECT_EQ(got["lookup"]["every_chunk_expected"], true);
  EXPECT_EQ(got["pass"], true);
}

TEST_F(BenchPhase, RetrieveOfAnotherSeedFindsNothingAndFails) {
  ASSERT_EQ(Bench("store", "7").exit_code, 0);
  const ProcessResult retrieve = Bench("retrieve", "8", /*json=*/false);
  EXPECT_NE(retrieve.exit_code, 0) << retrieve.output;
  EXPECT_NE(retrieve.output.find("\nFAIL\n"), std::string::npos) << retrieve.output;
  EXPECT_NE(retrieve.output.find("--phase retrieve expects every chunk"), std::string::npos)
      << retrieve.output;
  EXPECT_NE(retrieve.output.find("20 were not found"), std::string::npos) << retrieve.output;
}

TEST_F(BenchPhase, BothIsTheDefaultAndAnUnknownPhaseIsRefused) {
  const ProcessResult both = Bench("both", "3");
  ASSERT_EQ(both.exit_code, 0) << both.output;
  const auto json = nlohmann::json::parse(both.output);
  EXPECT_EQ(json["store"]["chunks_stored"], 2 + 4 * 3);
  EXPECT_EQ(json["lookup"]["hit_chunks"], 4 * 5);

  const ProcessResult bad = Bench("fetch", "3", false);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--phase"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("fetch"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kvstash::testing
