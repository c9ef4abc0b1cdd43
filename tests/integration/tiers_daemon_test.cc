// kvstashd with its tiers below L1, end to end: real kvstashd processes, a
// real L2 directory, a real redis-server for L3. Chunks evicted from L1 come
// back byte-exact from L2, across a restart too; a corrupt or truncated L2
// file is reported missing, never served; lookups say each hit's tier;
// prefetch completes; a leased chunk survives the L1 -> L2 cascade; two
// daemons share chunks through one Redis.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"
#include "kvstash/tiers/chunk_header.h"
#include "redis_process.h"
#include "resp_peer.h"

namespace kvstash::testing {
namespace {

using nlohmann::json;
constexpr uint64_t kSeed = 0x7135;
constexpr int kChunkTokens = 64;  // 4 blocks of 16 tokens, 128 KiB a chunk

std::string TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/kvstash-l2-XXXXXX";
  return ::mkdtemp(pattern.data()) ? pattern : std::string();
}

std::string Hex(const ChunkKey& key) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : key) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// A daemon with L2 in a private directory: L1 holds 64 chunks (8 MiB).
class TiersTest : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = {"--chunk-tokens", "64",   "--l1-gb",      "0.0078125",
                                     "--l1-slice-mb",  "4",    "--l2-path",    l2_dir_,
                                     "--l2-gb",        l2_gb_, "--tier-write", tier_write_};
    args.insert(args.end(), extra_.begin(), extra_.end());
    return args;
  }
  void SetUp() override {
    l2_dir_ = TempDir();
    ASSERT_FALSE(l2_dir_.empty());
    DaemonTest::SetUp();
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
    std::system(("rm -rf '" + l2_dir_ + "'").c_str());
  }

  json StatsJson() {
    auto stats = client_->Stats().get();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    return stats.ok() ? json::parse(stats->json) : json{};
  }
  uint64_t TierCounter(const std::string& level, const std::string& name) {
    json s = StatsJson();
    if (!s.contains("tiers") || !s["tiers"].contains(level)) return 0;
    return s["tiers"][level]["counters"].value(name, uint64_t{0});
  }
  // Waits until `level` has taken `chunks` puts (written or found there).
  bool WaitForPuts(const std::string& level, uint64_t chunks) {
    for (int i = 0; i < 500; ++i) {
      if (TierCounter(level, "put_chunks") + TierCounter(level, "put_already_present") >= chunks) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Waits until every chunk sent below L1 was answered by L2.
  bool WaitForWrites() {
    for (int i = 0; i < 500; ++i) {
      json s = StatsJson();
      const json& l2 = s["tiers"]["L2"]["counters"];
      const uint64_t answered = l2.value("put_chunks", uint64_t{0}) +
                                l2.value("put_already_present", uint64_t{0}) +
                                l2.value("put_errors", uint64_t{0});
      if (answered >= s["counters"].value("write_behind_chunks", uint64_t{0})) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::vector<ChunkKey> Keys(const std::vector<ChunkBlocks>& chunks) {
    std::vector<ChunkKey> keys;
    for (const auto& c : chunks) keys.push_back(c.key);
    return keys;
  }
  // Stores prompt `p` (n full chunks) from blocks starting at `first`.
  // Unless `strict`, a chunk may be skipped for room (L1 slots being written
  // below are pinned meanwhile).
  std::vector<ChunkBlocks> StorePrompt(uint32_t p, uint32_t n, uint32_t first, bool strict = true) {
    const auto tokens = PromptTokens(p, size_t(n) * kChunkTokens, 0);
    auto stored = FillAndStore(kSeed + p, tokens, Blocks(first, n * 4));
    for (const auto& o : stored) {
      EXPECT_TRUE(o.result == ChunkResult::kStored || o.result == ChunkResult::kAlreadyPresent ||
                  (!strict && o.result == ChunkResult::kSkippedNoRoom))
          << NameOf(o.result) << " " << o.error.ToString();
    }
    return Chunks(tokens, Blocks(first, n * 4));
  }
  // Stores `rounds` x 32 chunks of other prompts: what L1 held is evicted.
  void Flood(uint32_t first_prompt, int rounds) {
    for (int r = 0; r < rounds; ++r) {
      StorePrompt(first_prompt + uint32_t(r), 32, 128, /*strict=*/false);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Floods (new prompts from `*next`) until `keys`' lookup finds none of
  // them in L1; returns that lookup's tier counts (L1, L2, L3). Stores may
  // be skipped while L1's slots are being written below, so it is judged,
  // not assumed.
  std::array<uint32_t, 3> FloodUntilOutOfL1(const std::vector<ChunkKey>& keys, uint32_t* next) {
    for (int round = 0; round < 20; ++round) {
      // A whole L1 of other chunks (a lookup makes the chunks it leases the
      // most recently used, so each round floods before it looks).
      Flood(*next, 2);
      *next += 2;
      // The prefix goes L1, then L2: a chunk whose write is still under way
      // would end it early.
      EXPECT_TRUE(WaitForWrites());
      auto hit = client_->Lookup(reg_.id, keys).get();
      EXPECT_TRUE(hit.ok());
      if (!hit.ok()) break;
      if (hit->lease_id) {
        EXPECT_TRUE(client_->Release(hit->lease_id).get().ok());
      }
      if (hit->CountIn(TierLevel::kL1) == 0) {
        return {0, hit->CountIn(TierLevel::kL2), hit->CountIn(TierLevel::kL3)};
      }
    }
    ADD_FAILURE() << "the chunks never left L1";
    return {~0u, 0, 0};
  }
  // Retrieves prompt `p`'s n chunks into blocks from `first`; mismatching rows.
  uint64_t RetrieveMismatches(uint32_t p, uint32_t n, uint32_t first,
                              std::vector<ChunkOutcome>* outcomes = nullptr,
                              uint64_t lease_id = 0) {
    const auto tokens = PromptTokens(p, size_t(n) * kChunkTokens, 0);
    engine_->Poison(Blocks(first, n * 4));
    auto got = client_->Retrieve(reg_.id, Chunks(tokens, Blocks(first, n * 4)), 0, lease_id).get();
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok()) return ~0ull;
    if (outcomes) *outcomes = *got;
    return engine_->CountMismatches(kSeed + p, tokens, Blocks(first, n * 4), 0,
                                    size_t(n) * kChunkTokens);
  }
  std::string L2PathOf(const ChunkKey& key) const {
    const std::string k = Hex(key);
    return l2_dir_ + "/" + k.substr(0, 2) + "/" + Hex(reg_.namespace_id) + "-" + k + ".kvc";
  }
  Status RestartAndReregister() {
    client_.reset();
    if (daemon_->Stop() != 0) return Status::Internal("kvstashd did not stop cleanly");
    KVSTASH_RETURN_IF_ERROR(daemon_->Restart());
    client_ = Connect();
    if (!client_) return Status::Unavailable("no client");
    auto reg = client_->RegisterKV(engine_->Registration("test-model")).get();
    if (!reg.ok()) return reg.status();
    reg_ = *reg;
    return Status::Ok();
  }

  std::string l2_dir_;
  std::string l2_gb_ = "1";
  std::string tier_write_ = "write-through";
  std::vector<std::string> extra_;
};

TEST_F(TiersTest, ChunksEvictedFromL1ComeBackFromL2ByteExact) {
  const auto a = StorePrompt(1, 16, 0);
  uint32_t next = 100;
  const auto tiers = FloodUntilOutOfL1(Keys(a), &next);
  EXPECT_EQ(tiers[1], 16u) << "A was evicted from L1 and lives on in L2";
  std::vector<ChunkOutcome> outcomes;
  EXPECT_EQ(RetrieveMismatches(1, 16, 64, &outcomes), 0u);
  for (const auto& o : outcomes) EXPECT_EQ(o.result, ChunkResult::kRetrieved) << NameOf(o.result);
  // At least the first chunk (the lookup found it outside L1) came from L2;
  // later ones may still have been in L1 too.
  EXPECT_GE(Counter("promoted_chunks"), 1u);
  EXPECT_EQ(TierCounter("L2", "get_hits"), Counter("promoted_chunks"));
}

class OnEvictionTest : public TiersTest {
 protected:
  void SetUp() override {
    tier_write_ = "on-eviction";
    TiersTest::SetUp();
  }
};

TEST_F(OnEvictionTest, EvictionWritesChunksBehindL1AndTheyComeBackByteExact) {
  const auto a = StorePrompt(1, 16, 0);
  EXPECT_EQ(TierCounter("L2", "put_chunks"), 0u) << "nothing is written before eviction";
  // Stores past L1's capacity: eviction sends the oldest chunks to L2 first;
  // some stores may be skipped while they are written, never delayed.
  Flood(100, 6);
  ASSERT_TRUE(WaitForWrites());
  EXPECT_GT(TierCounter("L2", "put_chunks"), 0u);
  std::vector<ChunkOutcome> outcomes;
  EXPECT_EQ(RetrieveMismatches(1, 16, 64, &outcomes), 0u);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].result, ChunkResult::kRetrieved)
        << "chunk " << i << ": " << NameOf(outcomes[i].result) << "; " << StatsJson().dump();
  }
}

TEST_F(TiersTest, L2SurvivesARestartByteExact) {
  StorePrompt(1, 16, 0);
  ASSERT_TRUE(WaitForPuts("L2", 16));
  ASSERT_TRUE(RestartAndReregister().ok());
  auto describe = client_->Describe().get();
  ASSERT_TRUE(describe.ok());
  json tiers = json::parse(*describe)["tiers"];
  ASSERT_EQ(tiers.size(), 2u) << tiers.dump();
  EXPECT_EQ(tiers[1]["name"], "L2");
  EXPECT_EQ(tiers[1]["rebuild"]["chunks"], 16u);
  EXPECT_LT(tiers[1]["rebuild"]["seconds"].get<double>(), 5.0);

  std::vector<ChunkOutcome> outcomes;
  EXPECT_EQ(RetrieveMismatches(1, 16, 64, &outcomes), 0u);
  for (const auto& o : outcomes) EXPECT_EQ(o.result, ChunkResult::kRetrieved) << NameOf(o.result);
}

TEST_F(TiersTest, EveryChunkCalledStoredIsInL2AfterAStopRightAfterTheStores) {
  // Stores answered, then SIGTERM at once: the writes still queued for L2
  // land before kvstashd exits, and the restarted daemon finds every one.
  std::vector<ChunkKey> keys;
  for (uint32_t p = 1; p <= 3; ++p) {
    const auto tokens = PromptTokens(p, 16 * kChunkTokens + 20, 0);  // 16 full and a partial
    auto stored = FillAndStore(kSeed + p, tokens, Blocks(0, 66));
    ASSERT_EQ(stored.size(), 17u);
    for (const auto& o : stored) ASSERT_EQ(o.result, ChunkResult::kStored) << NameOf(o.result);
    for (const auto& c : Chunks(tokens, Blocks(0, 66))) keys.push_back(c.key);
  }
  ASSERT_TRUE(RestartAndReregister().ok());
  auto describe = client_->Describe().get();
  ASSERT_TRUE(describe.ok());
  EXPECT_EQ(json::parse(*describe)["tiers"][1]["rebuild"]["chunks"], keys.size());
  for (const ChunkKey& key : keys) {
    EXPECT_EQ(::access(L2PathOf(key).c_str(), F_OK), 0) << Hex(key);
  }
}

TEST_F(TiersTest, CorruptOrTruncatedL2FilesAreReportedMissingNeverServed) {
  const auto a = StorePrompt(1, 4, 0);
  ASSERT_TRUE(WaitForPuts("L2", 4));
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  // Chunk 1: one payload byte flipped. Chunk 3: cut short.
  {
    const std::string path = L2PathOf(a[1].key);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekg(8192);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(8192);
    f.write(&c, 1);
  }
  ASSERT_EQ(::truncate(L2PathOf(a[3].key).c_str(), 4096 + 1000), 0);
  ASSERT_TRUE(daemon_->Restart().ok());
  client_ = Connect();
  auto reg = client_->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(reg.ok());
  reg_ = *reg;

  std::vector<ChunkOutcome> outcomes;
  RetrieveMismatches(1, 4, 64, &outcomes);
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_EQ(outcomes[0].result, ChunkResult::kRetrieved);
  EXPECT_EQ(outcomes[1].result, ChunkResult::kMissing) << "a corrupt payload is never served";
  EXPECT_EQ(outcomes[2].result, ChunkResult::kRetrieved);
  EXPECT_EQ(outcomes[3].result, ChunkResult::kMissing) << "a truncated file is never served";
  // The corrupt chunk's blocks were not written; the good chunks are exact.
  const auto tokens = PromptTokens(1, 4 * kChunkTokens, 0);
  EXPECT_EQ(engine_->CountNotPoison(Blocks(64, 16), 64, 128), 0u);
  EXPECT_EQ(engine_->CountMismatches(kSeed + 1, tokens, Blocks(64, 16), 0, 64), 0u);
  EXPECT_EQ(engine_->CountMismatches(kSeed + 1, tokens, Blocks(64, 16), 128, 192), 0u);
  EXPECT_GE(TierCounter("L2", "corrupt_chunks"), 1u);
  // Dropped: a later lookup's prefix ends before it.
  auto hit = client_->Lookup(reg_.id, Keys(a)).get();
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_chunks, 1u);
}

