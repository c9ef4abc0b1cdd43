// An engine that shrinks its registered shared memory (ftruncate) after
// registering makes the daemon's copies of it fault (SIGBUS). Those copies
// fail per chunk with an error naming the object; nothing half-copied is
// stored; the daemon keeps serving every other engine.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0x5412;

class ShrinkingMemory : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    auto engine = EngineKv::Create(EngineShape{});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    shrinker_.emplace(std::move(*engine));
    auto reg = client_->RegisterKV(shrinker_->Registration("shrinking-model")).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    shrinker_reg_ = *reg;
  }
  // Truncates the shrinker's shm object to 0 bytes, as a buggy engine might.
  // This process must not touch its own mapping of it afterwards.
  void Shrink() {
    const RegisterOptions options = shrinker_->Registration("unused");
    const std::string name = std::get<HostShm>(options.allocations.front()).name;
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << name;
    ASSERT_EQ(ftruncate(fd, 0), 0);
    close(fd);
  }
  std::vector<ChunkBlocks> ShrinkerChunks(const std::vector<int32_t>& tokens,
                                          const std::vector<uint32_t>& blocks) {
    auto chunks =
        PromptChunks(shrinker_reg_, tokens.data(), tokens.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }

  std::optional<EngineKv> shrinker_;
  RegisteredKv shrinker_reg_;
};

TEST_F(ShrinkingMemory, CopiesFailPerChunkAndTheDaemonServesOthers) {
  // Stored while the memory was whole.
  const auto before = PromptTokens(1, 128, 0);
  shrinker_->Fill(kSeed, before, Blocks(0, 8));
  auto stored = client_->Store(shrinker_reg_.id, ShrinkerChunks(before, Blocks(0, 8))).get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  for (const ChunkOutcome& o : *stored) ASSERT_EQ(o.result, ChunkResult::kStored);

  Shrink();

  // A store now gathers from memory that is gone: every chunk fails, and
  // none of them is left visible to Lookup.
  const auto after = PromptTokens(2, 192, 0);
  const auto after_chunks = ShrinkerChunks(after, Blocks(16, 12));
  auto store = client_->Store(shrinker_reg_.id, after_chunks).get();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ(store->size(), 3u);
  for (const ChunkOutcome& o : *store) {
    EXPECT_EQ(o.result, ChunkResult::kFailed);
    EXPECT_EQ(o.error.code(), StatusCode::kDeviceError) << o.error.ToString();
    EXPECT_NE(o.error.message().find("shrank under the daemon"), std::string::npos)
        << o.error.message();
  }
  std::vector<ChunkKey> keys;
  for (const ChunkBlocks& c : after_chunks) keys.push_back(c.key);
  auto lookup = client_->Lookup(shrinker_reg_.id, keys).get();
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->hit_chunks, 0u);

  // A retrieve scatters into memory that is gone: per-chunk failures too.
  auto retrieve = client_->Retrieve(shrinker_reg_.id, ShrinkerChunks(before, Blocks(100, 8))).get();
  ASSERT_TRUE(retrieve.ok()) << retrieve.status().ToString();
  ASSERT_EQ(retrieve->size(), 2u);
  for (const ChunkOutcome& o : *retrieve) {
    EXPECT_EQ(o.result, ChunkResult::kFailed);
    EXPECT_NE(o.error.message().find("shrank under the daemon"), std::string::npos)
        << o.error.message();
  }

  // The daemon lives and serves the others: a ping from another client, and
  // a verified round trip for the healthy engine.
  ASSERT_TRUE(daemon_->running());
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->Ping().get().ok());
  const auto tokens = PromptTokens(3, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(kSeed, tokens, Blocks(0, 8))) {
    EXPECT_EQ(o.result, ChunkResult::kStored);
  }
  engine_->Poison(Blocks(50, 8));
  auto back = client_->Retrieve(reg_.id, Chunks(tokens, Blocks(50, 8))).get();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (const ChunkOutcome& o : *back) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(50, 8), 0, 128), 0u);
  EXPECT_GE(Counter("store_chunks_failed"), 3u);
  EXPECT_TRUE(daemon_->running());
}

}  // namespace
}  // namespace kvstash::testing
