// Engines that die without UnregisterKV: kvstashd drops their registrations
// once their connection has been silent for --peer-timeout-ms, and lets go of
// their memory; live engines, idle or not, keep theirs (libkvstash pings).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <variant>

#include <nlohmann/json.hpp>

#include "eventually.h"
#include "harness.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;

class DeadEngine : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--peer-timeout-ms", "300"});
    return args;
  }
  size_t Registrations() {
    auto text = client_->Describe().get();
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? nlohmann::json::parse(*text)["registrations"].size() : 0;
  }
  // Whether the daemon still maps the shared memory region `name`.
  bool DaemonMaps(const std::string& name) {
    std::ifstream maps("/proc/" + std::to_string(daemon_->pid()) + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.find(name.substr(1)) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(DeadEngine, AnIdleEngineKeepsItsRegistration) {
  // Five timeouts without a request of its own: the client's pings carry it.
  std::this_thread::sleep_for(milliseconds(1500));
  const auto tokens = PromptTokens(3, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(7, tokens, Blocks(0, 8))) {
    EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  }
  EXPECT_EQ(Counter("registrations_dropped"), 0u);
  EXPECT_EQ(Registrations(), 1u);
}

TEST_F(DeadEngine, AnEngineGoneSilentLosesItsRegistrationAndItsMemoryIsReleased) {
  auto other = EngineKv::Create(EngineShape{});
  ASSERT_TRUE(other.ok());
  const RegisterOptions options = other->Registration("gone-model");
  const std::string shm = std::get<HostShm>(options.allocations[0]).name;
  uint64_t gone_id = 0;
  {
    std::unique_ptr<Client> engine = Connect();
    ASSERT_NE(engine, nullptr);
    auto reg = engine->RegisterKV(options).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    gone_id = reg->id;
    EXPECT_EQ(Registrations(), 2u);
    EXPECT_TRUE(DaemonMaps(shm)) << shm;
  }  // destroyed without UnregisterKV: from here on it is silent, as a dead engine is
  EXPECT_TRUE(Eventually([&] { return Registrations() == 1; }));
  EXPECT_EQ(Counter("registrations_dropped"), 1u);
  EXPECT_FALSE(DaemonMaps(shm)) << "the dead engine's shared memory is still mapped";
  // Its id is gone; the live engine is served as before.
  auto missing = client_->Lookup(gone_id, {ChunkKey{}}).get();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const auto tokens = PromptTokens(4, 64, 0);
  for (const ChunkOutcome& o : FillAndStore(8, tokens, Blocks(0, 4))) {
    EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  }
}

TEST_F(DeadEngine, AKilledEngineProcessLosesItsRegistration) {
  const pid_t victim = StartStoringEngine(daemon_->socket());
  ASSERT_TRUE(Eventually([&] { return Registrations() == 2; }));
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  EXPECT_TRUE(Eventually([&] { return Registrations() == 1; }));
  EXPECT_EQ(Counter("registrations_dropped"), 1u);
  EXPECT_TRUE(daemon_->running());
  EXPECT_TRUE(client_->Ping().get().ok());
}

// The daemon's own stall is nobody's silence: live engines that kept pinging
// while kvstashd was stopped keep their registrations.
TEST_F(DeadEngine, LiveEnginesSurviveADaemonStall) {
  std::vector<std::unique_ptr<Client>> engines;
  std::vector<EngineKv> memories;
  for (int i = 0; i < 4; ++i) {
    engines.push_back(Connect());
    ASSERT_NE(engines.back(), nullptr);
    auto memory = EngineKv::Create(EngineShape{});
    ASSERT_TRUE(memory.ok());
    memories.push_back(std::move(*memory));
    ASSERT_TRUE(engines.back()->RegisterKV(memories.back().Registration("live")).get().ok());
  }
  ASSERT_EQ(Registrations(), 5u);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
    std::this_thread::sleep_for(milliseconds(1500));  // five timeouts
    ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_EQ(Counter("registrations_dropped"), 0u);
  EXPECT_EQ(Registrations(), 5u);
}

}  // namespace
}  // namespace kvstash::testing