TEST_F(TiersTest, AHeaderSayingMoreTokensThanAChunkHoldsIsNoHit) {
  const auto a = StorePrompt(1, 2, 0);
  ASSERT_TRUE(WaitForPuts("L2", 2));
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  // Chunk 0's header says 80 tokens (of 64), with its checksum redone: a
  // sound header of no chunk this registration can hold.
  {
    const std::string path = L2PathOf(a[0].key);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    std::vector<uint8_t> head(tiers::kChunkHeaderBytes);
    f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
    Result<tiers::ChunkHeader> header = tiers::DecodeChunkHeader(head.data(), head.size());
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    header->num_tokens = 80;
    tiers::EncodeChunkHeader(*header, head.data());
    f.seekp(0);
    f.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
  }
  ASSERT_TRUE(daemon_->Restart().ok());
  client_ = Connect();
  auto reg = client_->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(reg.ok());
  reg_ = *reg;
  auto hit = client_->Lookup(reg_.id, Keys(a)).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_LE(hit->hit_tokens, uint64_t{kChunkTokens} * hit->hit_chunks);
  EXPECT_EQ(hit->hit_chunks, 0u) << "the prefix ends at the chunk that is not one";
  if (hit->lease_id) {
    EXPECT_TRUE(client_->Release(hit->lease_id).get().ok());
  }
  std::vector<ChunkOutcome> outcomes;
  RetrieveMismatches(1, 2, 64, &outcomes);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].result, ChunkResult::kMissing) << NameOf(outcomes[0].result);
}

