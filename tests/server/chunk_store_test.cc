// Chunk store: LRU eviction, leases, pins, capacity, scopes.
#include "chunk_store.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kvstash::server {
namespace {

constexpr uint64_t kChunk = 64 * 1024;

ChunkKey Key(uint8_t n) {
  ChunkKey k{};
  k[0] = n;
  k[31] = 0xA5;
  return k;
}

class ChunkStoreTest : public ::testing::Test {
 protected:
  // Room for exactly four chunks.
  void SetUp() override {
    auto pool = L1Pool::Create(4 * kChunk, 4 * kChunk, 1, {});
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    pool_->WaitUntilPrepared();
    store_ = std::make_unique<ChunkStore>(*pool_, stats_);
  }
  bool Put(uint8_t n, uint32_t tokens = 256, ScopeId scope = 0) {
    auto ticket = store_->BeginStore(scope, Key(n), kChunk);
    if (ticket.result != ChunkStore::Reservation::kReserved) return false;
    std::memset(ticket.slot, n, kChunk);
    store_->CommitStore(ticket.entry, tokens);
    return true;
  }
  bool Has(uint8_t n, ScopeId scope = 0) {
    auto read = store_->BeginRead(scope, Key(n));
    if (read) store_->EndRead(read->entry);
    return read.has_value();
  }

