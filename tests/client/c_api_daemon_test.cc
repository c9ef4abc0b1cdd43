// The C API through libkvstash.so against a real kvstashd (host backend):
// register shared memory, store a prompt, look it up, retrieve it into other
// blocks and compare the bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "c_api_fixture.h"

namespace kvstash::testing {
namespace {

// Bytes of `blocks` (in order) of every layer and kv, for comparison.
std::vector<uint8_t> Gather(const HostKvMemory& memory, const std::vector<uint32_t>& blocks) {
  std::vector<uint8_t> out;
  for (uint64_t layer = 0; layer < 2; ++layer) {
    for (uint64_t kv = 0; kv < 2; ++kv) {
      for (uint32_t b : blocks) {
        const uint8_t* p =
            memory.data() + layer * kLayerBytes + kv * kBlocks * kBlockBytes + b * kBlockBytes;
        out.insert(out.end(), p, p + kBlockBytes);
      }
    }
  }
  return out;
}

// Two layers, chunks of 64 tokens.
class CApiDaemon : public CApiTest {
 protected:
  CApiDaemon() : CApiTest(64, 2, "c-api-test") {}
};

TEST_F(CApiDaemon, StoresLooksUpAndRetrievesAPrompt) {
  const kvstash_registration reg = Register("c-model");
  ASSERT_NE(reg.id, 0u);
  EXPECT_EQ(reg.chunk_tokens, 64u);
  EXPECT_EQ(reg.num_groups, 1u);

  // 150 tokens: chunks of 64, 64 and 22 tokens in blocks 0..9.
  std::vector<int32_t> tokens(150);
  std::iota(tokens.begin(), tokens.end(), 1);
  std::vector<uint32_t> source(10), destination(10);
  std::iota(source.begin(), source.end(), 0);
  std::iota(destination.begin(), destination.end(), 20);
  std::vector<kvstash_chunk> chunks(kvstash_num_chunks(&reg, tokens.size()));
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), source.data(), source.size(),
                                  chunks.data()),
            KVSTASH_OK);
  std::vector<kvstash_chunk_outcome> outcomes(chunks.size());
  ASSERT_EQ(kvstash_store(client_, reg.id, chunks.data(), chunks.size(), outcomes.data()),
            KVSTASH_OK)
      << kvstash_last_error(client_);
  for (const auto& outcome : outcomes) EXPECT_EQ(outcome.result, KVSTASH_CHUNK_STORED);

  std::vector<kvstash_key> keys(chunks.size());
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), tokens.size(), keys.data()), KVSTASH_OK);
  kvstash_lookup_result hit = KVSTASH_LOOKUP_RESULT_INIT;
  ASSERT_EQ(kvstash_lookup_ex(client_, reg.id, keys.data(), keys.size(), 0, 0, &hit), KVSTASH_OK);
  EXPECT_EQ(hit.hit_chunks, 3u);
  EXPECT_EQ(hit.hit_tokens, 150u);
  EXPECT_NE(hit.lease_id, 0u);

  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), destination.data(),
                                  destination.size(), chunks.data()),
            KVSTASH_OK);
  ASSERT_EQ(kvstash_retrieve(client_, reg.id, chunks.data(), chunks.size(), 0, hit.lease_id,
                             outcomes.data()),
            KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(outcomes[2].result, KVSTASH_CHUNK_RETRIEVED);
  EXPECT_EQ(outcomes[2].num_tokens, 22u);
  // Tokens 0..149 fill blocks 0..8 and 6 slots of block 9.
  std::vector<uint32_t> full_source(source.begin(), source.begin() + 9);
  std::vector<uint32_t> full_destination(destination.begin(), destination.begin() + 9);
  EXPECT_EQ(Gather(*memory_, full_source), Gather(*memory_, full_destination));

  EXPECT_EQ(kvstash_release(client_, 123456789), KVSTASH_NOT_FOUND);
  EXPECT_NE(std::string(kvstash_last_error(client_)).find("NotFound"), std::string::npos);
  EXPECT_EQ(kvstash_unregister(client_, reg.id), KVSTASH_OK) << kvstash_last_error(client_);
}

