// The C API through libkvstash.so, with no daemon: connection failures,
// errors as codes plus per-handle text, keys and prompt chunks, and a ping
// answered by a fake ROUTER.
#include "kvstash/kvstash.h"

#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <string>

#include "fake_router.h"
#include "kvstash/client.h"

namespace kvstash::testing {
namespace {

kvstash_registration CRegistration(uint32_t chunk_tokens = 64, uint32_t block_tokens = 16) {
  kvstash_registration reg = KVSTASH_REGISTRATION_INIT;
  reg.id = 1;
  reg.chunk_tokens = chunk_tokens;
  reg.block_tokens = block_tokens;
  for (int i = 0; i < 32; ++i) reg.namespace_id[i] = uint8_t(i * 7);
  return reg;
}

TEST(CApi, FailedConnectStillGivesAHandleThatSaysWhy) {
  const std::string endpoint = UniqueIpcEndpoint();
  kvstash_options options{sizeof(kvstash_options), endpoint.c_str(), 200, "c-test"};
  kvstash_client* client = nullptr;
  EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_UNAVAILABLE);
  ASSERT_NE(client, nullptr);
  const std::string why = kvstash_last_error(client);
  EXPECT_NE(why.find("Unavailable"), std::string::npos) << why;
  EXPECT_NE(why.find(endpoint), std::string::npos) << why;
  uint64_t uptime = 0;
  EXPECT_EQ(kvstash_ping(client, &uptime), KVSTASH_UNAVAILABLE);
  EXPECT_NE(std::string(kvstash_last_error(client)).find("not connected"), std::string::npos);
  kvstash_close(client);
}

TEST(CApi, PingAndErrorsThroughAFakeDaemon) {
  FakeRouter router;
  const std::string endpoint = router.endpoint();
  kvstash_client* client = nullptr;
  auto connecting = std::async(std::launch::async, [&] {
    kvstash_options options{sizeof(kvstash_options), endpoint.c_str(), 3000, nullptr};
    return kvstash_connect(&options, &client);
  });
  ASSERT_TRUE(router.AnswerHello({9}));
  ASSERT_EQ(connecting.get(), KVSTASH_OK);
  EXPECT_STREQ(kvstash_last_error(client), "");

  uint64_t uptime = 0;
  auto ping = std::async(std::launch::async, [&] { return kvstash_ping(client, &uptime); });
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, PingReply(request->request_id(), 777));
  EXPECT_EQ(ping.get(), KVSTASH_OK);
  EXPECT_EQ(uptime, 777u);

  auto release = std::async(std::launch::async, [&] {
    const kvstash_status status = kvstash_release(client, 99);
    return std::make_pair(status, std::string(kvstash_last_error(client)));
  });
  request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, proto::ErrorMessage(request->request_id(),
                                             Status::NotFound("lease 99 is unknown or expired")));
  const auto [status, text] = release.get();
  EXPECT_EQ(status, KVSTASH_NOT_FOUND);
  EXPECT_EQ(text, "NotFound: lease 99 is unknown or expired");
  // The text belongs to the thread that made the call.
  EXPECT_STREQ(kvstash_last_error(client), "");
  kvstash_close(client);
}

TEST(CApi, StatusNamesComeFromTheSchema) {
  EXPECT_STREQ(kvstash_status_name(KVSTASH_OK), "Ok");
  EXPECT_STREQ(kvstash_status_name(KVSTASH_OUT_OF_RANGE), "OutOfRange");
  EXPECT_STREQ(kvstash_status_name(KVSTASH_CANCELLED), "Cancelled");
}

TEST(CApi, ChunkKeysMatchTheCppApi) {
  const kvstash_registration reg = CRegistration();
  std::vector<int32_t> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 5);
  ASSERT_EQ(kvstash_num_chunks(&reg, tokens.size()), 4u);
  std::vector<kvstash_key> keys(4);
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), tokens.size(), keys.data()), KVSTASH_OK);
  RegisteredKv cpp;
  cpp.chunk_tokens = 64;
  cpp.block_tokens = 16;
  std::copy(std::begin(reg.namespace_id), std::end(reg.namespace_id), cpp.namespace_id.begin());
  const auto expected = ChunkKeys(cpp, tokens.data(), tokens.size());
  ASSERT_EQ(expected.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::equal(expected[i].begin(), expected[i].end(), keys[i].bytes)) << i;
  }
}

TEST(CApi, PromptChunksPointIntoTheBlockTable) {
  const kvstash_registration reg = CRegistration(64, 16);
  std::vector<int32_t> tokens(150, 3);
  std::vector<uint32_t> table(10);
  std::iota(table.begin(), table.end(), 40);
  std::vector<kvstash_chunk> chunks(kvstash_num_chunks(&reg, tokens.size()));
  ASSERT_EQ(chunks.size(), 3u);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), table.data(), table.size(),
                                  chunks.data()),
            KVSTASH_OK);
  EXPECT_EQ(chunks[0].num_tokens, 64u);
  EXPECT_EQ(chunks[0].block_ids, table.data());
  EXPECT_EQ(chunks[0].num_block_ids, 4u);
  EXPECT_EQ(chunks[2].num_tokens, 22u);
  EXPECT_EQ(chunks[2].block_ids, table.data() + 8);
  EXPECT_EQ(chunks[2].num_block_ids, 2u);
  EXPECT_EQ(
      kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), table.data(), 9, chunks.data()),
      KVSTASH_INVALID_ARGUMENT);
}

