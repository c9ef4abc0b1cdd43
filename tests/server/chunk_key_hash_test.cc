// The chunk index's hash spreads keys that differ in any single byte,
// whatever the rest of the key holds.
#include "chunk_key_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace kvstash::server {
namespace {

// Keys that share all bytes but two, placed at `offset`.
std::unordered_set<size_t> HashesOfKeysVaryingAt(size_t offset, uint64_t seed) {
  const ChunkKeyHash hash(seed);
  std::unordered_set<size_t> hashes;
  for (uint32_t n = 0; n < 4096; ++n) {
    ChunkKey key{};
    key.fill(0x5A);
    key[offset] = uint8_t(n);
    key[offset + 1] = uint8_t(n >> 8);
    hashes.insert(hash(7, key));
  }
  return hashes;
}

TEST(ChunkKeyHashTest, EveryPartOfTheKeyCounts) {
  // A counter behind a fixed prefix (offset 8), zero padding after a short
  // hash (offset 0), a counter at the very end (offset 30): all distinct.
  for (size_t offset : {size_t{0}, size_t{8}, size_t{16}, size_t{24}, size_t{30}}) {
    EXPECT_EQ(HashesOfKeysVaryingAt(offset, 1).size(), 4096u) << "offset " << offset;
  }
}

TEST(ChunkKeyHashTest, LowBitsSpreadTooBecauseBucketsUseThem) {
  // unordered_map takes the hash modulo its bucket count: with 4096 keys in
  // 1024 buckets no bucket may hold a large share.
  const ChunkKeyHash hash(3);
  std::vector<int> buckets(1024);
  for (uint32_t n = 0; n < 4096; ++n) {
    ChunkKey key{};
    key[8] = uint8_t(n);
    key[9] = uint8_t(n >> 8);
    ++buckets[hash(0, key) % buckets.size()];
  }
  EXPECT_LE(*std::max_element(buckets.begin(), buckets.end()), 16);
}

TEST(ChunkKeyHashTest, ScopeAndSeedChangeTheHash) {
  ChunkKey key{};
  key[3] = 9;
  EXPECT_NE(ChunkKeyHash(1)(0, key), ChunkKeyHash(1)(1, key));
  EXPECT_NE(ChunkKeyHash(1)(0, key), ChunkKeyHash(2)(0, key));
  EXPECT_EQ(ChunkKeyHash(1)(0, key), ChunkKeyHash(1)(0, key));
}

}  // namespace
}  // namespace kvstash::server
