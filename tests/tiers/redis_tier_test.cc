// L3 on real redis-server processes: single instance and a 3-node Redis
// Cluster, byte-exact round trips, scopes kept apart, two tiers sharing one
// Redis as two daemons would, corrupted values, a killed, hung and
// restarted Redis, AUTH with an ACL user.
#include "kvstash/tiers/redis_tier.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "redis_process.h"
#include "tier_test_data.h"

namespace kvstash::tiers {
namespace {

using testing::FillPayload;
using testing::HoldsChunk;
using testing::MakeFingerprint;
using testing::MakeId;
using testing::RedisCluster;
using testing::RedisProcess;
using testing::TestBuffer;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1 << 20;

#define SKIP_WITHOUT_REDIS()                                                             \
  if (!testing::RedisAvailable()) {                                                      \
    GTEST_SKIP() << "redis-server or redis-cli not found on PATH: install redis-server " \
                    "(scripts/setup.sh does) to run the L3 tests";                       \
  }

RedisTierOptions Options(std::vector<std::string> servers) {
  RedisTierOptions o;
  o.servers = std::move(servers);
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 1000;
  o.breaker_failures = 2;
  o.breaker_open_ms = 300;
  return o;
}

std::unique_ptr<RedisTier> OpenTier(const RedisTierOptions& options) {
  Result<std::unique_ptr<RedisTier>> tier = RedisTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

std::unique_ptr<RedisProcess> StartRedis(const std::vector<std::string>& extra = {}) {
  Result<std::unique_ptr<RedisProcess>> redis = RedisProcess::Start(extra);
  EXPECT_TRUE(redis.ok()) << redis.status().ToString();
  return redis.ok() ? std::move(redis).value() : nullptr;
}

// Puts chunks `ids` of `size` bytes each; returns their results.
std::vector<PutResult> PutChunks(Tier& tier, const std::vector<ChunkId>& ids, size_t size) {
  std::vector<TestBuffer> buffers;
  std::vector<PutRequest> requests;
  buffers.reserve(ids.size());
  for (const ChunkId& id : ids) {
    buffers.emplace_back(size);
    FillPayload(id, buffers.back().data(), size);
    requests.push_back({id, MakeFingerprint(1), 77, buffers.back().data(), size});
  }
  return PutAsync(tier, requests).get();
}

// Gets chunks back; a result is Ok only when the bytes are exactly right.
std::vector<Status> GetChunks(Tier& tier, const std::vector<ChunkId>& ids, size_t size) {
  std::vector<TestBuffer> buffers;
  std::vector<GetRequest> requests;
  buffers.reserve(ids.size());
  for (const ChunkId& id : ids) {
    buffers.emplace_back(size);
    requests.push_back({{id, MakeFingerprint(1), size}, buffers.back().data()});
  }
  std::vector<GetResult> results = GetAsync(tier, requests).get();
  std::vector<Status> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!results[i].status.ok()) {
      out.push_back(results[i].status);
    } else if (!HoldsChunk(ids[i], buffers[i].data(), size) || results[i].num_tokens != 77) {
      out.push_back(Status::Internal("WRONG BYTES SERVED"));
    } else {
      out.push_back(Status::Ok());
    }
  }
  return out;
}

std::vector<ChunkId> Ids(uint64_t scope, uint64_t count, uint64_t first = 0) {
  std::vector<ChunkId> ids;
  for (uint64_t i = 0; i < count; ++i) ids.push_back(MakeId(scope, first + i));
  return ids;
}

void ExpectAllStored(const std::vector<PutResult>& results) {
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].outcome, PutOutcome::kStored) << i << ": " << results[i].status.ToString();
  }
}

void ExpectAllOk(const std::vector<Status>& results) {
  for (size_t i = 0; i < results.size(); ++i)
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
}

