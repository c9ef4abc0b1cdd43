// Chunk store write-behind: chunks leave L1 only once the tiers below have
// them (on-eviction), or are sent below as soon as they are stored
// (write-through); a chunk being written is pinned, and a lease can hold
// lower-tier chunks too.
#include <gtest/gtest.h>

#include <cstring>

#include "chunk_store.h"

namespace kvstash::server {
namespace {

constexpr uint64_t kChunk = 64 * 1024;

ChunkKey Key(uint8_t n) {
  ChunkKey k{};
  k[0] = n;
  k[31] = 0x5A;
  return k;
}

class WriteBehindTest : public ::testing::Test {
 protected:
  // Room for exactly four chunks; flushes are collected, not written.
  void Make(ChunkStore::WriteBehind mode) {
    auto pool = L1Pool::Create(4 * kChunk, 4 * kChunk, 1, {});
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    pool_->WaitUntilPrepared();
    store_ = std::make_unique<ChunkStore>(*pool_, stats_);
    store_->SetWriteBehind(mode, [this](std::vector<ChunkStore::Flush> f) {
      flushes_.insert(flushes_.end(), f.begin(), f.end());
    });
  }
  ChunkStore::Reservation Put(uint8_t n) {
    auto ticket = store_->BeginStore(0, Key(n), kChunk);
    if (ticket.result != ChunkStore::Reservation::kReserved) return ticket.result;
    std::memset(ticket.slot, n, kChunk);
    store_->CommitStore(ticket.entry, 256);
    return ticket.result;
  }
  bool Has(uint8_t n) { return store_->Ready(0, Key(n)); }
  void EndFlushes(bool written) {
    std::vector<ChunkStore::Flush> done;
    done.swap(flushes_);
    for (const auto& f : done) store_->EndFlush(f.entry, written);
  }

  Stats stats_;
  std::unique_ptr<L1Pool> pool_;
  std::unique_ptr<ChunkStore> store_;
  std::vector<ChunkStore::Flush> flushes_;
};

TEST_F(WriteBehindTest, OnEvictionNeverDropsAChunkNotYetWrittenBelow) {
  Make(ChunkStore::WriteBehind::kOnEviction);
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_EQ(Put(n), ChunkStore::Reservation::kReserved);
  EXPECT_TRUE(flushes_.empty()) << "nothing is written before eviction picks it";
  // Full: the store is skipped (never delayed) and the oldest go to be written.
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kNoRoom);
  ASSERT_EQ(flushes_.size(), 4u);
  EXPECT_EQ(flushes_[0].key, Key(1));
  EXPECT_EQ(flushes_[0].data[0], 1);
  for (uint8_t n = 1; n <= 4; ++n) EXPECT_TRUE(Has(n)) << "still readable while written";
  EXPECT_EQ(stats_.evicted_chunks.load(), 0u);
  EndFlushes(true);
  // Written below: now one of them goes (written ones go first).
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kReserved);
  int kept = 0;
  for (uint8_t n = 1; n <= 4; ++n) kept += Has(n) ? 1 : 0;
  EXPECT_EQ(kept, 3);
  EXPECT_EQ(stats_.evicted_chunks.load(), 1u);
  EXPECT_TRUE(flushes_.empty());
}

TEST_F(WriteBehindTest, WriteThroughPinsEachStoredChunkUntilItsWriteEnds) {
  Make(ChunkStore::WriteBehind::kWriteThrough);
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_EQ(Put(n), ChunkStore::Reservation::kReserved);
  ASSERT_EQ(flushes_.size(), 4u);
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kNoRoom) << "every slot is being written";
  EndFlushes(true);
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kReserved);
  EXPECT_FALSE(Has(1));
}

TEST_F(WriteBehindTest, AFailedWriteStillLetsTheChunkGo) {
  Make(ChunkStore::WriteBehind::kOnEviction);
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_EQ(Put(n), ChunkStore::Reservation::kReserved);
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kNoRoom);
  EndFlushes(false);
  EXPECT_EQ(stats_.write_behind_failed.load(), 4u);
  EXPECT_EQ(Put(5), ChunkStore::Reservation::kReserved)
      << "L1 must not fill with chunks that cannot leave";
}

TEST_F(WriteBehindTest, PromotedChunksAreCleanAndNeverWrittenBack) {
  Make(ChunkStore::WriteBehind::kWriteThrough);
  auto ticket = store_->BeginStore(0, Key(9), kChunk);
  ASSERT_EQ(ticket.result, ChunkStore::Reservation::kReserved);
  store_->CommitStore(ticket.entry, 256, /*clean=*/true);
  EXPECT_TRUE(flushes_.empty());
  EXPECT_TRUE(Has(9));
}

TEST_F(WriteBehindTest, ALeaseHoldsLowerTierChunksUntilReleased) {
  Make(ChunkStore::WriteBehind::kWriteThrough);
  int ended = 0;
  const uint64_t lease =
      store_->AttachLower(0, "owner", std::chrono::seconds(60), 3, [&] { ++ended; });
  ASSERT_NE(lease, 0u);
  EXPECT_EQ(store_->usage().leases, 1u);
  EXPECT_EQ(store_->AttachLower(lease, "owner", std::chrono::seconds(60), 2, [&] { ++ended; }),
            lease);
  EXPECT_EQ(ended, 0);
  EXPECT_FALSE(store_->Release(lease, "someone else").has_value());
  auto released = store_->Release(lease, "owner");
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(*released, 5u);
  EXPECT_EQ(ended, 2);
  // A lease that ended meanwhile: the holder's end runs at once.
  EXPECT_EQ(store_->AttachLower(lease, "owner", std::chrono::seconds(60), 1, [&] { ++ended; }), 0u);
  EXPECT_EQ(ended, 3);
}

TEST_F(WriteBehindTest, ExpiredLeaseEndsItsLowerTierHold) {
  Make(ChunkStore::WriteBehind::kWriteThrough);
  int ended = 0;
  ASSERT_NE(store_->AttachLower(0, "owner", std::chrono::milliseconds(1), 1, [&] { ++ended; }), 0u);
  store_->ExpireLeases(Clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(ended, 1);
  EXPECT_EQ(store_->usage().leases, 0u);
}

}  // namespace
}  // namespace kvstash::server
