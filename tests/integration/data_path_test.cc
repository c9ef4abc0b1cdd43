// Store, lookup and retrieve across processes: bytes, prefixes, skip_tokens,
// partial chunks, per-chunk results, eviction and leases.
#include <gtest/gtest.h>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x5eed;

using DataPath = DaemonTest;

TEST_F(DataPath, RetrievesEveryByteIntoOtherBlocks) {
  const auto tokens = PromptTokens(1, 150, 0);  // 64 + 64 + 22 tokens
  const auto src = Blocks(0, 10), dst = Blocks(100, 10);
  auto stored = FillAndStore(kSeed, tokens, src);
  ASSERT_EQ(stored.size(), 3u);
  for (const auto& o : stored) EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  EXPECT_EQ(stored[2].num_tokens, 22u);

  engine_->Poison(Blocks(100, 12));
  auto retrieved = client_->Retrieve(reg_.id, Chunks(tokens, dst)).get();
  ASSERT_TRUE(retrieved.ok()) << retrieved.status().ToString();
  ASSERT_EQ(retrieved->size(), 3u);
  EXPECT_EQ((*retrieved)[0].num_tokens, 64u);
  EXPECT_EQ((*retrieved)[2].num_tokens, 22u);
  for (const auto& o : *retrieved) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, dst, 0, 150), 0u);
  // Nothing past the partial chunk's tokens, and no block not named, is written.
  EXPECT_EQ(engine_->CountNotPoison(dst, 150, 160), 0u);
  EXPECT_EQ(engine_->CountNotPoison(Blocks(110, 2), 0, 32), 0u);
}

TEST_F(DataPath, PartialChunkInAReusedSlotCarriesNoStaleBytes) {
  // A full chunk occupies a slot; after Clear a partial chunk reuses it.
  const auto full = PromptTokens(1, 64, 0);
  FillAndStore(kSeed, full, Blocks(0, 4));
  ASSERT_TRUE(client_->Clear().get().ok());
  const auto partial = PromptTokens(2, 20, 0);
  FillAndStore(kSeed, partial, Blocks(4, 2));
  engine_->Poison(Blocks(50, 4));
  auto got = client_->Retrieve(reg_.id, Chunks(partial, Blocks(50, 2))).get();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].num_tokens, 20u);
  EXPECT_EQ(engine_->CountMismatches(kSeed, partial, Blocks(50, 2), 0, 20), 0u);
  EXPECT_EQ(engine_->CountNotPoison(Blocks(50, 2), 20, 32), 0u);
}

TEST_F(DataPath, LookupReturnsTheLongestStoredPrefix) {
  const auto a = PromptTokens(1, 256, 100);
  auto chunks = Chunks(a, Blocks(0, 16));
  engine_->Fill(kSeed, a, Blocks(0, 16));
  auto stored = client_->Store(reg_.id, {chunks[0], chunks[1], chunks[2]}).get();
  ASSERT_TRUE(stored.ok());

  std::vector<ChunkKey> keys;
  for (const auto& c : chunks) keys.push_back(c.key);
  auto hit = client_->Lookup(reg_.id, keys).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->hit_chunks, 3u);
  EXPECT_EQ(hit->hit_tokens, 192u);
  EXPECT_NE(hit->lease_id, 0u);
  EXPECT_TRUE(client_->Release(hit->lease_id).get().ok());

  // Another prompt sharing 100 tokens shares only the first whole chunk.
  const auto b = PromptTokens(2, 256, 100);
  auto b_hit = client_->Lookup(reg_.id, ChunkKeys(reg_, b.data(), b.size())).get();
  ASSERT_TRUE(b_hit.ok());
  EXPECT_EQ(b_hit->hit_chunks, 1u);
  EXPECT_EQ(b_hit->hit_tokens, 64u);

  const auto c = PromptTokens(3, 128, 0);
  auto miss = client_->Lookup(reg_.id, ChunkKeys(reg_, c.data(), c.size())).get();
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->hit_chunks, 0u);
  EXPECT_EQ(miss->lease_id, 0u);
}

TEST_F(DataPath, LookupCountsAPartialLastChunk) {
  const auto tokens = PromptTokens(4, 150, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 10));
  auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, tokens.data(), tokens.size())).get();
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_chunks, 3u);
  EXPECT_EQ(hit->hit_tokens, 150u);
}

TEST_F(DataPath, SkipTokensLeavesTheFrontUntouched) {
  const auto tokens = PromptTokens(5, 192, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 12));
  const auto dst = Blocks(60, 12);
  engine_->Poison(dst);
  auto got = client_->Retrieve(reg_.id, Chunks(tokens, dst), /*skip_tokens=*/80).get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].num_tokens, 0u);   // wholly skipped
  EXPECT_EQ((*got)[1].num_tokens, 48u);  // 16 skipped
  EXPECT_EQ((*got)[2].num_tokens, 64u);
  EXPECT_EQ(engine_->CountNotPoison(dst, 0, 80), 0u);
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, dst, 80, 192), 0u);
}