TEST(RedisTier, SingleInstanceRoundTripsByteExactAcrossParts) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  RedisTierOptions options = Options({redis->endpoint()});
  options.part_bytes = 64 * 1024;  // small parts: chunks of several parts
  auto tier = OpenTier(options);
  for (size_t size :
       {size_t{1}, size_t{5000}, size_t{64 * 1024}, size_t{3 * 64 * 1024 + 17}, size_t{2 * kMiB}}) {
    const std::vector<ChunkId> ids = Ids(size, 6);
    ExpectAllStored(PutChunks(*tier, ids, size));
    ExpectAllOk(GetChunks(*tier, ids, size));
  }
  // Misses, and Contains with the header's token count.
  EXPECT_EQ(GetChunks(*tier, Ids(99, 1), 5000)[0].code(), StatusCode::kNotFound);
  std::vector<Presence> p = ContainsAsync(*tier, {MakeId(5000, 0), MakeId(99, 0)}).get();
  ASSERT_TRUE(p[0].status.ok()) << p[0].status.ToString();
  EXPECT_TRUE(p[0].present);
  EXPECT_EQ(p[0].header.num_tokens, 77u);
  EXPECT_EQ(p[0].header.payload_bytes, 5000u);
  EXPECT_FALSE(p[1].present);
  // Remove drops every part.
  ASSERT_TRUE(RemoveAsync(*tier, {MakeId(2 * kMiB, 0)}).get()[0].ok());
  EXPECT_EQ(GetChunks(*tier, {MakeId(2 * kMiB, 0)}, 2 * kMiB)[0].code(), StatusCode::kNotFound);
  EXPECT_EQ(redis->Cli({"EXISTS", tier->KeyOf(MakeId(2 * kMiB, 0), 1)}), "0\n");
  EXPECT_EQ(tier->stats().corrupt_chunks.load(), 0u);
}

TEST(RedisTier, LargeChunksSplitIntoPartsUnderOneHashTag) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  auto tier = OpenTier(Options({redis->endpoint()}));  // 16 MiB parts
  const size_t size = 40 * kMiB + 123;                 // three parts
  ExpectAllStored(PutChunks(*tier, Ids(1, 2), size));
  const ChunkId id = MakeId(1, 0);
  EXPECT_EQ(redis->Cli({"STRLEN", tier->KeyOf(id, 1)}), std::to_string(16 * kMiB) + "\n");
  EXPECT_EQ(redis->Cli({"STRLEN", tier->KeyOf(id, 3)}), std::to_string(8 * kMiB + 123) + "\n");
  EXPECT_EQ(redis->Cli({"EXISTS", tier->KeyOf(id, 4)}), "0\n");
  // One slot for all parts: the hash tag is the chunk id.
  const std::string slot = redis->Cli({"CLUSTER", "KEYSLOT", tier->KeyOf(id, 0)});
  for (uint32_t p = 1; p <= 3; ++p)
    EXPECT_EQ(redis->Cli({"CLUSTER", "KEYSLOT", tier->KeyOf(id, p)}), slot);
  ExpectAllOk(GetChunks(*tier, Ids(1, 2), size));
}

TEST(RedisTier, AReaderWithAnotherPartSizeReadsTheWritersChunks) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  RedisTierOptions small = Options({redis->endpoint()});
  small.part_bytes = 100 * 1024;
  auto writer = OpenTier(small);
  auto reader = OpenTier(Options({redis->endpoint()}));
  const size_t size = 1 * kMiB + 5;
  ExpectAllStored(PutChunks(*writer, Ids(1, 3), size));
  ExpectAllOk(GetChunks(*reader, Ids(1, 3), size));
}

TEST(RedisTier, ScopesNeverShareAChunk) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  auto tier = OpenTier(Options({redis->endpoint()}));
  ChunkId a = MakeId(1, 0);
  ChunkId b = a;
  b.scope = MakeId(2, 0).scope;  // the same key in another scope
  ExpectAllStored(PutChunks(*tier, {a}, 4096));
  EXPECT_EQ(GetChunks(*tier, {b}, 4096)[0].code(), StatusCode::kNotFound);
  EXPECT_FALSE(ContainsAsync(*tier, {b}).get()[0].present);
  EXPECT_NE(tier->KeyOf(a, 0), tier->KeyOf(b, 0));
  EXPECT_NE(tier->KeyOf(a, 0).find(ToHex(a.scope.data(), 32)), std::string::npos);
}

