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
  kvstash_lookup_result hit{};
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

}  // namespace
}  // namespace kvstash::testing
