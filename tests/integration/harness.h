// A fixture with a real kvstashd, a connected client and one registered
// simulated engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "engine_kv.h"
#include "kvstash/client.h"

namespace kvstash::testing {

class DaemonTest : public ::testing::Test {
 protected:
  // Chunks of 64 tokens: 4 layers x 2 x 64 x 2 heads x 128 B = 128 KiB.
  virtual std::vector<std::string> DaemonArgs() const {
    return {"--chunk-tokens", "64", "--l1-gb", "0.03125", "--l1-slice-mb", "4"};
  }
  void SetUp() override {
    auto daemon = DaemonProcess::Start(DaemonArgs());
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto engine = EngineKv::Create(EngineShape{});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_.emplace(std::move(*engine));
    auto reg = client_->RegisterKV(engine_->Registration("test-model")).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    reg_ = *reg;
  }
  std::unique_ptr<Client> Connect() {
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = std::chrono::milliseconds(10000);
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::vector<ChunkBlocks> Chunks(const std::vector<int32_t>& tokens,
                                  const std::vector<uint32_t>& blocks) {
    auto chunks = PromptChunks(reg_, tokens.data(), tokens.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }
  // Fills `blocks` with the prompt's pattern and stores it; returns outcomes.
  std::vector<ChunkOutcome> FillAndStore(uint64_t seed, const std::vector<int32_t>& tokens,
                                         const std::vector<uint32_t>& blocks) {
    engine_->Fill(seed, tokens, blocks);
    auto outcomes = client_->Store(reg_.id, Chunks(tokens, blocks)).get();
    EXPECT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    return outcomes.ok() ? *outcomes : std::vector<ChunkOutcome>{};
  }
  uint64_t Counter(const std::string& name) {
    auto stats = client_->Stats().get();
    if (!stats.ok()) return ~0ull;
    for (const auto& [n, v] : stats->counters) {
      if (n == name) return v;
    }
    return ~0ull;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  std::optional<EngineKv> engine_;
  RegisteredKv reg_;
};

// The same with the shared-memory channel off on the daemon's side: every
// client talks over the socket.
class DaemonWithoutChannelTest : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--shm-channel", "off"});
    return args;
  }
};

}  // namespace kvstash::testing