// Two daemons on two nodes: separate tier instances, separate connections,
// one Redis. What one stores, the other reads byte for byte.
TEST(RedisTier, TwoNodesShareChunksThroughOneRedis) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  auto node_a = OpenTier(Options({redis->endpoint()}));
  auto node_b = OpenTier(Options({redis->endpoint()}));
  const size_t size = 3 * kMiB + 256;
  const std::vector<ChunkId> ids = Ids(7, 8);
  ExpectAllStored(PutChunks(*node_a, ids, size));
  for (const Presence& p : ContainsAsync(*node_b, ids).get()) EXPECT_TRUE(p.present);
  ExpectAllOk(GetChunks(*node_b, ids, size));
  EXPECT_EQ(node_b->stats().get_hits.load(), ids.size());
  EXPECT_EQ(node_b->stats().put_chunks.load(), 0u);
}

TEST(RedisTier, CorruptedOrIncompleteValuesAreMissingNeverServed) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  RedisTierOptions options = Options({redis->endpoint()});
  options.part_bytes = 8192;
  auto tier = OpenTier(options);
  const size_t size = 3 * 8192;  // parts 1..3
  const std::vector<ChunkId> ids = Ids(3, 8);
  ExpectAllStored(PutChunks(*tier, ids, size));
  auto key = [&](size_t i, int part) { return tier->KeyOf(ids[i], static_cast<uint32_t>(part)); };
  redis->Cli({"SETRANGE", key(0, 2), "100", "X"});     // one payload byte
  redis->Cli({"SETRANGE", key(1, 0), "20", "X"});      // the header's key
  redis->Cli({"SETRANGE", key(2, 0), "108", "\x01"});  // the part size
  redis->Cli({"SET", key(3, 3), "short"});             // a part cut short
  redis->Cli({"DEL", key(4, 2)});                      // a part evicted
  redis->Cli({"SET", key(5, 0), "garbage"});           // a header that is not one
  redis->Cli({"APPEND", key(6, 1), "tail"});           // a part too long
  // Part 0 of chunk 7 replaced by chunk 6's: a header naming another chunk.
  redis->Cli({"COPY", key(6, 0), key(7, 0), "REPLACE"});
  std::vector<Status> got = GetChunks(*tier, ids, size);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[i].code(), StatusCode::kNotFound) << i << ": " << got[i].ToString();
  }
  EXPECT_GE(tier->stats().corrupt_chunks.load(), ids.size() - 1);
  // A put heals it.
  ExpectAllStored(PutChunks(*tier, ids, size));
  ExpectAllOk(GetChunks(*tier, ids, size));
}

// GET and GETRANGE calls Redis counted since the last CONFIG RESETSTAT.
uint64_t ReadCalls(RedisProcess& redis) {
  const std::string stats = redis.Cli({"INFO", "commandstats"});
  uint64_t calls = 0;
  for (const char* command : {"cmdstat_get:calls=", "cmdstat_getrange:calls="}) {
    const size_t at = stats.find(command);
    if (at != std::string::npos) calls += std::stoull(stats.substr(at + std::strlen(command)));
  }
  return calls;
}

TEST(RedisTier, APartSizeOfOneCostsAReaderNoMoreThanTheChunkNeeds) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  auto tier = OpenTier(Options({redis->endpoint()}));
  const size_t size = kMiB;  // one part at the default part size
  const std::vector<ChunkId> ids = Ids(11, 2);
  ExpectAllStored(PutChunks(*tier, ids, size));
  redisContext* c = redisConnect("127.0.0.1", redis->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  auto command = [&](const char* format, auto... args) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, format, args...));
    std::string text = reply && reply->str ? std::string(reply->str, reply->len) : "";
    freeReplyObject(reply);
    return text;
  };
  // A part size of 1, as a writer who also made the header checksum agree
  // would write it (the checksum catches corruption, not a writer): in the
  // header (bytes [108, 112)) and after it, where it once was.
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string key = tier->KeyOf(ids[i], 0);
    std::string head = command("GET %b", key.data(), key.size()).substr(0, kChunkHeaderBytes);
    ASSERT_EQ(head.size(), kChunkHeaderBytes);
    if (i == 0) head.replace(108, 4, std::string("\x01\0\0\0", 4));
    const uint64_t sum = XXH3_64bits(head.data(), 128);
    std::memcpy(head.data() + 128, &sum, 8);  // little-endian host
    if (i == 1) head += std::string("\x01\0\0\0\0\0\0\0", 8);
    command("SET %b %b", key.data(), key.size(), head.data(), head.size());
  }
  redisFree(c);
  redis->Cli({"CONFIG", "RESETSTAT"});
  const auto start = Clock::now();
  std::vector<Status> got = GetChunks(*tier, ids, size);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[i].code(), StatusCode::kNotFound) << i << ": " << got[i].ToString();
  }
  // Part 0 and the one part each, read once: not a million reads of a byte.
  EXPECT_LE(ReadCalls(*redis), 2 * ids.size());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
}

