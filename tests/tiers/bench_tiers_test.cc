// `kvstash bench tiers`: L2 and L3 measured against their raw limits in one
// run, on a private directory and a real redis-server; every byte the tiers
// return is checked by the bench itself (a wrong byte fails the command).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon_process.h"
#include "redis_process.h"
#include "tier_test_data.h"

namespace kvstash::tiers {
namespace {

using kvstash::testing::ProcessResult;
using kvstash::testing::RunBinary;
using testing::RedisProcess;
using testing::TempDir;

TEST(BenchTiers, MeasuresL2AndL3AgainstTheirRawLimitsInOneRun) {
  if (!testing::RedisAvailable())
    GTEST_SKIP() << "redis-server not found: scripts/setup.sh installs it";
  auto redis = RedisProcess::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  const ProcessResult run = RunBinary("kvstash", {"bench",
                                                  "tiers",
                                                  "--json",
                                                  "--l2-path",
                                                  dir.path(),
                                                  "--l3-redis",
                                                  (*redis)->endpoint(),
                                                  "--chunk-mb",
                                                  "1",
                                                  "--chunks",
                                                  "8",
                                                  "--depth",
                                                  "4",
                                                  "--pool-threads",
                                                  "2",
                                                  "--value-mb",
                                                  "1",
                                                  "--values",
                                                  "4",
                                                  "--connections",
                                                  "2",
                                                  "--runs",
                                                  "2"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  ASSERT_EQ(json["l2"]["runs"].size(), 2u);
  for (const auto& r : json["l2"]["runs"]) {
    EXPECT_GT(r["raw_write_gbps"].get<double>(), 0);
    EXPECT_GT(r["raw_read_gbps"].get<double>(), 0);
    EXPECT_GT(r["write_gbps"].get<double>(), 0);
    EXPECT_GT(r["read_gbps"].get<double>(), 0);
    EXPECT_GT(r["pool_write_gbps"].get<double>(), 0);
  }
  EXPECT_GT(json["l2"]["write_ratio"].get<double>(), 0);
  EXPECT_GT(json["l2"]["read_ratio"].get<double>(), 0);
  ASSERT_EQ(json["l3"]["runs"].size(), 2u);
  EXPECT_GT(json["l3"]["put_ratio"].get<double>(), 0);
  EXPECT_GT(json["l3"]["get_ratio"].get<double>(), 0);
  // The scratch folder and the bench's Redis keys are gone afterwards.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_EQ((*redis)->Cli({"DBSIZE"}), "0\n");
}

TEST(BenchTiers, NamesTheMissingTierOrTheBadEndpoint) {
  const ProcessResult none = RunBinary("kvstash", {"bench", "tiers"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("--l2-path"), std::string::npos) << none.output;
  const ProcessResult bad = RunBinary("kvstash", {"bench", "tiers", "--l3-redis", "localhost"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("'localhost' is not HOST:PORT"), std::string::npos) << bad.output;
  TempDir dir;
  const ProcessResult missing =
      RunBinary("kvstash", {"bench", "tiers", "--l2-path", dir.path() + "/absent"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find(dir.path() + "/absent"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace kvstash::tiers