// An SGLang token pool registers K and V as layers of kv_count 1, like an
// MLA latent; each rank holds its own heads there, so ranks must not share
// chunks unless the engine states that every rank holds the same KV.
TEST(CApiRanks, TokenPoolsAreStoredPerRankUnlessStatedReplicated) {
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "16", "--l1-gb", "0.03125", "--l1-slice-mb", "4"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  constexpr uint32_t kPoolTokens = 64, kPoolHeads = 2, kPoolHeadBytes = 32;
  constexpr uint64_t kPoolBytes = uint64_t{kPoolTokens} * kPoolHeads * kPoolHeadBytes;
  auto memory = HostKvMemory::Create(2 * kPoolBytes);  // K, then V
  ASSERT_TRUE(memory.ok());
  for (uint64_t i = 0; i < memory->size(); ++i) memory->data()[i] = uint8_t(i * 7 + 1);
  kvstash_options options = KVSTASH_OPTIONS_INIT;
  options.socket = (*daemon)->socket().c_str();
  kvstash_client* client = nullptr;
  ASSERT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  kvstash_geometry pool{};  // [pool_tokens, heads, head]: one token per block
  pool.num_blocks = kPoolTokens;
  pool.kv_count = 1;
  pool.block_tokens = 1;
  pool.num_heads = kPoolHeads;
  pool.head_bytes = kPoolHeadBytes;
  pool.block_stride = kPoolHeads * kPoolHeadBytes;
  pool.head_stride = kPoolHeadBytes;
  pool.dtype = KVSTASH_DTYPE_BF16;
  kvstash_allocation allocation{};
  allocation.kind = KVSTASH_ALLOCATION_SHM;
  allocation.shm_name = memory->name().c_str();
  allocation.size_bytes = memory->size();
  const kvstash_layer layers[2] = {{0, 0, pool}, {0, kPoolBytes, pool}};
  auto register_rank = [&](uint32_t rank, uint32_t replicated) {
    kvstash_register_options reg_options = KVSTASH_REGISTER_OPTIONS_INIT;
    reg_options.model = "sglang-model";
    reg_options.tp_rank = rank;
    reg_options.tp_size = 2;
    reg_options.allocations = &allocation;
    reg_options.num_allocations = 1;
    reg_options.layers = layers;
    reg_options.num_layers = 2;
    reg_options.replicated_across_ranks = replicated;
    kvstash_registration reg = KVSTASH_REGISTRATION_INIT;
    EXPECT_EQ(kvstash_register(client, &reg_options, &reg), KVSTASH_OK)
        << kvstash_last_error(client);
    return reg;
  };
  const kvstash_registration rank0 = register_rank(0, 0), rank1 = register_rank(1, 0);
  EXPECT_NE(0, std::memcmp(rank0.namespace_id, rank1.namespace_id, 32));

  // Rank 0 stores a prompt; rank 1 looks the same tokens up and finds none.
  std::vector<int32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<uint32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  kvstash_chunk chunk;
  ASSERT_EQ(kvstash_prompt_chunks(&rank0, tokens.data(), tokens.size(), blocks.data(),
                                  blocks.size(), &chunk),
            KVSTASH_OK);
  kvstash_chunk_outcome outcome{};
  ASSERT_EQ(kvstash_store(client, rank0.id, &chunk, 1, &outcome), KVSTASH_OK)
      << kvstash_last_error(client);
  EXPECT_EQ(outcome.result, KVSTASH_CHUNK_STORED);
  kvstash_key key;
  ASSERT_EQ(kvstash_chunk_keys(&rank1, tokens.data(), tokens.size(), &key), KVSTASH_OK);
  kvstash_lookup_result hit = KVSTASH_LOOKUP_RESULT_INIT;
  ASSERT_EQ(kvstash_lookup_ex(client, rank1.id, &key, 1, 0, 0, &hit), KVSTASH_OK);
  EXPECT_EQ(hit.hit_chunks, 0u) << "rank 1 found rank 0's heads";

  // Stated replicated (what an MLA engine says): one scope for both ranks.
  const kvstash_registration shared0 = register_rank(0, 1), shared1 = register_rank(1, 1);
  EXPECT_EQ(0, std::memcmp(shared0.namespace_id, shared1.namespace_id, 32));
  EXPECT_NE(0, std::memcmp(shared0.namespace_id, rank0.namespace_id, 32));
  kvstash_close(client);
}

