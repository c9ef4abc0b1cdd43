// Everything one client can hold is bounded: leases (per client, in total, in
// bytes and in time), registrations, requests in flight and name sizes. One
// client cannot pin the pool so that every other store is refused.
#include <gtest/gtest.h>

#include <future>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x1171;

// A pool of eight 128 KiB chunks (as SmallPool in data_path_test.cc).
class Limits : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    return {"--chunk-tokens",
            "64",
            "--l1-gb",
            "0.001",
            "--l1-slice-mb",
            "1",
            "--max-leases-per-client",
            "3",
            "--max-registrations-per-client",
            "2",
            "--max-lease-ms",
            "1000",
            "--max-leased-share",
            "0.5",
            "--max-in-flight-per-client",
            "1"};
  }
  LookupResult Lease(Client& client, uint32_t prompt, const RegisteredKv& reg) {
    const auto t = PromptTokens(prompt, 64, 0);
    auto hit = client.Lookup(reg.id, ChunkKeys(reg, t.data(), t.size()), 60000).get();
    EXPECT_TRUE(hit.ok()) << hit.status().ToString();
    return hit.ok() ? *hit : LookupResult{};
  }
};

TEST_F(Limits, LeasesPerClientAreBoundedAndReleaseMakesRoom) {
  for (uint32_t p = 0; p < 2; ++p) FillAndStore(kSeed, PromptTokens(p, 64, 0), Blocks(0, 4));
  std::vector<uint64_t> leases;
  for (int i = 0; i < 3; ++i) leases.push_back(Lease(*client_, 0, reg_).lease_id);
  const auto t = PromptTokens(0, 64, 0);
  auto refused = client_->Lookup(reg_.id, ChunkKeys(reg_, t.data(), t.size())).get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("limit is 3"), std::string::npos)
      << refused.status().ToString();
  ASSERT_TRUE(client_->Release(leases[0]).get().ok());
  EXPECT_NE(Lease(*client_, 0, reg_).lease_id, 0u);
}

TEST_F(Limits, LeasedChunksTakeAtMostTheirShareSoOthersStillStore) {
  // Eight chunks fill the pool; this client tries to lease all of them.
  for (uint32_t p = 0; p < 8; ++p) {
    ASSERT_EQ(FillAndStore(kSeed, PromptTokens(p, 64, 0), Blocks(0, 4))[0].result,
              ChunkResult::kStored);
  }
  // Each one-chunk prompt is a prefix of its own: one Lookup each.
  uint32_t leased = 0;
  for (uint32_t p = 0; p < 3; ++p) leased += Lease(*client_, p, reg_).hit_chunks;
  std::unique_ptr<Client> second = Connect();
  ASSERT_NE(second, nullptr);
  auto reg2 = second->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(reg2.ok());
  for (uint32_t p = 3; p < 8; ++p) leased += Lease(*second, p, *reg2).hit_chunks;
  EXPECT_EQ(leased, 4u) << "half of an eight-chunk pool";
  EXPECT_GE(Counter("leases_truncated"), 1u);
  // A third client still stores: four chunks are evictable.
  std::unique_ptr<Client> third = Connect();
  ASSERT_NE(third, nullptr);
  auto reg3 = third->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(reg3.ok());
  for (uint32_t p = 100; p < 104; ++p) {
    const auto t = PromptTokens(p, 64, 0);
    engine_->Fill(kSeed, t, Blocks(0, 4));
    auto chunks = PromptChunks(*reg3, t.data(), t.size(), Blocks(0, 4).data(), 4);
    ASSERT_TRUE(chunks.ok());
    auto o = third->Store(reg3->id, *chunks).get();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ((*o)[0].result, ChunkResult::kStored) << p;
  }
}

TEST_F(Limits, ALookupCutByTheLeasedShareSaysSo) {
  for (uint32_t p = 0; p < 8; ++p) FillAndStore(kSeed, PromptTokens(p, 64, 0), Blocks(0, 4));
  std::unique_ptr<Client> second = Connect();
  ASSERT_NE(second, nullptr);
  auto reg2 = second->RegisterKV(engine_->Registration("test-model")).get();
  ASSERT_TRUE(reg2.ok());
  // Four chunks (half the pool) leased one by one: none was cut.
  for (uint32_t p = 0; p < 3; ++p) EXPECT_FALSE(Lease(*client_, p, reg_).lease_truncated) << p;
  EXPECT_FALSE(Lease(*second, 3, *reg2).lease_truncated);
  // The fifth is stored but past the budget: no hit, and the reply says why.
  LookupResult cut = Lease(*second, 4, *reg2);
  EXPECT_EQ(cut.hit_chunks, 0u);
  EXPECT_TRUE(cut.lease_truncated);
  // A key never stored ends the prefix as a miss, not a cut.
  const auto absent = PromptTokens(99, 64, 0);
  auto miss = second->Lookup(reg2->id, ChunkKeys(*reg2, absent.data(), absent.size())).get();
  ASSERT_TRUE(miss.ok()) << miss.status().ToString();
  EXPECT_FALSE(miss->lease_truncated);
}

TEST_F(Limits, LeaseDurationIsClamped) {
  FillAndStore(kSeed, PromptTokens(0, 64, 0), Blocks(0, 4));
  const auto t = PromptTokens(0, 64, 0);
  auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, t.data(), t.size()), 600000).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->lease_expires_ms, 1000u);
}

TEST_F(Limits, RegistrationsPerClientAreBounded) {
  ASSERT_TRUE(client_->RegisterKV(engine_->Registration("second")).get().ok());
  auto third = client_->RegisterKV(engine_->Registration("third")).get();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("limit is 2"), std::string::npos)
      << third.status().ToString();
  // Another connection has its own budget.
  std::unique_ptr<Client> other = Connect();
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->RegisterKV(engine_->Registration("other")).get().ok());
}

TEST_F(Limits, RequestsInFlightPerClientAreBounded) {
  // One request of this client may await its reply; the others sent
  // meanwhile are refused at once.
  const auto t = PromptTokens(0, 64, 0);
  ASSERT_EQ(FillAndStore(kSeed, t, Blocks(0, 4))[0].result, ChunkResult::kStored);
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> pending;
  for (int i = 0; i < 128; ++i)
    pending.push_back(client_->Retrieve(reg_.id, Chunks(t, Blocks(8, 4))));
  int refused = 0, served = 0;
  for (auto& f : pending) {
    auto got = f.get();
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted) << got.status().ToString();
      ++refused;
    } else {
      ++served;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(served, 0);
  EXPECT_GE(Counter("requests_refused_busy"), uint64_t(refused));
}

TEST_F(Limits, NamesLongerThan256BytesAreRefused) {
  auto reg = client_->RegisterKV(engine_->Registration(std::string(257, 'm'))).get();
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      reg.status().message().find("RegisterKVRequest.model: 257 bytes exceed the limit of 256"),
      std::string::npos);
  auto salted = client_->RegisterKV(engine_->Registration("m", std::string(300, 's'))).get();
  ASSERT_FALSE(salted.ok());
  EXPECT_EQ(salted.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::testing
