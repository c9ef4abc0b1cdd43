// Registration lifecycle, describe and stats, restarts and clean shutdown.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x11fe;

using Lifecycle = DaemonTest;

TEST_F(Lifecycle, DescribeShowsRegistrationsGroupsAndCapacity) {
  auto text = client_->Describe().get();
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto doc = nlohmann::json::parse(*text);
  EXPECT_EQ(doc["server"]["backend"], "host");
  EXPECT_EQ(doc["config"]["chunk-tokens"], 64) << doc["config"].dump();
  const auto& pool = doc["tiers"][0]["pool"];
  EXPECT_EQ(pool["capacity_bytes"].get<uint64_t>(), 32ull << 20);
  ASSERT_EQ(doc["registrations"].size(), 1u);
  const auto& reg = doc["registrations"][0];
  EXPECT_EQ(reg["id"].get<uint64_t>(), reg_.id);
  EXPECT_EQ(reg["model"], "test-model");
  EXPECT_EQ(reg["chunk_bytes"].get<uint64_t>(), 128u * 1024);
  ASSERT_EQ(reg["groups"].size(), 1u);
  EXPECT_EQ(reg["groups"][0]["layers"], "0-3");
  EXPECT_EQ(reg["groups"][0]["dtype"], "BF16");
}

TEST_F(Lifecycle, StatsCountersFollowTheWorkload) {
  const auto tokens = PromptTokens(1, 128, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 8));
  auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, tokens.data(), tokens.size())).get();
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(
      client_->Retrieve(reg_.id, Chunks(tokens, Blocks(20, 8)), 0, hit->lease_id).get().ok());
  EXPECT_EQ(Counter("store_chunks_stored"), 2u);
  EXPECT_EQ(Counter("store_bytes"), 2u * 128 * 1024);
  EXPECT_EQ(Counter("lookup_hit_chunks"), 2u);
  EXPECT_EQ(Counter("retrieve_tokens"), 128u);
  EXPECT_EQ(Counter("leases_released"), 1u);
  auto stats = client_->Stats().get();
  ASSERT_TRUE(stats.ok());
  const auto doc = nlohmann::json::parse(stats->json);
  EXPECT_EQ(doc["gauges"]["l1_chunks"].get<uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(doc["derived"]["lookup_hit_rate"].get<double>(), 1.0);
  EXPECT_EQ(doc["latency"]["store"]["count"].get<uint64_t>(), 1u);
}

TEST_F(Lifecycle, TwoEnginesOfOneModelShareChunksAndOtherModelsDoNot) {
  const auto tokens = PromptTokens(2, 128, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 8));
  auto same = client_->RegisterKV(engine_->Registration("test-model")).get();
  auto other = client_->RegisterKV(engine_->Registration("other-model")).get();
  auto tenant = client_->RegisterKV(engine_->Registration("test-model", "tenant-b")).get();
  ASSERT_TRUE(same.ok() && other.ok() && tenant.ok());
  EXPECT_NE(same->id, reg_.id);
  auto shared = client_->Lookup(same->id, ChunkKeys(*same, tokens.data(), tokens.size())).get();
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->hit_chunks, 2u);
  ASSERT_TRUE(client_->Release(shared->lease_id).get().ok());  // leased chunks are never cleared
  // Even with the very same key bytes, another scope sees nothing.
  const auto keys = ChunkKeys(reg_, tokens.data(), tokens.size());
  EXPECT_EQ(client_->Lookup(other->id, keys).get()->hit_chunks, 0u);
  EXPECT_EQ(client_->Lookup(tenant->id, keys).get()->hit_chunks, 0u);
  // Clear of one model leaves the others.
  auto cleared = client_->Clear("other-model").get();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 0u);
  EXPECT_EQ(*client_->Clear("test-model").get(), 2u);
}

TEST_F(Lifecycle, UnregisterWaitsForQueuedWorkThenForgetsTheId) {
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> stores;
  for (uint32_t p = 0; p < 16; ++p) {
    const auto t = PromptTokens(50 + p, 128, 0);
    engine_->Fill(kSeed, t, Blocks(p * 8, 8));
    stores.push_back(client_->Store(reg_.id, Chunks(t, Blocks(p * 8, 8))));
  }
  auto unregistered = client_->UnregisterKV(reg_.id);
  for (auto& s : stores) {
    auto outcomes = s.get();
    // Each store either ran before the unregister or was refused cleanly.
    if (outcomes.ok()) {
      for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kStored);
    } else {
      EXPECT_EQ(outcomes.status().code(), StatusCode::kNotFound);
    }
  }
  EXPECT_TRUE(unregistered.get().ok());
  EXPECT_EQ(
      client_->Store(reg_.id, Chunks(PromptTokens(1, 64, 0), Blocks(0, 4))).get().status().code(),
      StatusCode::kNotFound);
  // The chunks belong to the model, not the engine: a new registration sees them.
  auto again = client_->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(again.ok());
  const auto t = PromptTokens(50, 128, 0);
  EXPECT_EQ(client_->Lookup(again->id, ChunkKeys(*again, t.data(), t.size())).get()->hit_chunks,
            2u);
}

TEST_F(Lifecycle, ShutdownAnswersRequestsInFlightAndRemovesTheSocket) {
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> stores;
  for (uint32_t p = 0; p < 32; ++p) {
    const auto t = PromptTokens(p, 256, 0);
    stores.push_back(client_->Store(reg_.id, Chunks(t, Blocks(0, 16))));
  }
  EXPECT_EQ(daemon_->Stop(), 0);
  for (auto& s : stores) {
    auto outcomes = s.get();
    // Stored, or refused as shutting down / connection gone: never a silent timeout.
    if (!outcomes.ok()) {
      EXPECT_NE(outcomes.status().code(), StatusCode::kTimedOut) << outcomes.status().ToString();
    }
  }
  EXPECT_NE(access(daemon_->socket_path().c_str(), F_OK), 0) << "socket file left behind";
  daemon_.reset();
}

TEST_F(Lifecycle, ASecondDaemonOnALiveSocketRefusesToStart) {
  auto second = RunBinary("kvstashd",
                          {"--socket", daemon_->socket(), "--backend", "host", "--l1-gb", "0.01"});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.output.find("another kvstashd"), std::string::npos) << second.output;
  EXPECT_TRUE(client_->Ping().get().ok());
}

}  // namespace
}  // namespace kvstash::testing
