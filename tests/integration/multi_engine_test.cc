// Several engine processes share one daemon at once: each stores its own
// prompts (with a prefix common to all), and each verifies, byte for byte,
// the prompts the others stored.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "daemon_process.h"

namespace kvstash::testing {
namespace {

TEST(MultiEngine, EnginesStoreAndVerifyEachOthersPromptsConcurrently) {
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0625", "--l1-slice-mb", "8"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const std::string socket = (*daemon)->socket();
  auto engine = [&](const std::string& role, int first) {
    return std::async(std::launch::async, [=] {
      return RunBinary("kvstash_test_engine",
                       {"--socket", socket, "--role", role, "--first-prompt", std::to_string(first),
                        "--prompts", "12", "--prompt-tokens", "200", "--shared-tokens", "128"});
    });
  };
  auto a = engine("store", 0), b = engine("store", 100), c = engine("store", 200);
  for (auto* f : {&a, &b, &c}) {
    ProcessResult r = f->get();
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  // Readers cross over: each verifies prompts another engine stored.
  auto ra = engine("verify", 100), rb = engine("verify", 200), rc = engine("verify", 0);
  for (auto* f : {&ra, &rb, &rc}) {
    ProcessResult r = f->get();
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("verified 12 prompts"), std::string::npos) << r.output;
  }
  EXPECT_EQ((*daemon)->Stop(), 0);
}

TEST(MultiEngine, AnEngineKilledMidWorkloadDisturbsNoOne) {
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0625", "--l1-slice-mb", "8"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const std::string socket = (*daemon)->socket();
  // A victim that keeps storing until it is killed with requests in flight.
  const pid_t victim = StartStoringEngine(socket);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  // Everyone else is served as before, byte for byte.
  auto args = [&](const char* role) {
    return std::vector<std::string>{"--socket",  socket, "--role",          role,
                                    "--prompts", "6",    "--prompt-tokens", "200"};
  };
  ProcessResult stored = RunBinary("kvstash_test_engine", args("store"));
  EXPECT_EQ(stored.exit_code, 0) << stored.output;
  ProcessResult verified = RunBinary("kvstash_test_engine", args("verify"));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_TRUE((*daemon)->running());
  EXPECT_EQ((*daemon)->Stop(), 0);
}

}  // namespace
}  // namespace kvstash::testing
