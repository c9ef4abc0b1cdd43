// A registration and its leases belong to the connection that made them:
// another connection naming them is told exactly what it would be told about
// an id never granted, ids are not guessable, and describe never shows a
// tenant salt or namespace id.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x0a11;

class Ownership : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    other_ = Connect();
    ASSERT_NE(other_, nullptr);
    tokens_ = PromptTokens(11, 128, 0);
    for (const ChunkOutcome& o : FillAndStore(kSeed, tokens_, Blocks(0, 8))) {
      ASSERT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
    }
  }
  // The message with the id in it replaced, so that texts about two ids
  // compare.
  static std::string WithoutId(const std::string& message, uint64_t id) {
    std::string out = message;
    const std::string text = std::to_string(id);
    for (size_t at; (at = out.find(text)) != std::string::npos;) out.replace(at, text.size(), "ID");
    return out;
  }
  // A registration id nobody holds.
  uint64_t UnknownId() const { return reg_.id ^ 0x5a5a5a5a5a5a5a5aull; }

  std::unique_ptr<Client> other_;
  std::vector<int32_t> tokens_;
};

TEST_F(Ownership, AnotherConnectionNamingARegistrationGetsTheUnknownIdReply) {
  const std::vector<ChunkKey> keys = ChunkKeys(reg_, tokens_.data(), tokens_.size());
  struct Attempt {
    const char* what;
    std::function<Status(uint64_t)> run;
  };
  const std::vector<Attempt> attempts = {
      {"lookup", [&](uint64_t id) { return other_->Lookup(id, keys).get().status(); }},
      {"store",
       [&](uint64_t id) {
         return other_->Store(id, Chunks(tokens_, Blocks(20, 8))).get().status();
       }},
      {"retrieve",
       [&](uint64_t id) {
         return other_->Retrieve(id, Chunks(tokens_, Blocks(40, 8))).get().status();
       }},
      {"unregister", [&](uint64_t id) { return other_->UnregisterKV(id).get(); }},
  };
  engine_->Poison(Blocks(40, 8));
  for (const Attempt& attempt : attempts) {
    const Status theirs = attempt.run(reg_.id);
    const Status unknown = attempt.run(UnknownId());
    EXPECT_EQ(theirs.code(), StatusCode::kNotFound) << attempt.what << ": " << theirs.ToString();
    EXPECT_EQ(WithoutId(theirs.message(), reg_.id), WithoutId(unknown.message(), UnknownId()))
        << attempt.what;
  }
  // Nothing was written into the owner's memory, and its registration is
  // intact and serves it.
  EXPECT_EQ(engine_->CountNotPoison(Blocks(40, 8), 0, 128), 0u);
  auto hit = client_->Lookup(reg_.id, keys).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->hit_chunks, 2u);
  auto got = client_->Retrieve(reg_.id, Chunks(tokens_, Blocks(40, 8)), 0, hit->lease_id).get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (const ChunkOutcome& o : *got) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens_, Blocks(40, 8), 0, 128), 0u);
}

TEST_F(Ownership, AnotherConnectionCannotReleaseALease) {
  const std::vector<ChunkKey> keys = ChunkKeys(reg_, tokens_.data(), tokens_.size());
  auto hit = client_->Lookup(reg_.id, keys).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  ASSERT_NE(hit->lease_id, 0u);
  const Status theirs = other_->Release(hit->lease_id).get().status();
  const Status unknown = other_->Release(hit->lease_id ^ 1).get().status();
  EXPECT_EQ(theirs.code(), StatusCode::kNotFound);
  EXPECT_EQ(WithoutId(theirs.message(), hit->lease_id),
            WithoutId(unknown.message(), hit->lease_id ^ 1));
  auto released = client_->Release(hit->lease_id).get();
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(*released, 2u);
}

TEST_F(Ownership, RegistrationAndLeaseIdsAreRandomAndNeverZero) {
  std::set<uint64_t> registrations{reg_.id};
  for (int i = 0; i < 8; ++i) {
    auto reg = client_->RegisterKV(engine_->Registration("ids-model")).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    registrations.insert(reg->id);
  }
  const std::vector<ChunkKey> keys = ChunkKeys(reg_, tokens_.data(), tokens_.size());
  std::set<uint64_t> leases;
  for (int i = 0; i < 8; ++i) {
    auto hit = client_->Lookup(reg_.id, keys).get();
    ASSERT_TRUE(hit.ok()) << hit.status().ToString();
    leases.insert(hit->lease_id);
  }
  for (const std::set<uint64_t>* ids : {&registrations, &leases}) {
    ASSERT_EQ(ids->size(), 9u - (ids == &leases ? 1u : 0u));
    EXPECT_EQ(ids->count(0), 0u);
    // Sequential or small ids would sit within a few thousand of each other.
    EXPECT_GT(*ids->rbegin() - *ids->begin(), uint64_t{1} << 40);
  }
}

TEST_F(Ownership, DescribeNeverShowsATenantSaltOrNamespace) {
  auto engine = EngineKv::Create(EngineShape{});
  ASSERT_TRUE(engine.ok());
  auto reg = other_->RegisterKV(engine->Registration("salted-model", "salt-of-tenant-b")).get();
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  std::string hex;
  for (uint8_t b : reg->namespace_id)
    hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  for (Client* viewer : {client_.get(), other_.get()}) {
    auto text = viewer->Describe().get();
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(text->find("salt-of-tenant-b"), std::string::npos) << *text;
    EXPECT_EQ(text->find(hex), std::string::npos) << *text;
    auto stats = viewer->Stats().get();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->json.find("salt-of-tenant-b"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvstash::testing