  Stats stats_;
  std::unique_ptr<L1Pool> pool_;
  std::unique_ptr<ChunkStore> store_;
};

TEST_F(ChunkStoreTest, EvictsLeastRecentlyUsedWhenFull) {
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_TRUE(Put(n));
  ASSERT_TRUE(Has(1));  // touch 1: now 2 is the oldest
  ASSERT_TRUE(Put(5));
  EXPECT_FALSE(Has(2));
  EXPECT_TRUE(Has(1));
  EXPECT_TRUE(Has(5));
  EXPECT_EQ(stats_.evicted_chunks.load(), 1u);
  EXPECT_LE(pool_->used_bytes(), pool_->capacity_bytes());
}

TEST_F(ChunkStoreTest, LeasedChunkSurvivesEvictionPressure) {
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_TRUE(Put(n));
  auto hit = store_->Lookup(0, {Key(1)}, 256, std::chrono::seconds(60));
  ASSERT_EQ(hit.hit_chunks, 1u);
  for (uint8_t n = 10; n < 30; ++n) ASSERT_TRUE(Put(n));
  EXPECT_TRUE(Has(1)) << "a leased chunk was evicted";
  // Its bytes are intact.
  auto read = store_->BeginRead(0, Key(1));
  ASSERT_TRUE(read);
  EXPECT_EQ(read->slot[kChunk - 1], 1);
  store_->EndRead(read->entry);
  ASSERT_TRUE(store_->Release(hit.lease_id));
  for (uint8_t n = 30; n < 34; ++n) ASSERT_TRUE(Put(n));
  EXPECT_FALSE(Has(1)) << "released chunk should be evictable again";
}

TEST_F(ChunkStoreTest, NoRoomWhenEveryChunkIsPinned) {
  for (uint8_t n = 1; n <= 4; ++n) ASSERT_TRUE(Put(n));
  auto hit = store_->Lookup(0, {Key(1), Key(2), Key(3), Key(4)}, 256, std::chrono::seconds(60));
  ASSERT_EQ(hit.hit_chunks, 4u);
  EXPECT_EQ(store_->BeginStore(0, Key(9), kChunk).result, ChunkStore::Reservation::kNoRoom);
  store_->Release(hit.lease_id);
  EXPECT_EQ(store_->BeginStore(0, Key(9), kChunk).result, ChunkStore::Reservation::kReserved);
}

TEST_F(ChunkStoreTest, WritingChunkIsInvisibleAndNotEvicted) {
  auto ticket = store_->BeginStore(0, Key(1), kChunk);
  ASSERT_EQ(ticket.result, ChunkStore::Reservation::kReserved);
  EXPECT_FALSE(Has(1));
  EXPECT_EQ(store_->Lookup(0, {Key(1)}, 256, std::chrono::seconds(1)).hit_chunks, 0u);
  EXPECT_EQ(store_->BeginStore(0, Key(1), kChunk).result, ChunkStore::Reservation::kAlreadyPresent);
  for (uint8_t n = 2; n < 10; ++n) Put(n);
  store_->CommitStore(ticket.entry, 256);
  EXPECT_TRUE(Has(1));
}

TEST_F(ChunkStoreTest, AbortedStoreFreesItsSlot) {
  auto ticket = store_->BeginStore(0, Key(1), kChunk);
  store_->AbortStore(ticket.entry);
  EXPECT_FALSE(Has(1));
  EXPECT_EQ(pool_->used_bytes(), 0u);
}

TEST_F(ChunkStoreTest, LookupStopsAtFirstMissAndAtPartialChunk) {
  Put(1);
  Put(2);
  Put(3, 100);  // partial
  Put(4);
  auto hit = store_->Lookup(0, {Key(1), Key(2), Key(3), Key(4)}, 256, std::chrono::seconds(1));
  EXPECT_EQ(hit.hit_chunks, 3u);
  EXPECT_EQ(hit.hit_tokens, 256u + 256 + 100);
  auto miss = store_->Lookup(0, {Key(1), Key(7), Key(2)}, 256, std::chrono::seconds(1));
  EXPECT_EQ(miss.hit_chunks, 1u);
  EXPECT_EQ(store_->Lookup(0, {Key(7)}, 256, std::chrono::seconds(1)).lease_id, 0u);
}

TEST_F(ChunkStoreTest, ScopesNeverSeeEachOther) {
  Put(1, 256, /*scope=*/0);
  EXPECT_FALSE(Has(1, /*scope=*/1));
  EXPECT_TRUE(Put(1, 256, /*scope=*/1));
}

TEST_F(ChunkStoreTest, ExpiredLeaseUnpins) {
  for (uint8_t n = 1; n <= 4; ++n) Put(n);
  auto hit = store_->Lookup(0, {Key(1)}, 256, std::chrono::milliseconds(0));
  store_->ExpireLeases(Clock::now() + std::chrono::milliseconds(1));
  EXPECT_FALSE(store_->Release(hit.lease_id));
  EXPECT_EQ(stats_.leases_expired.load(), 1u);
}

TEST_F(ChunkStoreTest, ClearKeepsPinnedChunks) {
  for (uint8_t n = 1; n <= 3; ++n) Put(n);
  auto read = store_->BeginRead(0, Key(2));
  EXPECT_EQ(store_->Clear([](ScopeId) { return true; }), 2u);
  EXPECT_TRUE(read && Has(2));
  store_->EndRead(read->entry);
}

TEST_F(ChunkStoreTest, EvictsOtherSizesToMakeRoom) {
  for (uint8_t n = 1; n <= 4; ++n) Put(n);
  // A chunk of a different size needs the whole slab back.
  auto ticket = store_->BeginStore(0, Key(50), 3 * kChunk);
  EXPECT_EQ(ticket.result, ChunkStore::Reservation::kReserved);
  EXPECT_EQ(stats_.evicted_chunks.load(), 4u);
}

// Two registrations of different chunk sizes share the pool in LRU order: a
// newer chunk is never evicted while an older one of another size stays, so
// the second size is not confined to the slabs it held first.
TEST(ChunkStoreSizes, EvictsOlderChunksOfAnotherSizeBeforeNewerOnesOfItsOwn) {
  constexpr uint64_t kSmall = kChunk, kLarge = 2 * kChunk;
  auto pool = L1Pool::Create(16 * kSmall, 4 * kSmall, 1, {});  // 4 slabs of 4 small, 2 large
  ASSERT_TRUE(pool.ok());
  (*pool)->WaitUntilPrepared();
  Stats stats;
  ChunkStore store(**pool, stats);
  auto put = [&](uint8_t n, uint64_t bytes) {
    auto ticket = store.BeginStore(0, Key(n), bytes);
    if (ticket.result != ChunkStore::Reservation::kReserved) return false;
    std::memset(ticket.slot, n, bytes);
    store.CommitStore(ticket.entry, 256);
    return true;
  };
  auto has = [&](uint8_t n) {
    auto read = store.BeginRead(0, Key(n));
    if (read) store.EndRead(read->entry);
    return read.has_value();
  };
  for (uint8_t n = 1; n <= 16; ++n) ASSERT_TRUE(put(n, kSmall));  // the pool is full
  for (uint8_t n = 101; n <= 106; ++n) ASSERT_TRUE(put(n, kLarge));
  for (uint8_t n = 101; n <= 106; ++n) EXPECT_TRUE(has(n)) << "large chunk " << int(n);
  for (uint8_t n = 13; n <= 16; ++n) EXPECT_TRUE(has(n)) << "small chunk " << int(n);
  for (uint8_t n = 1; n <= 12; ++n) EXPECT_FALSE(has(n)) << "small chunk " << int(n);
}

}  // namespace
}  // namespace kvstash::server