// Two registrations of different chunk sizes share the pool in LRU order:
// once the first filled it, the second's chunks of earlier requests stay
// while older chunks of the first remain to be evicted (before, the second
// kept only the slabs it took first, and evicted its own newest chunks).
TEST(CApiPool, ASecondChunkSizeTakesThePoolFromOlderChunksNotFromItsOwn) {
  // 4 slabs of 1 MiB; chunks of 16 tokens: 128 KiB (8 a slab) and 64 KiB.
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "16", "--l1-gb", "0.00390625", "--l1-slice-mb", "1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  kvstash_options options = KVSTASH_OPTIONS_INIT;
  options.socket = (*daemon)->socket().c_str();
  kvstash_client* client = nullptr;
  ASSERT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  for (uint64_t ready = 0, capacity = 1; ready < capacity;) {  // every slab usable
    ASSERT_EQ(kvstash_pool_ready(client, &ready, &capacity), KVSTASH_OK);
  }
  constexpr uint32_t kPoolBlocks = 64;
  std::vector<HostKvMemory> memories;
  auto register_heads = [&](uint32_t heads) {
    const LayerGeometry g = VllmFlashNhdGeometry(kPoolBlocks, 16, heads, 512, DType::kBF16);
    auto memory = HostKvMemory::Create(LayerExtentBytes(g));
    EXPECT_TRUE(memory.ok());
    memories.push_back(std::move(*memory));
    kvstash_allocation allocation{};
    allocation.kind = KVSTASH_ALLOCATION_SHM;
    allocation.shm_name = memories.back().name().c_str();
    allocation.size_bytes = memories.back().size();
    const kvstash_layer layer{0, 0, ToCGeometry(g)};
    kvstash_register_options reg_options = KVSTASH_REGISTER_OPTIONS_INIT;
    reg_options.model = heads == 8 ? "large-chunks" : "small-chunks";
    reg_options.allocations = &allocation;
    reg_options.num_allocations = 1;
    reg_options.layers = &layer;
    reg_options.num_layers = 1;
    kvstash_registration reg = KVSTASH_REGISTRATION_INIT;
    EXPECT_EQ(kvstash_register(client, &reg_options, &reg), KVSTASH_OK)
        << kvstash_last_error(client);
    return reg;
  };
  const kvstash_registration large = register_heads(8), small = register_heads(4);
  ASSERT_EQ(large.chunk_bytes, 128u << 10);
  ASSERT_EQ(small.chunk_bytes, 64u << 10);
  // Chunk c of a request: key (tag, c), block c.
  std::vector<uint32_t> blocks(kPoolBlocks);
  std::iota(blocks.begin(), blocks.end(), 0u);
  auto chunks = [&](uint8_t tag, uint32_t first, uint32_t n) {
    std::vector<kvstash_chunk> out(n);
    for (uint32_t c = 0; c < n; ++c) {
      out[c] = kvstash_chunk{};
      out[c].key.bytes[0] = tag;
      out[c].key.bytes[1] = uint8_t(first + c);
      out[c].num_tokens = 16;
      out[c].block_ids = &blocks[first + c];
      out[c].num_block_ids = 1;
    }
    return out;
  };
  auto store = [&](const kvstash_registration& reg, uint8_t tag, uint32_t first, uint32_t n) {
    std::vector<kvstash_chunk> request = chunks(tag, first, n);
    std::vector<kvstash_chunk_outcome> outcomes(n);
    ASSERT_EQ(kvstash_store(client, reg.id, request.data(), n, outcomes.data()), KVSTASH_OK)
        << kvstash_last_error(client);
    for (const auto& o : outcomes) ASSERT_EQ(o.result, KVSTASH_CHUNK_STORED);
  };
  store(large, 1, 0, 32);  // the pool is full of large chunks
  for (uint32_t request = 0; request < 3; ++request) store(small, 2, request * 16, 16);
  // The small chunks of the first request are all still there.
  std::vector<kvstash_chunk> first = chunks(2, 0, 16);
  std::vector<kvstash_chunk_outcome> outcomes(16);
  ASSERT_EQ(kvstash_retrieve(client, small.id, first.data(), 16, 0, 0, outcomes.data()), KVSTASH_OK)
      << kvstash_last_error(client);
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(outcomes[c].result, KVSTASH_CHUNK_RETRIEVED) << c;
  kvstash_close(client);
}

}  // namespace
}  // namespace kvstash::testing