TEST(RedisTier, KilledRedisFailsFastThenServiceResumesAfterRestart) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  auto tier = OpenTier(Options({redis->endpoint()}));
  const size_t size = 256 * 1024;
  ExpectAllStored(PutChunks(*tier, Ids(1, 16), size));

  // Mid-workload: gets in flight on other threads while the server dies.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0};
  std::thread reader([&] {
    while (!stop) {
      for (const Status& s : GetChunks(*tier, Ids(1, 16), size)) {
        if (s.code() == StatusCode::kInternal) ++wrong;  // the bytes were wrong
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  redis->Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Errors, not hangs: failed calls report Unavailable, and once the
  // breaker is open they return at once.
  std::vector<Status> failed = GetChunks(*tier, Ids(1, 4), size);
  for (const Status& s : failed) EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_GE(tier->stats().breaker_opens.load(), 1u);
  const auto start = Clock::now();
  std::vector<PutResult> puts = PutChunks(*tier, Ids(2, 4), size);
  failed = GetChunks(*tier, Ids(1, 4), size);
  const auto elapsed = Clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::milliseconds(200));
  for (const PutResult& p : puts) EXPECT_EQ(p.outcome, PutOutcome::kFailed);
  EXPECT_GT(tier->stats().breaker_rejections.load(), 0u);
  EXPECT_NE(failed[0].message().find("circuit breaker open"), std::string::npos)
      << failed[0].ToString();
  stop = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(tier->stats().get_errors.load(), 0u);

  // Back on the same port (empty: no persistence in this test): after the
  // breaker's pause, calls go through again.
  ASSERT_TRUE(redis->Restart().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const auto resume_deadline = Clock::now() + std::chrono::seconds(5);
  std::vector<PutResult> again;
  do {
    // Half-open: one trial call passes first, the rest once it succeeded.
    again = PutChunks(*tier, Ids(3, 4), size);
    bool all = true;
    for (const PutResult& p : again) all = all && p.outcome == PutOutcome::kStored;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < resume_deadline);
  ExpectAllStored(again);
  ExpectAllOk(GetChunks(*tier, Ids(3, 4), size));
  EXPECT_EQ(GetChunks(*tier, Ids(1, 1), size)[0].code(),
            StatusCode::kNotFound);  // lost with the restart
}

TEST(RedisTier, HungRedisCostsOneTimeoutThenFailsFast) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  RedisTierOptions options = Options({redis->endpoint()});
  options.breaker_open_ms = 5000;
  auto tier = OpenTier(options);
  const size_t size = 64 * 1024;
  ExpectAllStored(PutChunks(*tier, Ids(1, 4), size));
  redis->Pause();
  auto start = Clock::now();
  std::vector<Status> got = GetChunks(*tier, Ids(1, 4), size);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(options.command_timeout_ms * 3 + 500));
  for (const Status& s : got) EXPECT_FALSE(s.ok());
  EXPECT_EQ(got[0].code(), StatusCode::kTimedOut) << got[0].ToString();
  // Next calls: at most one more timeout opens the breaker, then at once.
  GetChunks(*tier, Ids(1, 4), size);
  start = Clock::now();
  got = GetChunks(*tier, Ids(1, 4), size);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_EQ(got[0].code(), StatusCode::kUnavailable) << got[0].ToString();
  redis->Resume();
}

TEST(RedisTier, RedisDownAtStartIsReportedNotWaitedFor) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis();
  ASSERT_TRUE(redis);
  const std::string endpoint = redis->endpoint();
  redis->Kill();
  auto tier = OpenTier(Options({endpoint}));
  ASSERT_TRUE(tier);
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(GetChunks(*tier, Ids(1, 2), 4096)[0].code(), StatusCode::kUnavailable);
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST(RedisTier, AuthenticatesAsAnAclUser) {
  SKIP_WITHOUT_REDIS();
  auto redis = StartRedis(
      {"--user", "default", "off", "--user", "kv", "on", ">s3cret", "~kvstash:*", "+@all"});
  ASSERT_TRUE(redis);
  RedisTierOptions options = Options({redis->endpoint()});
  options.user = "kv";
  options.password = "wrong";
  auto refused = OpenTier(options);
  std::vector<PutResult> puts = PutChunks(*refused, Ids(1, 1), 4096);
  EXPECT_EQ(puts[0].outcome, PutOutcome::kFailed);
  EXPECT_NE(puts[0].status.message().find("AUTH as user kv failed"), std::string::npos)
      << puts[0].status.ToString();
  options.password = "s3cret";
  auto tier = OpenTier(options);
  ExpectAllStored(PutChunks(*tier, Ids(1, 3), 4096));
  ExpectAllOk(GetChunks(*tier, Ids(1, 3), 4096));
}

TEST(RedisTier, ClusterRoundTripsAcrossSlotsAndNodes) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  // One seed is enough: the rest comes from CLUSTER SLOTS.
  RedisTierOptions options = Options({(*cluster)->endpoints()[1]});
  options.part_bytes = 256 * 1024;
  auto tier = OpenTier(options);
  const size_t size = 600 * 1024;  // three parts, one slot
  const std::vector<ChunkId> ids = Ids(1, 48);
  ExpectAllStored(PutChunks(*tier, ids, size));
  for (size_t n = 0; n < 3; ++n) {
    const int keys = std::stoi((*cluster)->node(n).Cli({"DBSIZE"}));
    EXPECT_GT(keys, 0) << "node " << n << " holds none of the chunks";
    EXPECT_EQ(keys % 4, 0) << "node " << n << " holds a chunk's parts only in part";
  }
  ExpectAllOk(GetChunks(*tier, ids, size));
  // Another node's tier, seeded with all three, reads them too.
  auto other = OpenTier(Options((*cluster)->endpoints()));
  ExpectAllOk(GetChunks(*other, ids, size));
}