TEST(CApi, AChainContinuedFromAnyChunkEqualsTheChainFromTokenZero) {
  const kvstash_registration reg = CRegistration(64, 16);
  std::vector<int32_t> tokens(64 * 5 + 17);  // five full chunks and a partial one
  std::iota(tokens.begin(), tokens.end(), -40);
  std::vector<kvstash_key> whole(kvstash_num_chunks(&reg, tokens.size()));
  ASSERT_EQ(whole.size(), 6u);
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), tokens.size(), whole.data()), KVSTASH_OK);
  for (size_t from = 0; from < whole.size(); ++from) {
    const kvstash_key* previous = from == 0 ? nullptr : &whole[from - 1];
    const int32_t* rest = tokens.data() + from * 64;
    const size_t rest_tokens = tokens.size() - from * 64;
    std::vector<kvstash_key> keys(whole.size() - from);
    ASSERT_EQ(kvstash_chunk_keys_after(&reg, previous, rest, rest_tokens, keys.data()), KVSTASH_OK);
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(
          std::equal(std::begin(keys[i].bytes), std::end(keys[i].bytes), whole[from + i].bytes))
          << "chain continued after chunk " << from << ", key " << i;
    }
  }
  // Another previous key is another chain.
  kvstash_key other = whole[0];
  other.bytes[31] ^= 1;
  kvstash_key key;
  ASSERT_EQ(kvstash_chunk_keys_after(&reg, &other, tokens.data() + 64, 64, &key), KVSTASH_OK);
  EXPECT_FALSE(std::equal(std::begin(key.bytes), std::end(key.bytes), whole[1].bytes));
}

TEST(CApi, PromptChunksContinuedFromAChunkBoundaryIndexTheirOwnBlockTable) {
  const kvstash_registration reg = CRegistration(64, 16);
  std::vector<int32_t> tokens(64 * 3 + 20);
  std::iota(tokens.begin(), tokens.end(), 9);
  std::vector<uint32_t> table(14);
  std::iota(table.begin(), table.end(), 100);
  std::vector<kvstash_chunk> whole(4);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), table.data(), table.size(),
                                  whole.data()),
            KVSTASH_OK);
  // From chunk 2 on: tokens and the block table both start at token 128.
  std::vector<kvstash_chunk> rest(2);
  ASSERT_EQ(kvstash_prompt_chunks_after(&reg, &whole[1].key, tokens.data() + 128,
                                        tokens.size() - 128, table.data() + 8, 6, rest.data()),
            KVSTASH_OK);
  for (size_t i = 0; i < rest.size(); ++i) {
    const kvstash_chunk& expected = whole[2 + i];
    EXPECT_TRUE(
        std::equal(std::begin(rest[i].key.bytes), std::end(rest[i].key.bytes), expected.key.bytes))
        << i;
    EXPECT_EQ(rest[i].num_tokens, expected.num_tokens) << i;
    EXPECT_EQ(rest[i].block_ids, expected.block_ids) << i;
    EXPECT_EQ(rest[i].num_block_ids, expected.num_block_ids) << i;
  }
  EXPECT_EQ(rest[1].num_tokens, 20u);
  // 84 tokens in blocks of 16 need 6 entries.
  EXPECT_EQ(kvstash_prompt_chunks_after(&reg, &whole[1].key, tokens.data() + 128, 84,
                                        table.data() + 8, 5, rest.data()),
            KVSTASH_INVALID_ARGUMENT);
}

TEST(CApi, ContinuedChainsRefuseBadArguments) {
  const kvstash_registration reg = CRegistration(64, 16);
  std::vector<int32_t> tokens(64, 1);
  std::vector<uint32_t> table(4, 0);
  kvstash_key previous{};
  kvstash_key key;
  kvstash_chunk chunk;
  EXPECT_EQ(kvstash_chunk_keys_after(nullptr, &previous, tokens.data(), 64, &key),
            KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_chunk_keys_after(&reg, &previous, nullptr, 64, &key), KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_chunk_keys_after(&reg, &previous, tokens.data(), 64, nullptr),
            KVSTASH_INVALID_ARGUMENT);
  kvstash_registration short_struct = reg;
  short_struct.struct_size = 8;
  EXPECT_EQ(kvstash_chunk_keys_after(&short_struct, &previous, tokens.data(), 64, &key),
            KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_prompt_chunks_after(&reg, &previous, tokens.data(), 64, nullptr, 4, &chunk),
            KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(
      kvstash_prompt_chunks_after(&reg, &previous, tokens.data(), 64, table.data(), 4, nullptr),
      KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(
      kvstash_prompt_chunks_after(&reg, &previous, tokens.data(), 64, table.data(), 3, &chunk),
      KVSTASH_INVALID_ARGUMENT);
  const kvstash_registration misaligned = CRegistration(64, 24);  // 64 is no multiple of 24
  EXPECT_EQ(kvstash_prompt_chunks_after(&misaligned, &previous, tokens.data(), 64, table.data(), 4,
                                        &chunk),
            KVSTASH_INVALID_ARGUMENT);
  // No tokens: nothing to write, nothing to read.
  EXPECT_EQ(kvstash_chunk_keys_after(&reg, &previous, nullptr, 0, nullptr), KVSTASH_OK);
}

TEST(CApi, NullArgumentsAreInvalid) {
  EXPECT_EQ(kvstash_connect(nullptr, nullptr), KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_ping(nullptr, nullptr), KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_chunk_keys(nullptr, nullptr, 0, nullptr), KVSTASH_INVALID_ARGUMENT);
  kvstash_close(nullptr);
}

}  // namespace
}  // namespace kvstash::testing
