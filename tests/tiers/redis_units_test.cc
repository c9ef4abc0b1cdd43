// Pieces of the L3 tier that need no server: endpoint parsing, the Redis
// Cluster slot of a key, the circuit breaker.
#include <gtest/gtest.h>

#include "circuit_breaker.h"
#include "kvstash/tiers/redis_tier.h"
#include "redis_router.h"

namespace kvstash::tiers {
namespace {

TEST(RedisServers, ParsesAListAndNamesABadEntry) {
  Result<std::vector<std::string>> ok =
      ParseRedisServers("10.0.0.1:6379,redis.local:7000,[::1]:6380");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 3u);
  for (const char* bad : {"", "host", "host:", ":6379", "h:0", "h:65536", "h:12a", "a:1,,b:2"}) {
    Result<std::vector<std::string>> r = ParseRedisServers(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseRedisServers("a:1,b").status().message().find("'b'"), std::string::npos);
}

TEST(RedisSlots, MatchesRedisClusterKeyslot) {
  // Values from `CLUSTER KEYSLOT` on a real server.
  EXPECT_EQ(internal::KeySlot("foo"), 12182);
  EXPECT_EQ(internal::KeySlot("bar"), 5061);
  EXPECT_EQ(internal::KeySlot("{user1000}.following"), internal::KeySlot("user1000"));
  EXPECT_EQ(internal::KeySlot("a{}b"), internal::KeySlot("a{}b"));  // empty tag: whole key
  EXPECT_EQ(internal::KeySlot("kv:{abc}:0"), internal::KeySlot("kv:{abc}:17"));
}

TEST(CircuitBreaker, OpensAfterFailuresAndHalfOpensLater) {
  using Clock = internal::CircuitBreaker::Clock;
  internal::CircuitBreaker breaker(3, std::chrono::milliseconds(100));
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(breaker.Allow(t0));
  EXPECT_FALSE(breaker.Failure(t0));
  EXPECT_FALSE(breaker.Failure(t0));
  EXPECT_TRUE(breaker.Failure(t0));  // third: opens
  EXPECT_FALSE(breaker.Allow(t0 + std::chrono::milliseconds(50)));
  // Half-open: one trial at a time.
  const auto later = t0 + std::chrono::milliseconds(101);
  EXPECT_TRUE(breaker.Allow(later));
  EXPECT_FALSE(breaker.Allow(later));
  EXPECT_FALSE(breaker.Failure(later));  // trial failed: open again (not a new opening)
  EXPECT_FALSE(breaker.Allow(later + std::chrono::milliseconds(50)));
  EXPECT_TRUE(breaker.Allow(later + std::chrono::milliseconds(101)));
  breaker.Success();
  EXPECT_TRUE(breaker.Allow(later + std::chrono::milliseconds(102)));
  EXPECT_TRUE(breaker.Allow(later + std::chrono::milliseconds(102)));
}

}  // namespace
}  // namespace kvstash::tiers
