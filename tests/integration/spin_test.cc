// Adaptive spinning (docs/deployment.md "Spinning"), on by default: kvstashd
// and libkvstash poll on a core only for a while after their last work, so
// an idle daemon and an idle client use no CPU; and with every thread
// spinning, concurrent requests of several clients each get their own reply.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x5917;

// utime + stime of a process, in clock ticks (proc(5)).
uint64_t CpuTicks(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // The command name may hold spaces: count fields after its ')'.
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

// CPU a process uses over one idle second, as a share of one core.
double IdleShare(const std::string& pid) {
  const uint64_t before = CpuTicks(pid);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return double(CpuTicks(pid) - before) / double(sysconf(_SC_CLK_TCK));
}

using Spinning = DaemonTest;

TEST_F(Spinning, ADaemonAndAClientThatWentIdleUseNoCpu) {
  const auto tokens = PromptTokens(1, 128, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 8));
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client_->Ping().get().ok());
    ASSERT_TRUE(client_->Retrieve(reg_.id, Chunks(tokens, Blocks(8, 8))).get().ok());
  }
  // Past every spin window (50 us; 1 ms with copies in flight), both sleep.
  // A thread that kept spinning would show a whole core here.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LT(IdleShare(std::to_string(daemon_->pid())), 0.05);
  EXPECT_LT(IdleShare("self"), 0.05);
}

TEST_F(Spinning, ConcurrentRequestsOfSeveralClientsEachGetTheirOwnReply) {
  // Prompt t has t + 1 chunks stored: a lookup of it must hit exactly that
  // many, whoever else is asking at the same time.
  constexpr int kThreads = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (int t = 0; t < kThreads; ++t) {
    prompts.push_back(PromptTokens(100 + t, 64 * (t + 1), 0));
    FillAndStore(kSeed + t, prompts[t], Blocks(16 * t, 4 * (t + 1)));
  }
  std::unique_ptr<Client> second = Connect();
  ASSERT_NE(second, nullptr);
  auto second_reg = second->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(second_reg.ok()) << second_reg.status().ToString();
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client& client = t % 2 == 0 ? *client_ : *second;
      const RegisteredKv& reg = t % 2 == 0 ? reg_ : *second_reg;
      const auto keys = ChunkKeys(reg, prompts[t].data(), prompts[t].size());
      for (int i = 0; i < 150; ++i) {
        // Several in flight at once, answered in any order.
        auto lookup = client.Lookup(reg.id, keys);
        auto ping = client.Ping();
        auto found = lookup.get();
        if (!found.ok() || found->hit_chunks != uint32_t(t + 1)) {
          ++wrong;
          continue;
        }
        if (!ping.get().ok() || !client.Release(found->lease_id).get().ok()) ++wrong;
        ++done;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(done.load(), kThreads * 150);
  // And the bytes of a retrieve that ran among them are the stored ones.
  engine_->Poison(Blocks(100, 8));
  const auto tokens = prompts[1];
  auto got = client_->Retrieve(reg_.id, Chunks(tokens, Blocks(100, 8))).get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(engine_->CountMismatches(kSeed + 1, tokens, Blocks(100, 8), 0, tokens.size()), 0u);
}

}  // namespace
}  // namespace kvstash::testing