TEST_F(DataPath, ReportsAResultForEveryChunk) {
  const auto tokens = PromptTokens(6, 128, 0);
  auto first = FillAndStore(kSeed, tokens, Blocks(0, 8));
  ASSERT_EQ(first.size(), 2u);
  auto again = client_->Store(reg_.id, Chunks(tokens, Blocks(0, 8))).get();
  ASSERT_TRUE(again.ok());
  for (const auto& o : *again) EXPECT_EQ(o.result, ChunkResult::kAlreadyPresent);

  const auto longer = PromptTokens(6, 192, 0);  // its third chunk was never stored
  auto got = client_->Retrieve(reg_.id, Chunks(longer, Blocks(40, 12))).get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].result, ChunkResult::kRetrieved);
  EXPECT_EQ((*got)[1].result, ChunkResult::kRetrieved);
  EXPECT_EQ((*got)[2].result, ChunkResult::kMissing);
  EXPECT_EQ(Counter("retrieve_chunks_missing"), 1u);
}

TEST_F(DataPath, ManyRequestsInFlightFromOneClient) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> futures;
  for (uint32_t p = 0; p < 24; ++p) {
    prompts.push_back(PromptTokens(100 + p, 64, 0));
    const auto blocks = Blocks(p * 4, 4);
    engine_->Fill(kSeed, prompts.back(), blocks);
    futures.push_back(client_->Store(reg_.id, Chunks(prompts.back(), blocks)));
  }
  for (auto& f : futures) {
    auto outcomes = f.get();
    ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    EXPECT_EQ((*outcomes)[0].result, ChunkResult::kStored);
  }
  engine_->Poison(Blocks(100, 96));
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> reads;
  for (uint32_t p = 0; p < 24; ++p) {
    reads.push_back(client_->Retrieve(reg_.id, Chunks(prompts[p], Blocks(100 + p * 4, 4))));
  }
  for (uint32_t p = 0; p < 24; ++p) {
    auto got = reads[p].get();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ((*got)[0].result, ChunkResult::kRetrieved);
    EXPECT_EQ(engine_->CountMismatches(kSeed, prompts[p], Blocks(100 + p * 4, 4), 0, 64), 0u) << p;
  }
}

// A pool of 0.001 GiB in 1 MiB slabs holds exactly eight 128 KiB chunks;
// leases may pin all of it here.
class SmallPool : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    return {"--chunk-tokens",     "64", "--l1-gb", "0.001", "--l1-slice-mb", "1",
            "--max-leased-share", "1"};
  }
};

TEST_F(SmallPool, EvictsLeastRecentlyUsedChunks) {
  for (uint32_t p = 0; p < 12; ++p) {
    auto o = FillAndStore(kSeed, PromptTokens(p, 64, 0), Blocks(0, 4));
    ASSERT_EQ(o.size(), 1u);
    ASSERT_EQ(o[0].result, ChunkResult::kStored) << p;
  }
  EXPECT_EQ(Counter("evicted_chunks"), 4u);
  for (uint32_t p = 0; p < 12; ++p) {
    const auto t = PromptTokens(p, 64, 0);
    auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, t.data(), t.size()), 1).get();
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(hit->hit_chunks, p < 4 ? 0u : 1u) << "prompt " << p;
  }
}

TEST_F(SmallPool, LeasedChunkSurvivesEvictionPressure) {
  const auto kept = PromptTokens(1, 64, 0);
  FillAndStore(kSeed, kept, Blocks(0, 4));
  auto lease = client_->Lookup(reg_.id, ChunkKeys(reg_, kept.data(), kept.size()), 60000).get();
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(lease->hit_chunks, 1u);
  for (uint32_t p = 10; p < 40; ++p) FillAndStore(kSeed, PromptTokens(p, 64, 0), Blocks(8, 4));
  EXPECT_GE(Counter("evicted_chunks"), 20u);
  engine_->Poison(Blocks(20, 4));
  auto got = client_->Retrieve(reg_.id, Chunks(kept, Blocks(20, 4)), 0, lease->lease_id).get();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].result, ChunkResult::kRetrieved);
  EXPECT_EQ(engine_->CountMismatches(kSeed, kept, Blocks(20, 4), 0, 64), 0u);
  // The retrieve ended the lease.
  EXPECT_EQ(client_->Release(lease->lease_id).get().status().code(), StatusCode::kNotFound);
}

TEST_F(SmallPool, SkipsForLackOfRoomWhenEveryChunkIsLeased) {
  std::vector<ChunkKey> keys;
  for (uint32_t p = 0; p < 8; ++p) {
    const auto t = PromptTokens(p, 64, 0);
    FillAndStore(kSeed, t, Blocks(0, 4));
    auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, t.data(), t.size()), 60000).get();
    ASSERT_TRUE(hit.ok() && hit->hit_chunks == 1u);
  }
  auto o = FillAndStore(kSeed, PromptTokens(99, 64, 0), Blocks(0, 4));
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].result, ChunkResult::kSkippedNoRoom);
  EXPECT_EQ(Counter("evicted_chunks"), 0u);
}

}  // namespace
}  // namespace kvstash::testing