TEST_F(TiersTest, LookupSaysEachHitsTierAndPrefetchCompletes) {
  const auto a = StorePrompt(1, 8, 0);
  ASSERT_TRUE(WaitForPuts("L2", 8));
  ASSERT_TRUE(RestartAndReregister().ok());
  // L1 is empty after the restart: store chunks 0-1 again, so the prefix is
  // L1, L1, then L2 x 6.
  const auto tokens = PromptTokens(1, 8 * kChunkTokens, 0);
  engine_->Fill(kSeed + 1, tokens, Blocks(0, 32));
  auto stored = client_->Store(reg_.id, {a[0], a[1]}).get();
  ASSERT_TRUE(stored.ok());
  auto hit = client_->Lookup(reg_.id, Keys(a), 0, /*prefetch=*/true).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  ASSERT_EQ(hit->hit_chunks, 8u);
  ASSERT_EQ(hit->hit_tiers.size(), 8u);
  EXPECT_EQ(hit->hit_tiers[0], TierLevel::kL1);
  EXPECT_EQ(hit->hit_tiers[1], TierLevel::kL1);
  for (size_t i = 2; i < 8; ++i) EXPECT_EQ(hit->hit_tiers[i], TierLevel::kL2) << i;
  ASSERT_TRUE(client_->Release(hit->lease_id).get().ok());
  // Asked again until the prefetch says it is done: then all of it is in L1.
  Result<LookupResult> again = Status::Internal("never asked");
  for (int i = 0; i < 500; ++i) {
    again = client_->Lookup(reg_.id, Keys(a)).get();
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(client_->Release(again->lease_id).get().ok());
    if (again->prefetch_pending == 0 && again->CountIn(TierLevel::kL1) == 8) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(again->prefetch_pending, 0u);
  EXPECT_EQ(again->CountIn(TierLevel::kL1), 8u);
  EXPECT_EQ(Counter("prefetch_chunks"), 6u);
  EXPECT_EQ(Counter("promoted_chunks"), 6u);
  EXPECT_EQ(RetrieveMismatches(1, 8, 64), 0u);
}

// L2 of 0.01 GiB: 79 chunk files. A leased L2 chunk is pinned there.
class SmallL2Test : public TiersTest {
 protected:
  void SetUp() override {
    l2_gb_ = "0.01";
    extra_ = {"--lease-ms", "60000", "--max-lease-ms", "60000"};
    TiersTest::SetUp();
  }
};

TEST_F(SmallL2Test, LeasedChunkSurvivesTheCascadeFromL1ThroughL2) {
  const auto a = StorePrompt(1, 8, 0);
  uint32_t next = 100;
  // A leaves L1; L2 (79 files) holds A and the flood's newest.
  ASSERT_EQ(FloodUntilOutOfL1(Keys(a), &next)[1], 8u);
  auto hit = client_->Lookup(reg_.id, Keys(a)).get();
  ASSERT_TRUE(hit.ok());
  ASSERT_EQ(hit->hit_chunks, 8u);
  ASSERT_EQ(hit->CountIn(TierLevel::kL2), 8u);
  // Far more than L2 holds goes through L1 into L2: unleased chunks are
  // evicted from L2, the leased ones stay.
  const uint64_t evicted = TierCounter("L2", "evicted_chunks");
  for (int round = 0; round < 40 && TierCounter("L2", "evicted_chunks") < evicted + 100; ++round) {
    Flood(next++, 1);
  }
  ASSERT_TRUE(WaitForWrites());
  EXPECT_GE(TierCounter("L2", "evicted_chunks"), evicted + 100);
  std::vector<ChunkOutcome> outcomes;
  EXPECT_EQ(RetrieveMismatches(1, 8, 64, &outcomes, hit->lease_id), 0u);
  for (const auto& o : outcomes) EXPECT_EQ(o.result, ChunkResult::kRetrieved) << NameOf(o.result);
  // Without a lease the same flood pushes a prompt out of L2 for good.
  const auto b = StorePrompt(2, 8, 0);
  const uint64_t before = TierCounter("L2", "evicted_chunks");
  for (int round = 0; round < 40 && TierCounter("L2", "evicted_chunks") < before + 100; ++round) {
    Flood(next++, 1);
  }
  ASSERT_TRUE(WaitForWrites());
  auto gone = client_->Lookup(reg_.id, Keys(b)).get();
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->hit_chunks, 0u);
}

