// One client's heavy requests do not stall the others: while one client
// floods Describe over 10k registrations and large stores into a full pool
// with leases held, another client's pings are all answered. Prints the
// pinger's latency percentiles (the figure to compare; tests assert no
// timing). KVSTASH_FLOOD_BASELINE=1 leaves out flags an older kvstashd lacks,
// to measure it with the same test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "harness.h"

namespace kvstash::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRegistrations = 10000;

class Fairness : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    // 64 MiB: 512 chunks of 128 KiB.
    std::vector<std::string> args = {"--chunk-tokens", "64", "--l1-gb", "0.0625",
                                     "--l1-slice-mb",  "4"};
    if (std::getenv("KVSTASH_FLOOD_BASELINE") == nullptr) {
      args.insert(args.end(), {"--max-registrations-per-client", "20000",
                               "--max-registrations-per-process", "20000"});
    }
    return args;
  }
};

TEST_F(Fairness, AnotherClientsPingsAreAnsweredWhileOneFloodsHeavyRequests) {
  // The flooder: 10k small registrations, then a pool full of its chunks,
  // half of them leased.
  EngineShape small;
  small.num_blocks = 8;
  auto memory = EngineKv::Create(small);
  ASSERT_TRUE(memory.ok());
  std::unique_ptr<Client> flooder = Connect();
  ASSERT_NE(flooder, nullptr);
  {
    std::vector<std::future<Result<RegisteredKv>>> pending;
    for (int i = 0; i < kRegistrations; ++i) {
      pending.push_back(
          flooder->RegisterKV(memory->Registration("flood-" + std::to_string(i % 7))));
      if (pending.size() == 64 || i + 1 == kRegistrations) {
        for (auto& f : pending) ASSERT_TRUE(f.get().ok());
        pending.clear();
      }
    }
  }
  auto reg = flooder->RegisterKV(engine_->Registration("flood-store")).get();
  ASSERT_TRUE(reg.ok());
  std::vector<uint64_t> leases;
  for (uint32_t p = 0; p < 32; ++p) {  // 32 prompts x 16 chunks = the pool
    const auto tokens = PromptTokens(1000 + p, 1024, 0);
    auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), Blocks(0, 64).data(), 64);
    ASSERT_TRUE(chunks.ok());
    ASSERT_TRUE(flooder->Store(reg->id, *chunks).get().ok());
    if (p % 2 == 0) {
      auto hit =
          flooder->Lookup(reg->id, ChunkKeys(*reg, tokens.data(), tokens.size()), 600000).get();
      if (hit.ok() && hit->lease_id) leases.push_back(hit->lease_id);
    }
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> heavy{0};
  std::thread flood([&] {
    uint32_t prompt = 5000;
    while (!stop.load()) {
      auto describe = flooder->Describe();
      const auto tokens = PromptTokens(prompt++, 64 * 64, 0);
      auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), Blocks(0, 256).data(), 256);
      auto store = flooder->Store(reg->id, *chunks);
      auto stats = flooder->Stats();
      heavy += describe.get().ok() + store.get().ok() + stats.get().ok();
    }
  });
  std::vector<double> micros;
  std::vector<std::pair<double, double>> slowest;  // (latency us, when ms)
  const auto began = Clock::now();
  const auto until = Clock::now() + std::chrono::seconds(3);
  size_t failed = 0;
  while (Clock::now() < until) {
    const auto start = Clock::now();
    if (!client_->Ping().get().ok()) ++failed;
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (micros.back() > 5000) {
      slowest.emplace_back(micros.back(),
                           std::chrono::duration<double, std::milli>(start - began).count());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop = true;
  flood.join();
  EXPECT_EQ(failed, 0u);
  ASSERT_FALSE(micros.empty());
  std::sort(micros.begin(), micros.end());
  const auto at = [&](double q) {
    return micros[std::min(micros.size() - 1, size_t(q * micros.size()))];
  };
  std::printf(
      "pings while flooding (%llu heavy requests): n=%zu p50=%.0f us p99=%.0f us max=%.0f us\n",
      static_cast<unsigned long long>(heavy.load()), micros.size(), at(0.5), at(0.99),
      micros.back());
  for (auto [us, ms] : slowest) std::printf("  slow ping: %.0f us at %.0f ms\n", us, ms);
  EXPECT_GT(heavy.load(), 0u);
}

}  // namespace
}  // namespace kvstash::testing