TEST(RedisTier, ClusterFollowsMovedSlotsAfterAReshard) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto tier = OpenTier(Options((*cluster)->endpoints()));
  const size_t size = 40 * 1024;
  const std::vector<ChunkId> ids = Ids(1, 32);
  ExpectAllStored(PutChunks(*tier, ids, size));  // the tier now holds a slot map
  // Move every slot of node 0 to node 1 (keys and all).
  RedisProcess& from = (*cluster)->node(0);
  RedisProcess& to = (*cluster)->node(1);
  auto trim = [](std::string s) { return s.substr(0, s.find_first_of("\r\n")); };
  const std::string from_id = trim(from.Cli({"CLUSTER", "MYID"}));
  const std::string to_id = trim(to.Cli({"CLUSTER", "MYID"}));
  const std::string out =
      from.Cli({"--cluster", "reshard", from.endpoint(), "--cluster-from", from_id, "--cluster-to",
                to_id, "--cluster-slots", "16384", "--cluster-yes"});
  ASSERT_EQ(std::stoi(from.Cli({"DBSIZE"})), 0) << out;
  ExpectAllOk(GetChunks(*tier, ids, size));  // old map: MOVED, followed
  ExpectAllStored(PutChunks(*tier, Ids(2, 8), size));
  ExpectAllOk(GetChunks(*tier, Ids(2, 8), size));
}

}  // namespace
}  // namespace kvstash::tiers