// A Redis port answered by anyone: a reply announcing 2^31 elements, then
// more of them for as long as the connection lasts. Lookups still answer,
// and SIGTERM still stops kvstashd promptly.
TEST(TiersHostileRedis, AHugeArrayReplyNeitherHoldsLookupsNorTheStop) {
  std::string more;
  for (int i = 0; i < 4096; ++i) more += ":1\r\n";
  auto peer = tiers::testing::RespPeer::Start([more](const std::vector<std::string>& c) {
    if (c.size() == 2 && c[0] == "CLUSTER") {
      return tiers::testing::RespPeer::Answer{"-ERR cluster support disabled\r\n", nullptr};
    }
    return tiers::testing::RespPeer::Answer{"*2147483647\r\n", [more] { return more; }};
  });
  ASSERT_TRUE(peer);
  auto daemon = DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.0078125",
                                      "--l1-slice-mb", "4", "--l3-redis", peer->endpoint()});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto engine = EngineKv::Create(EngineShape{});
  ASSERT_TRUE(engine.ok());
  ClientOptions options;
  options.socket = (*daemon)->socket();
  options.request_timeout = std::chrono::milliseconds(10000);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto reg = (*client)->RegisterKV(engine->Registration("hostile-model")).get();
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const auto tokens = PromptTokens(3, 4 * kChunkTokens, 0);
  auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), Blocks(0, 16).data(), 16);
  ASSERT_TRUE(chunks.ok());
  std::vector<ChunkKey> keys;
  for (const auto& c : *chunks) keys.push_back(c.key);
  for (int i = 0; i < 3; ++i) {  // each goes on to L3 and meets the reply
    auto hit = (*client)->Lookup(reg->id, keys).get();
    ASSERT_TRUE(hit.ok()) << hit.status().ToString();
    EXPECT_EQ(hit->hit_chunks, 0u);
  }
  client->reset();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ((*daemon)->Stop(), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

// Two "nodes": daemons with their own sockets and L1s, sharing one Redis.
TEST(TiersAcrossDaemons, AChunkStoredOnOneDaemonIsRetrievedByteExactOnAnother) {
  if (!tiers::testing::RedisAvailable()) GTEST_SKIP() << "redis-server is not installed";
  auto redis = tiers::testing::RedisProcess::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  const std::vector<std::string> args = {
      "--chunk-tokens", "64", "--l1-gb",    "0.0078125",
      "--l1-slice-mb",  "4",  "--l3-redis", (*redis)->endpoint()};
  auto node_a = DaemonProcess::Start(args);
  auto node_b = DaemonProcess::Start(args);
  ASSERT_TRUE(node_a.ok() && node_b.ok());
  auto engine = EngineKv::Create(EngineShape{});
  ASSERT_TRUE(engine.ok());
  auto connect = [](const DaemonProcess& d) {
    ClientOptions options;
    options.socket = d.socket();
    options.request_timeout = std::chrono::milliseconds(10000);
    auto c = Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto a = connect(**node_a);
  auto b = connect(**node_b);
  ASSERT_TRUE(a && b);
  auto reg_a = a->RegisterKV(engine->Registration("shared-model")).get();
  auto reg_b = b->RegisterKV(engine->Registration("shared-model")).get();
  ASSERT_TRUE(reg_a.ok() && reg_b.ok());

  const auto tokens = PromptTokens(7, 6 * kChunkTokens + 20, 0);  // 6 full chunks and a partial
  engine->Fill(kSeed, tokens, Blocks(0, 26));
  auto chunks_a = PromptChunks(*reg_a, tokens.data(), tokens.size(), Blocks(0, 26).data(), 26);
  ASSERT_TRUE(chunks_a.ok());
  auto stored = a->Store(reg_a->id, *chunks_a).get();
  ASSERT_TRUE(stored.ok());
  for (const auto& o : *stored) ASSERT_EQ(o.result, ChunkResult::kStored);
  // Written behind: wait until node A's L3 took all seven.
  for (int i = 0; i < 500; ++i) {
    auto s = a->Stats().get();
    ASSERT_TRUE(s.ok());
    if (json::parse(s->json)["tiers"]["L3"]["counters"]["put_chunks"].get<uint64_t>() >= 7) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto dst = Blocks(100, 26);
  auto chunks_b = PromptChunks(*reg_b, tokens.data(), tokens.size(), dst.data(), dst.size());
  ASSERT_TRUE(chunks_b.ok());
  std::vector<ChunkKey> keys;
  for (const auto& c : *chunks_b) keys.push_back(c.key);
  auto hit = b->Lookup(reg_b->id, keys).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->hit_chunks, 7u);
  EXPECT_EQ(hit->CountIn(TierLevel::kL3), 7u);
  EXPECT_EQ(hit->hit_tokens, tokens.size());

  engine->Poison(dst);
  auto got = b->Retrieve(reg_b->id, *chunks_b, 0, hit->lease_id).get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (const auto& o : *got) EXPECT_EQ(o.result, ChunkResult::kRetrieved) << NameOf(o.result);
  EXPECT_EQ(engine->CountMismatches(kSeed, tokens, dst, 0, tokens.size()), 0u);
}

}  // namespace
}  // namespace kvstash::testing
